//! The engine of a guest running `ssdd` on one vCPU: every guest page touch goes through
//! the vCPU's TLB, a miss through a two-dimensional walk (guest tables, each reference
//! translated through EPT) or, under shadow paging, a walk of KVM's shadow tables; a CR0
//! write exits or not per the VMCS mask and then runs the KVM variant; the root is loaded
//! and its tag flushed at the next entry. The busiest vCPU's time is the benchmark's run
//! time (the other vCPUs run their own pairs in parallel and hold their root references).

use super::ept::{load_cycles, VcpuTlb};
use super::guest::{Guest, GuestOp};
use super::kvm_mmu::{KvmMmu, MmuFlavour, MmuStats, Variant};
use super::oracle::{self, Cr0Probe};
use super::params::{GuestParams, KvmCosts};
use super::placement::{MeasuredPlacement, Placement};
use super::vmx::{Cr0Controls, ExitReason, CR0_PG, CR0_WP};
use super::GuestPhysAddr;
use crate::arch::caches::CacheHierarchy;
use crate::arch::x86::psc::PscEntry;
use crate::arch::x86::tlb::TlbEntry;
use crate::arch::x86::{PageSize, Pcid, PhysAddr, PteFlags, VirtAddr};
use crate::error::{Error, Result};
use crate::machine::MachineProfile;
use crate::machine::{VirtFlavour, VirtHardware};
use crate::params::Params;

#[derive(Debug, Clone)]
pub struct SsddConfig {
    pub flavour: MmuFlavour,
    pub variant: Variant,
    pub vcpus: u64,
    /// Steps simulated before measuring (roots, TLBs and EPT warm).
    pub warmup_steps: u64,
    /// Steps measured; the run time scales their cost to every step of the benchmark.
    pub sample_steps: u64,
    /// Check the CR0.WP property after every CR0 write.
    pub oracle: bool,
    pub guest: GuestParams,
    pub costs: KvmCosts,
    pub seed: u64,
}

impl SsddConfig {
    /// A run of `params`' guest and KVM costs, the other choices at their defaults.
    pub fn new(flavour: MmuFlavour, variant: Variant, params: &Params) -> SsddConfig {
        SsddConfig {
            flavour,
            variant,
            vcpus: 1,
            warmup_steps: 200,
            sample_steps: 1000,
            oracle: false,
            guest: GuestParams::from(params),
            costs: KvmCosts::from(params),
            seed: 1,
        }
    }
}

/// Where the vCPU's cycles went, per ssdd step.
#[derive(Debug, Clone, Default)]
pub struct Breakdown {
    pub guest_work: f64,
    /// TLB second-level hits and walks (2-D under EPT, through shadow tables otherwise).
    pub walks: f64,
    /// Hardware exits and entries plus KVM's exit/entry path.
    pub exit_entry: f64,
    /// CR0 exit handling and the MMU work it triggers (reset, unload, init, load).
    pub cr0_mmu: f64,
    /// Fresh roots allocated.
    pub root_build: f64,
    /// EPT violations and shadow #PFs handled, tables allocated.
    pub faults: f64,
    /// INVEPT / INVVPID instructions.
    pub flush: f64,
    /// Shadow paging: CR3 exits' kvm_mmu_new_pgd.
    pub cr3: f64,
    /// #DB reinjection.
    pub debug: f64,
    /// Shadow paging: writes to write-protected guest page tables (emulation and
    /// kvm_mmu_pte_write; their exits are in exit+entry, their TLB flushes in INVEPT/INVVPID).
    pub emulation: f64,
}

impl Breakdown {
    pub fn total(&self) -> f64 {
        self.guest_work
            + self.walks
            + self.exit_entry
            + self.cr0_mmu
            + self.root_build
            + self.faults
            + self.flush
            + self.cr3
            + self.debug
            + self.emulation
    }
    pub fn named(&self) -> [(&'static str, f64); 10] {
        [
            ("guest work", self.guest_work),
            ("TLB refill walks", self.walks),
            ("exit+entry", self.exit_entry),
            ("CR0 handling+MMU", self.cr0_mmu),
            ("root builds", self.root_build),
            ("EPT violations/#PF", self.faults),
            ("INVEPT/INVVPID", self.flush),
            ("CR3 exits", self.cr3),
            ("#DB reinjection", self.debug),
            ("gPT write emulation", self.emulation),
        ]
    }
}

#[derive(Debug, Clone, Default)]
pub struct Counts {
    pub exits: [u64; 3],
    pub cr0_writes: u64,
    pub ept_violations: u64,
    pub shadow_pf: u64,
    pub walks: u64,
    pub walk_refs: u64,
    pub flushes: u64,
    /// Shadow paging: guest page-table writes that faulted on write protection.
    pub pt_write_faults: u64,
    /// Of those, the writes whose zapped SPTE was present, each followed by a TLB flush.
    pub pt_write_flushes: u64,
    /// Walks of the guest's page tables KVM makes in software (emulate.rs), and the guest
    /// entries they read.
    pub sw_walks: u64,
    pub sw_walk_levels: u64,
    /// Instructions KVM emulated after their exit (GuestOp::EmulatedStore): their exits are
    /// counted here, not in `exits`, whose three reasons are the ones the tables report.
    pub emulated_insns: u64,
}

#[derive(Debug, Clone)]
pub struct SsddResult {
    /// Run time of the whole benchmark, seconds.
    pub seconds: f64,
    /// ssdd steps the busiest vCPU runs.
    pub steps: u64,
    /// Per measured step.
    pub per_step: Breakdown,
    pub counts: Counts,
    pub mmu: MmuStats,
    pub measured_steps: u64,
    pub violations: Vec<String>,
}

/// Checks that the machine can run the flavour; a one-line error otherwise.
pub fn check_support(m: &MachineProfile, flavour: MmuFlavour) -> Result<VirtHardware> {
    let hw = m.virt.clone().ok_or_else(|| {
        Error::at(
            format!("machines/{}.toml", m.name),
            "[virt]: no hardware virtualization section; KVM cannot run on this profile",
        )
    })?;
    if flavour.direct() && !hw.ept {
        return Err(Error::at(
            format!("machines/{}.toml", m.name),
            format!(
                "[virt] ept = false: the {} MMU needs EPT/NPT; use --mmu shadow",
                flavour.name()
            ),
        ));
    }
    Ok(hw)
}

/// Runs a short ssdd with the CR0.WP oracle on (virt/oracle.rs) for every MMU flavour the
/// machine supports; returns each flavour's violations.
pub fn check_variant(
    m: &MachineProfile,
    variant: Variant,
    params: &Params,
) -> Result<Vec<(MmuFlavour, Vec<String>)>> {
    let mut out = vec![];
    for flavour in MmuFlavour::ALL {
        if check_support(m, flavour).is_err() {
            continue;
        }
        let mut cfg = SsddConfig::new(flavour, variant, params);
        cfg.oracle = true;
        cfg.warmup_steps = 0;
        cfg.sample_steps = 40;
        cfg.guest.wp_pairs_other_per_step = 1.5;
        out.push((flavour, run_ssdd(m, &cfg)?.violations));
    }
    Ok(out)
}

/// The guest of the guest-owned CR0.WP bug that cf9f4c0eb169 fixed, as Mathias Krause's trace
/// shows it, on every MMU flavour the machine supports: its last CR0 write that exited set
/// WP (boot); it clears WP (pax_open_kernel, no exit where the guest owns the bit), runs an
/// instruction KVM emulates that stores to the read-only GDT (LTR under UMIP emulation), and
/// sets WP again. The probe after each CR0 write is off: only the emulated store is judged.
pub fn emulated_store_after_wp_toggle(
    m: &MachineProfile,
    variant: Variant,
    params: &Params,
) -> Result<Vec<(MmuFlavour, Vec<String>)>> {
    let mut out = vec![];
    for flavour in MmuFlavour::ALL {
        let Ok(hw) = check_support(m, flavour) else {
            continue;
        };
        let cfg = SsddConfig::new(flavour, variant, params);
        let mut v = Vcpu::new(m, hw, &cfg, 1);
        v.ensure_loaded();
        let gdt = v.guest.gdt;
        for op in [
            GuestOp::OpenKernel,
            GuestOp::EmulatedStore(gdt),
            GuestOp::CloseKernel,
        ] {
            v.op(op);
        }
        out.push((flavour, v.violations));
    }
    Ok(out)
}

pub fn run_ssdd(m: &MachineProfile, cfg: &SsddConfig) -> Result<SsddResult> {
    let hw = check_support(m, cfg.flavour)?;
    if cfg.vcpus == 0 || cfg.sample_steps == 0 || cfg.guest.pairs == 0 {
        return Err(Error::new(
            "ssdd: vCPUs, pairs and sample steps must be positive",
        ));
    }
    let pairs = cfg.guest.pairs.div_ceil(cfg.vcpus);
    if cfg.guest.placement == Placement::Measured {
        let measured = MeasuredPlacement::builtin();
        if measured.ram_mib != cfg.guest.guest_ram_mib || measured.pairs() < pairs {
            return Err(Error::new(format!(
                "guest.placement = measured: the measurement has {} pairs in {} MiB; this run needs {pairs} pairs on a vCPU in guest.guest_ram_mib = {} (use placement packed or scattered)",
                measured.pairs(),
                measured.ram_mib,
                cfg.guest.guest_ram_mib
            )));
        }
    }
    let mut v = Vcpu::new(m, hw, cfg, pairs);
    let ops: Vec<Vec<GuestOp>> = (0..pairs as usize).map(|p| v.guest.step_ops(p)).collect();
    v.ensure_loaded();
    for s in 0..cfg.warmup_steps {
        v.step(&ops[(s % pairs) as usize]);
    }
    v.acct = Breakdown::default();
    v.counts = Counts::default();
    let mmu_before = v.mmu.stats.clone();
    for s in 0..cfg.sample_steps {
        v.step(&ops[(s % pairs) as usize]);
    }
    let n = cfg.sample_steps as f64;
    let b = &v.acct;
    let per_step = Breakdown {
        guest_work: b.guest_work / n,
        walks: b.walks / n,
        exit_entry: b.exit_entry / n,
        cr0_mmu: b.cr0_mmu / n,
        root_build: b.root_build / n,
        faults: b.faults / n,
        flush: b.flush / n,
        cr3: b.cr3 / n,
        debug: b.debug / n,
        emulation: b.emulation / n,
    };
    let steps = pairs * cfg.guest.steps_per_pair;
    let seconds = per_step.total() * steps as f64 / (m.cpu.frequency_ghz * 1e9);
    let mmu = diff(&v.mmu.stats, &mmu_before);
    Ok(SsddResult {
        seconds,
        steps,
        per_step,
        counts: v.counts.clone(),
        mmu,
        measured_steps: cfg.sample_steps,
        violations: v.violations,
    })
}

pub(crate) fn diff(a: &MmuStats, b: &MmuStats) -> MmuStats {
    MmuStats {
        resets: a.resets - b.resets,
        init_mmu: a.init_mmu - b.init_mmu,
        roots_freed: a.roots_freed - b.roots_freed,
        roots_built: a.roots_built - b.roots_built,
        root_loads: a.root_loads - b.root_loads,
        roots_zapped: a.roots_zapped - b.roots_zapped,
        sptes_zapped: a.sptes_zapped - b.sptes_zapped,
        tables_allocated: a.tables_allocated - b.tables_allocated,
        cr3_fast: a.cr3_fast - b.cr3_fast,
        cr3_slow: a.cr3_slow - b.cr3_slow,
    }
}

/// The tag shadow paging's translations carry: the vCPU's VPID only.
const SHADOW_TAG: Pcid = Pcid(0);

pub(crate) struct Vcpu<'a> {
    pub(super) hw: VirtHardware,
    pub(super) cfg: &'a SsddConfig,
    pub guest: Guest,
    pub mmu: KvmMmu,
    pub(super) tlb: VcpuTlb,
    pub(super) caches: CacheHierarchy,
    pub cr0: u64,
    ctl: Cr0Controls,
    pub(super) proc: usize,
    pub(super) tag: Pcid,
    carry: f64,
    pub(super) acct: Breakdown,
    pub(super) counts: Counts,
    pub violations: Vec<String>,
}

impl<'a> Vcpu<'a> {
    pub(crate) fn new(
        m: &MachineProfile,
        hw: VirtHardware,
        cfg: &'a SsddConfig,
        pairs: u64,
    ) -> Vcpu<'a> {
        let cr0 = CR0_PG | CR0_WP;
        let ctl = Cr0Controls::new(cr0, cfg.variant.guest_owns_wp(cfg.flavour, hw.flavour));
        let others = (cfg.vcpus - 1) as u32;
        Vcpu {
            hw,
            cfg,
            guest: Guest::build(&cfg.guest, pairs, cfg.seed),
            mmu: KvmMmu::new(cfg.flavour, cfg.variant, others, cr0),
            tlb: VcpuTlb::new(m),
            caches: CacheHierarchy::new(m),
            cr0,
            ctl,
            proc: 0,
            tag: SHADOW_TAG,
            carry: 0.0,
            acct: Breakdown::default(),
            counts: Counts::default(),
            violations: vec![],
        }
    }

    fn step(&mut self, ops: &[GuestOp]) {
        self.acct.guest_work += self.cfg.guest.guest_work_cycles_per_step;
        for &op in ops {
            self.op(op);
        }
    }

    pub(crate) fn op(&mut self, op: GuestOp) {
        match op {
            GuestOp::Touch { va, write, user } => {
                let allowed = self.access(va, write, user);
                if !allowed {
                    self.violations.push(format!(
                        "guest {} write to {va} faulted with CR0.WP={}",
                        if user { "user" } else { "kernel" },
                        self.wp() as u8
                    ));
                }
            }
            GuestOp::Cr3(p) => self.write_cr3(p),
            GuestOp::OpenKernel => self.write_cr0(self.cr0 & !CR0_WP),
            GuestOp::CloseKernel => self.write_cr0(self.cr0 | CR0_WP),
            GuestOp::OtherToggles(share) => {
                self.carry += share * self.cfg.guest.wp_pairs_other_per_step;
                while self.carry >= 1.0 {
                    self.carry -= 1.0;
                    self.write_cr0(self.cr0 & !CR0_WP);
                    let ro = self.guest.rodata;
                    self.op(GuestOp::Touch {
                        va: ro,
                        write: true,
                        user: false,
                    });
                    self.write_cr0(self.cr0 | CR0_WP);
                }
            }
            GuestOp::Fetch { va, lines } => self.fetch(va, lines),
            GuestOp::ClonePgd(next) => self.clone_pgd(next),
            GuestOp::DebugTrap => {
                self.exit(ExitReason::ExceptionNmi);
                self.acct.debug += self.cfg.costs.db_reinject_cycles;
            }
            GuestOp::EmulatedStore(va) => {
                let (writable, allowed) = self.emulated_store(va);
                let store = oracle::EmulatedStore {
                    page: va,
                    wp: self.wp(),
                    writable,
                    allowed,
                    flavour: self.flavour(),
                };
                self.violations
                    .extend(oracle::emulated_store_violation(&store));
            }
        }
    }

    pub(crate) fn wp(&self) -> bool {
        self.cr0 & CR0_WP != 0
    }

    pub(super) fn exit(&mut self, reason: ExitReason) {
        self.counts.exits[reason as usize] += 1;
        self.acct.exit_entry += self.cfg.costs.exit_cycles(&self.hw);
    }

    /// vcpu_enter_guest's kvm_mmu_reload: load a root if none is loaded and flush its tag.
    pub(crate) fn ensure_loaded(&mut self) {
        if self.mmu.current_root().is_some() {
            return;
        }
        let root = self.guest.root_of(self.proc);
        let (c, tag) = self.mmu.load(root, &self.cfg.costs);
        self.acct.cr0_mmu += c.handler;
        self.acct.root_build += c.root_alloc;
        self.tag = if self.cfg.flavour.direct() {
            tag
        } else {
            SHADOW_TAG
        };
        self.flush_current();
    }

    fn flush_current(&mut self) {
        self.tlb.invalidate_tag(self.tag);
        self.counts.flushes += 1;
        self.acct.flush += if self.cfg.flavour.direct() {
            self.hw.invept_cycles
        } else {
            self.hw.invvpid_cycles
        };
    }

    pub(crate) fn write_cr0(&mut self, new: u64) {
        self.counts.cr0_writes += 1;
        let flavour = self.hw.flavour;
        if self.ctl.write_exits(flavour, new) {
            self.exit(ExitReason::CrAccess);
            let old = self.cr0;
            self.cr0 = new;
            self.ctl.read_shadow = new;
            self.acct.cr0_mmu += self.cfg.costs.cr0_handler_cycles
                + self.mmu.post_set_cr0(old, new, &self.cfg.costs);
            self.ensure_loaded();
        } else {
            self.cr0 = new;
        }
        if self.cfg.oracle {
            let page = self.guest.gdt;
            let probe = Cr0Probe {
                page,
                wp: self.wp(),
                hardware: self.access(page, true, false),
                emulated: self.emulated_write_allowed(page),
                flavour: self.flavour(),
            };
            self.violations.extend(oracle::violations(&probe));
        }
    }

    fn write_cr3(&mut self, p: usize) {
        self.proc = p;
        if self.cfg.flavour.direct() {
            // No exit under EPT: the hardware drops the current tag's non-global entries.
            self.tlb.guest_cr3_flush(self.tag);
            return;
        }
        self.exit(ExitReason::CrAccess);
        let root = self.guest.root_of(p);
        if self.mmu.current_root().is_some() && self.mmu.current_guest_cr3() == Some(root) {
            // kvm_set_cr3 with the CR3 already loaded: no new PGD, KVM_REQ_TLB_FLUSH_CURRENT.
            self.flush_current();
            return;
        }
        let (c, reload) = self.mmu.new_pgd(root, &self.cfg.costs);
        self.acct.cr3 += c;
        if reload {
            self.ensure_loaded();
        } else {
            // kvm_set_cr3 without the no-flush bit: KVM_REQ_TLB_FLUSH_CURRENT.
            self.flush_current();
        }
    }

    /// A guest access; returns whether the hardware let it through.
    pub(crate) fn access(&mut self, va: VirtAddr, write: bool, user: bool) -> bool {
        let (flags, page) = self.translate(va);
        let in_page = va.0 & 0xfff & !0x1ff;
        for i in 0..self.cfg.guest.lines_per_touch {
            // Guest data through the same caches the walks use (cycles: guest work).
            let pa = page.0 + ((in_page + i * 64) & 0xfff);
            self.caches.load(0, 0, pa, false);
        }
        let hw_wp = !self.cfg.flavour.direct() || self.wp();
        let denied = (user && !flags.user) || (write && !flags.writable && (user || hw_wp));
        !denied
    }

    /// pax_switch_mm's __clone_user_pgds: the CPU's PGD gets process `next`'s 256 user
    /// entries, one store each. Under EPT a store is a store (its lines through the caches);
    /// under shadow paging the PGD is a shadowed guest page table, so each store faults on
    /// write protection and is emulated (`emulated_pgd_write`).
    fn clone_pgd(&mut self, next: usize) {
        let pgd = self
            .guest
            .cpu_pgd
            .expect("ClonePgd only in a per-CPU PGD guest");
        let host = GuestPhysAddr(self.guest.table_gpa(pgd)).host().0;
        for slot in 0..super::guest::USER_PGD_SLOTS {
            if !self.cfg.flavour.direct() && self.mmu.shadows(pgd) {
                self.emulated_pgd_write(pgd, slot);
            }
            self.guest.clone_pgd_slot(next, slot);
            self.caches.load(0, 0, host + slot as u64 * 8, false);
        }
    }

    /// Kernel code: one translation, then the page's lines through the caches (cycles:
    /// guest work).
    fn fetch(&mut self, va: VirtAddr, lines: u64) {
        let (_, page) = self.translate(va);
        let base = page.0 & !0xfff;
        for i in (0..64).filter(|i| lines >> i & 1 == 1) {
            self.caches.load(0, 0, base + i * 64, false);
        }
    }

    /// The combined translation of `va` for the current process: TLB, or a walk.
    pub(crate) fn translate(&mut self, va: VirtAddr) -> (PteFlags, PhysAddr) {
        if let Some((e, c)) = self.tlb.lookup(va, self.tag) {
            self.acct.walks += c;
            return (e.flags, e.page);
        }
        self.acct.walks += self.tlb.miss_cycles();
        self.counts.walks += 1;
        let e = if self.cfg.flavour.direct() {
            self.walk_2d(va)
        } else {
            self.walk_shadow(va)
        };
        self.tlb.insert(e);
        (e.flags, e.page)
    }

    fn load(&mut self, hpa: u64) {
        self.counts.walk_refs += 1;
        self.acct.walks += load_cycles(&mut self.caches, hpa);
    }

    /// Guest tables walked, each guest-physical reference translated through EPT.
    fn walk_2d(&mut self, va: VirtAddr) -> TlbEntry {
        let tag = self.tag;
        let (mut table, mut level, mut w, mut u) = match self.tlb.psc.lookup(va, tag) {
            Some(h) => (h.entry.table, h.next_level, h.entry.writable, h.entry.user),
            None => (self.guest.root_of(self.proc), 4, true, true),
        };
        loop {
            let idx = va.index(level);
            let gpa = self.guest.table_gpa(table) + idx as u64 * 8;
            let (page, size) = self.ept_translate(gpa);
            self.load(page.0 + (gpa & (size.bytes() - 1)));
            let e = self.guest.mem.read(table, idx);
            assert!(e.present(), "guest path touches unmapped {va:?}");
            w &= e.writable();
            u &= e.user();
            if let Some(gsize) = e.leaf_size(level) {
                let gpa = e.addr().0 + (va.0 & (gsize.bytes() - 1));
                let (hpage, hsize) = self.ept_translate(gpa);
                let size = gsize.min(hsize);
                let off = gpa & (hsize.bytes() - 1) & !(size.bytes() - 1);
                return TlbEntry {
                    vpn: va.page_number(size),
                    size,
                    pcid: tag,
                    // The guest's G bit exempts an entry from guest CR3 writes (kept in
                    // flags), never from another EPTP or VPID tag.
                    global: false,
                    page: PhysAddr(hpage.0 + off),
                    flags: PteFlags {
                        writable: w,
                        user: u,
                        no_exec: false,
                        global: e.global(),
                    },
                };
            }
            let next = e.addr().pfn();
            self.tlb.psc.fill(
                level,
                va,
                PscEntry {
                    pcid: tag,
                    prefix: 0,
                    table: next,
                    writable: w,
                    user: u,
                    no_exec: false,
                },
            );
            table = next;
            level -= 1;
        }
    }

    /// A guest-physical address through the guest-physical mapping cache or an EPT walk;
    /// an absent mapping is an EPT violation that KVM fixes before the walk retries.
    fn ept_translate(&mut self, gpa: u64) -> (PhysAddr, PageSize) {
        let (root, tag, _) = self.mmu.current_root().expect("a root is loaded at entry");
        loop {
            let (counts, acct, caches) = (&mut self.counts, &mut self.acct, &mut self.caches);
            let leaf = self
                .tlb
                .gpa
                .translate(&self.mmu.host, root, tag, gpa, &mut |pa| {
                    counts.walk_refs += 1;
                    acct.walks += load_cycles(caches, pa);
                });
            if let Some(l) = leaf {
                return (l.page, l.size);
            }
            self.ept_violation(root, gpa);
        }
    }

    fn ept_violation(&mut self, root: crate::arch::x86::Pfn, gpa: u64) {
        self.exit(ExitReason::EptViolation);
        self.counts.ept_violations += 1;
        let size = if self.cfg.guest.host_thp {
            PageSize::Size2M
        } else {
            PageSize::Size4K
        };
        let base = gpa & !(size.bytes() - 1);
        let n = self.mmu.host.map(
            root,
            base,
            GuestPhysAddr(base).host(),
            size,
            PteFlags::KERNEL_DATA,
        );
        self.mmu.count_tables(n);
        self.acct.faults +=
            self.cfg.costs.ept_violation_cycles + n as f64 * self.cfg.costs.table_alloc_cycles;
    }

    /// Shadow paging: walk KVM's shadow tables; an absent SPTE is a #PF exit that KVM
    /// fixes from the guest's tables (FNAME(page_fault)) before the walk retries.
    fn walk_shadow(&mut self, va: VirtAddr) -> TlbEntry {
        let (root, _, role) = self.mmu.current_root().expect("a root is loaded at entry");
        loop {
            let mut refs = vec![];
            let leaf = self.mmu.host.walk(root, va.0, &mut |pa| refs.push(pa));
            for pa in refs {
                self.load(pa);
            }
            if let Some(l) = leaf {
                return TlbEntry {
                    vpn: va.page_number(l.size),
                    size: l.size,
                    pcid: self.tag,
                    global: false,
                    page: l.page,
                    flags: l.flags,
                };
            }
            self.exit(ExitReason::ExceptionNmi);
            self.counts.shadow_pf += 1;
            let groot = self.guest.root_of(self.proc);
            // FNAME(page_fault) starts with FNAME(walk_addr) of the faulting address.
            let (walk, g) = self.software_walk(va);
            self.acct.faults += walk;
            // A top-level SPTE a guest PGD write unlinked: its child shadow table is linked
            // again, the lower SPTEs as they were; if they map `va`, that was the whole fault.
            let slot = va.index(4);
            let ge = self.guest.mem.read(groot, slot);
            if ge.present()
                && self.mmu.relink(root, slot, ge.addr().pfn())
                && self.mmu.host.walk(root, va.0, &mut |_| {}).is_some()
            {
                self.acct.faults += self.cfg.costs.shadow_pf_cycles;
                continue;
            }
            let size = if self.cfg.guest.host_thp {
                g.size.min(PageSize::Size2M)
            } else {
                PageSize::Size4K
            };
            let gpa = g.translate(va).0 & !(size.bytes() - 1);
            let mut flags = g.flags;
            // A CR0.WP=0 role gives supervisor-only writable SPTEs for read-only gPTEs.
            if !role.cr0_wp && !flags.writable {
                flags.writable = true;
                flags.user = false;
            }
            let n = self.mmu.host.map(
                root,
                va.align_down(size).0,
                GuestPhysAddr(gpa).host(),
                size,
                flags,
            );
            self.mmu.count_tables(n);
            self.acct.faults +=
                self.cfg.costs.shadow_pf_cycles + n as f64 * self.cfg.costs.table_alloc_cycles;
        }
    }

    /// Whether KVM's software walker (emulation, gva_to_gpa) permits a supervisor write to
    /// `va`: the guest PTE's W bit through permission_fault() (KvmMmu::permission_fault_write).
    pub(crate) fn emulated_write_allowed(&mut self, va: VirtAddr) -> bool {
        let root = self.guest.root_of(self.proc);
        let g = crate::arch::x86::paging::translate(&self.guest.mem, root, va)
            .expect("oracle probes a mapped page");
        !self.mmu.permission_fault_write(g.flags.writable, self.cr0)
    }

    pub(crate) fn flavour(&self) -> VirtFlavour {
        self.hw.flavour
    }
}
