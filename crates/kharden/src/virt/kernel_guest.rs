//! The kernel model as a KVM guest with EPT (`Kernel::run_in_vm`): its CPUs are vCPUs in
//! VMX non-root operation, one per host CPU, and every TLB miss is a two-dimensional walk
//! (arch/x86/ept.rs) through the EPT of KVM's MMU (virt/kvm_mmu, the path model's). What
//! exits: the EPT violations of first touches (an exit, KVM's fault handling and an entry),
//! the CR0 writes the VMCS mask intercepts (KERNEXEC's toggles; KVM's MMU work per variant,
//! then the root load and INVEPT at entry) and the #DB of a single step. What does not: MOV
//! to CR3 (no CR3-load exiting under EPT), INVLPG and INVPCID (passed through), syscalls
//! and the guest's own page faults. Not modelled, so refused for the workloads that need
//! them: exits on the guest's IPIs (an x2APIC ICR write) and timer (TSC-deadline writes),
//! shadow paging, and more than one vCPU writing CR0 (one `KvmMmu` stands for the vCPU).

use super::kvm_mmu::{KvmMmu, Variant};
use super::params::KvmCosts;
use super::vmx::{Cr0Controls, ExitReason, CR0_PG, CR0_WP};
use super::MmuFlavour;
use crate::arch::x86::ept::{HostTables, SecondStage, EPT_TABLES_HOST_BASE};
use crate::arch::x86::{PageSize, Pcid, Pfn, PhysAddr, PteFlags};
use crate::error::{Error, Result};
use crate::kernel::hooks::{Cr0Write, Hypervisor};
use crate::machine::MachineProfile;
use crate::machine::VirtHardware;
use crate::params::Params;

/// One vCPU's VM: KVM's MMU for it (roots, roles, the CR0 variants of virt/kvm_mmu) with
/// the EPT tables above guest RAM, the VMCS CR0 controls, and what it counted.
pub struct KernelVm {
    pub mmu: KvmMmu,
    pub hw: VirtHardware,
    pub costs: KvmCosts,
    /// Host pages backing guest RAM: the EPT's leaf size.
    pub backing: PageSize,
    pub cr0: u64,
    ctl: Cr0Controls,
    pub counts: VmCounts,
    /// Cycles of EPT violations not yet charged to the vCPU (Kernel::touch charges them).
    unpaid: f64,
}

/// Exits by reason (ExitReason::ALL order) and the other events `perf kvm stat` and KVM's
/// tracepoints count.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VmCounts {
    pub exits: [u64; 3],
    pub cr0_writes: u64,
    /// INVEPTs at root loads.
    pub flushes: u64,
}

impl KernelVm {
    /// A VM on `m` under KVM's `flavour` MMU and CR0 `variant`, its RAM backed by
    /// `backing` host pages.
    pub fn new(
        m: &MachineProfile,
        flavour: MmuFlavour,
        variant: Variant,
        params: &Params,
        backing: PageSize,
    ) -> Result<KernelVm> {
        if !flavour.direct() {
            return Err(Error::new(format!(
                "{} MMU: the kernel model runs in a guest with EPT/NPT only (tdp or legacy); shadow paging is the ssdd path model's",
                flavour.name()
            )));
        }
        let hw = super::ssdd::check_support(m, flavour)?;
        let cr0 = CR0_PG | CR0_WP;
        let ctl = Cr0Controls::new(cr0, variant.guest_owns_wp(flavour, hw.flavour));
        let mut mmu = KvmMmu::new(flavour, variant, 0, cr0);
        mmu.host = HostTables::at(EPT_TABLES_HOST_BASE);
        let mut vm = KernelVm {
            mmu,
            hw,
            costs: KvmCosts::from(params),
            backing,
            cr0,
            ctl,
            counts: VmCounts::default(),
            unpaid: 0.0,
        };
        // The first VM entry loads a root (a direct root ignores the guest CR3).
        vm.mmu.load(Pfn(0), &vm.costs);
        Ok(vm)
    }

    fn exit(&mut self, reason: ExitReason) -> f64 {
        self.counts.exits[reason as usize] += 1;
        self.costs.exit_cycles(&self.hw)
    }
}

impl Hypervisor for KernelVm {
    fn second_stage(&mut self) -> &mut dyn SecondStage {
        self
    }

    /// A #DB the guest takes (single-stepping): KVM intercepts every #DB since
    /// CVE-2015-8104 and reinjects it.
    fn debug_trap(&mut self) -> f64 {
        self.exit(ExitReason::ExceptionNmi) + self.costs.db_reinject_cycles
    }

    /// The guest's MOV to CR0 setting WP to `wp`: an exit if the VMCS mask says so, then
    /// kvm_post_set_cr0's MMU work per variant and, if that unloaded the root, the load at
    /// the next entry with its INVEPT.
    fn write_cr0_wp(&mut self, wp: bool) -> Cr0Write {
        self.counts.cr0_writes += 1;
        let new = if wp {
            self.cr0 | CR0_WP
        } else {
            self.cr0 & !CR0_WP
        };
        let old = self.cr0;
        self.cr0 = new;
        if !self.ctl.write_exits(self.hw.flavour, new) {
            return Cr0Write {
                cycles: 0.0,
                flush: false,
            };
        }
        self.ctl.read_shadow = new;
        let mut cycles = self.exit(ExitReason::CrAccess) + self.costs.cr0_handler_cycles;
        cycles += self.mmu.post_set_cr0(old, new, &self.costs);
        let flush = self.mmu.current_root().is_none();
        if flush {
            let (c, _) = self.mmu.load(Pfn(0), &self.costs);
            cycles += c.handler + c.root_alloc + self.hw.invept_cycles;
            self.counts.flushes += 1;
        }
        Cr0Write { cycles, flush }
    }

    /// The VM's state for kernel/steady.rs (its counters only count).
    fn canon(&self, c: &mut crate::sim::Canon) {
        self.mmu.canon(c);
        c.words([self.cr0, self.ctl.read_shadow]);
    }

    /// Cycles of the EPT violations since the last call: per violation the exit and entry,
    /// KVM's exit path and fault handling, and per EPT table page allocated its clearing.
    fn take_exit_cycles(&mut self) -> f64 {
        std::mem::take(&mut self.unpaid)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl SecondStage for KernelVm {
    fn loaded(&self) -> (&HostTables, Pfn, Pcid) {
        let (root, tag, _) = self.mmu.current_root().expect("a root is loaded at entry");
        (&self.mmu.host, root, tag)
    }

    fn fault_in(&mut self, gpa: u64) {
        let (root, _, _) = self.mmu.current_root().expect("a root is loaded at entry");
        let base = gpa & !(self.backing.bytes() - 1);
        let kernel_data = PteFlags::KERNEL_DATA;
        let tables = self
            .mmu
            .host
            .map(root, base, PhysAddr(base), self.backing, kernel_data);
        self.mmu.count_tables(tables);
        let exit = self.exit(ExitReason::EptViolation);
        self.unpaid +=
            exit + self.costs.ept_violation_cycles + tables as f64 * self.costs.table_alloc_cycles;
    }
}

/// The kernel model's guest as words choose it (`--virt kvm --mmu M --kvm-variant V
/// --ept-page P`, a sweep point's options), checked: what `KernelVm::new` builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestVmOptions {
    pub flavour: MmuFlavour,
    pub variant: Variant,
    pub backing: PageSize,
}

impl GuestVmOptions {
    /// Parses the options, each None when not given (TDP, the base variant, 2 MiB EPT
    /// pages); an error names the option as `name` spells it.
    pub fn parse(
        mmu: Option<&str>,
        variant: Option<&str>,
        ept_page: Option<&str>,
        name: impl Fn(&str) -> String,
    ) -> Result<GuestVmOptions> {
        let (flavour, variant) = super::kvm_mmu::parse_kvm(mmu, variant, &name)?;
        GuestVmOptions::with(flavour, variant, ept_page, name)
    }

    /// The options with KVM's MMU and variant already parsed: the MMU must map the guest
    /// with EPT/NPT; `ept_page` as in `parse`.
    pub fn with(
        flavour: MmuFlavour,
        variant: Variant,
        ept_page: Option<&str>,
        name: impl Fn(&str) -> String,
    ) -> Result<GuestVmOptions> {
        let at = |option: &str, e: Error| Error::at(name(option), e);
        if !flavour.direct() {
            return Err(at("mmu", Error::new("the kernel-model guest runs under EPT/NPT only (tdp or legacy); shadow paging is the ssdd path model's")));
        }
        Ok(GuestVmOptions {
            flavour,
            variant,
            backing: match ept_page {
                Some(p) => parse_backing(p).map_err(|e| at("ept_page", e))?,
                None => PageSize::Size2M,
            },
        })
    }

    /// The VM on host `m`.
    pub fn vm(&self, m: &MachineProfile, params: &Params) -> Result<KernelVm> {
        KernelVm::new(m, self.flavour, self.variant, params, self.backing)
    }
}

/// The name `parse_backing` takes for `size`.
pub fn backing_name(size: PageSize) -> &'static str {
    match size {
        PageSize::Size4K => "4k",
        PageSize::Size2M => "2m",
        PageSize::Size1G => "1g",
    }
}

/// The host page size backing guest RAM, by name (`--ept-page`, a sweep's `ept_page`).
pub fn parse_backing(s: &str) -> Result<PageSize> {
    match s {
        "4k" => Ok(PageSize::Size4K),
        "2m" => Ok(PageSize::Size2M),
        "1g" => Ok(PageSize::Size1G),
        other => Err(Error::new(format!(
            "expected 4k, 2m or 1g, got \"{other}\""
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::x86::PageSize;
    use crate::kernel::Kernel;
    use crate::oracle::OracleMode;
    use crate::sim::Counter;
    use crate::workload::SyscallLoop;

    /// ns per getppid and the loop's stats under FreeBSD-style PTI without PCID (every
    /// entry and exit flushes the TLB), bare metal or in a guest backed by `backing` pages.
    fn getppid(backing: Option<PageSize>) -> (f64, crate::sim::Stats) {
        let m = crate::machine::load("skylake-i7-6700k").unwrap();
        let params = Params::linux();
        let defenses = crate::defense::parse_list("pti:freebsd,nopcid").unwrap();
        let mut k = Kernel::boot_with(m.clone(), defenses, &params, OracleMode::Every);
        if let Some(b) = backing {
            let vm = KernelVm::new(&m, MmuFlavour::Tdp, Variant::Base, &params, b).unwrap();
            k.run_in_vm(vm);
        }
        let mut lp = SyscallLoop::new("getppid", 2000).unwrap();
        lp.start(&mut k).unwrap();
        for _ in 0..lp.warmup {
            lp.measure(&mut k, 1).unwrap();
        }
        let r = lp.measure(&mut k, 2000).unwrap();
        assert!(k.violations.is_empty(), "PTI holds in the guest too");
        (r.elapsed.secs() * 1e9 / 2000.0, r.stats)
    }

    #[test]
    fn small_ept_pages_make_every_refill_a_longer_walk() {
        let (bare, bare_stats) = getppid(None);
        let (thp, thp_stats) = getppid(Some(PageSize::Size2M));
        let (small, small_stats) = getppid(Some(PageSize::Size4K));
        // Backed by 2 MiB pages, the loop's guest-physical pages all fit the mapping cache:
        // the same walks as on bare metal, and no exit once warm.
        assert_eq!(
            thp_stats.counter(Counter::PageWalks),
            bare_stats.counter(Counter::PageWalks)
        );
        assert_eq!(thp_stats.counter(Counter::EptViolations), 0);
        assert!((thp - bare).abs() < 1e-9, "{thp} vs {bare}");
        // Backed by 4 KiB pages: 2 MiB guest mappings splinter into more TLB entries, and
        // the guest-physical pages overflow the mapping cache, so refills walk the EPT.
        assert!(small_stats.counter(Counter::PageWalks) > bare_stats.counter(Counter::PageWalks));
        assert!(small_stats.counter(Counter::EptWalks) > 0);
        assert!(small > bare * 1.2, "{small} vs {bare}");
    }

    #[test]
    fn impossible_guests_are_one_line_errors() {
        let params = Params::linux();
        let sky = crate::machine::load("skylake-i7-6700k").unwrap();
        let e = KernelVm::new(
            &sky,
            MmuFlavour::Shadow,
            Variant::Base,
            &params,
            PageSize::Size2M,
        );
        assert!(e.err().unwrap().to_string().contains("EPT/NPT only"));
        let no_virt = crate::machine::load("xeon-e5-2690v3-2s").unwrap();
        let e = KernelVm::new(
            &no_virt,
            MmuFlavour::Tdp,
            Variant::Base,
            &params,
            PageSize::Size2M,
        );
        assert!(e.err().unwrap().to_string().contains("[virt]"));
        assert!(parse_backing("3m").is_err());
    }
}
