//! Address Space Isolation (the LKML RFCs of 2022-2025; docs/design/asi.md): every address
//! space gets a restricted page table that maps the user half and the kernel's
//! non-sensitive memory only; user and page-cache pages (GFP_USER, ASI's __GFP_SENSITIVE)
//! are left out of its direct map. The kernel runs restricted until it touches sensitive
//! memory: the page fault's handler leaves (asi_exit, the full tables) and the access is
//! retried; context switches leave too. Before the return to user mode it enters the
//! restricted tables again (__asi_enter). Each transition is a CR3 write (with or without
//! the no-flush bit) and the flushes the user class's taint policy asks for: IBPB and RSB
//! stuffing when leaving after user code ran, an L1D flush when entering after the kernel
//! had sensitive data mapped, on a CPU affected by L1TF. PTI is off when ASI is on.
//!
//! Variants are the published configurations: RFC v2 (no ephmap), the August 2025
//! prototype (the ephmap: a per-CPU slot of the restricted tables a page-cache read copies
//! through, so reads stay restricted) with and without its hard-coded IBPB, and the 2022
//! design's no-flush transitions on the prototype; plus broken ones the oracle must catch.

use super::{CounterSlots, Defense};
use crate::arch::caches::L1Side;
use crate::arch::x86::{paging, Access, PageSize, Pcid, Pfn, PhysAddr, PteFlags, VirtAddr};
use crate::kernel::memory::layout::{direct_map, DIRECT_MAP};
use crate::kernel::memory::page_alloc::Gfp;
use crate::kernel::{BootConfig, CpuId, Kernel, KernelGlobal, MmId};
use crate::machine::MachineProfile;
use crate::oracle::{asi as invariant, Violation};
use crate::params::{Decl, Params, Unit};
use crate::sim::{IntMap, OwnedCounter, TimeCategory};

/// The user class's PCID bits: (class + 1) << 9, class 1 (ASI_CLASS_USERSPACE after
/// ASI_CLASS_KVM) in the two bits below PTI's bit 11 (RFC v2 06/29, asi_pcid()).
pub const RESTRICTED_PCID_BITS: u16 = 2 << 9;

/// The ephmap: a region of the kernel half local to each address space (mm/ephmap.c of the
/// prototype: its tables are the mm's own and cloned into its restricted tables), one 4 KiB
/// slot per CPU (the prototype's EPHEMERAL_FILEMAP_BASE_ADDR holds a largest folio per
/// CPU). Here it is the PGD slot Linux leaves to PTI's LDT remap, which the model does not
/// use.
pub const EPHMAP: u64 = 0xffff_8800_0000_0000;

/// Bytes of physical memory per node the direct map may cover (PML4 slots to keep apart).
const DIRECT_MAP_SPAN: u64 = 64 << 40;

const CYC: (f64, f64) = (0.0, 1e6);

pub const FAMILY: super::Family = super::Family {
    name: "asi",
    boot_option: false,
    variants: &[
        super::Variant::new("asi:rfcv2", &[], "ASI RFC v2 (January 2025): page-cache reads leave the restricted tables; IBPB and RSB stuffing at every exit after user code; every transition's CR3 write flushes its PCID", false, |s| Box::new(Asi::new(Variant::RfcV2, s))),
        super::Variant::new("asi:prototype", &["asi", "asi=on"], "the August 2025 prototype (asi/6.16): RFC v2 plus the ephmap, so a page-cache read copies through a per-CPU restricted mapping; IBPB hard-coded in asi_exit", false, |s| Box::new(Asi::new(Variant::Prototype, s))),
        super::Variant::new("asi:prototype-noibpb", &[], "the prototype booted with clearcpuid=ibpb: RSB stuffing without the IBPB", false, |s| Box::new(Asi::new(Variant::PrototypeNoIbpb, s))),
        super::Variant::new("asi:pcid", &[], "the prototype with the 2022 design's transitions: restricted and full tables each keep their PCID's entries (CR3's no-flush bit)", false, |s| Box::new(Asi::new(Variant::Pcid, s))),
        super::Variant::new("asi:broken-enter-keeps-tlb", &[], "BROKEN: __asi_enter loads the restricted tables under the full tables' PCID with the no-flush bit, so the exit's translations of sensitive memory stay usable", true, |s| Box::new(Asi::new(Variant::BrokenEnterKeepsTlb, s))),
        super::Variant::new("asi:broken-ephmap-leak", &[], "BROKEN: the ephmap leaves the page-cache page mapped in the restricted tables after the copy", true, |s| Box::new(Asi::new(Variant::BrokenEphmapLeak, s))),
        super::Variant::new("asi:broken-ephmap-no-invlpg", &[], "BROKEN: the ephmap clears its PTE after the copy but keeps the TLB entry", true, |s| Box::new(Asi::new(Variant::BrokenEphmapNoInvlpg, s))),
    ],
    params: &[
        Decl::num("asi.exit_cycles", Unit::Cycles, CYC, "asi_exit()'s own instructions besides its CR3 write and flushes (per-CPU state, taints, building CR3)"),
        Decl::num("asi.enter_cycles", Unit::Cycles, CYC, "__asi_enter()'s own instructions besides its CR3 write and flushes"),
        Decl::num("asi.fault_cycles", Unit::Cycles, CYC, "the page-fault handler's work on a fault in the restricted tables before asi_exit (is the address mapped in the full tables?)"),
        Decl::num("asi.ibpb_cycles", Unit::Cycles, (0.0, 1e5), "one IBPB (WRMSR IA32_PRED_CMD), the barrier's own cycles on the figures' machine (Sapphire Rapids); the predictions it destroys are not modelled"),
        Decl::num("asi.rsb_fill_cycles", Unit::Cycles, CYC, "RSB stuffing (__FILL_RETURN_BUFFER: 32 calls, each with its speculation trap)"),
        Decl::num("asi.l1d_flush_cycles_per_line", Unit::Cycles, (0.0, 100.0), "an L1D flush (WRMSR IA32_FLUSH_CMD), cycles per line of the L1D it writes back and invalidates; the refill is simulated"),
    ],
    excludes: &["pti"],
    counters: &[
        (EXITS_PAGE_CACHE, "asi_exit: a kernel access to a page-cache page (a read or write copy outside the ephmap)"),
        (EXITS_USER_PAGE, "asi_exit: a kernel access to a user page through the direct map (zeroing a new anonymous page)"),
        (EXITS_CONTEXT_SWITCH, "asi_exit: a context switch"),
        (EXITS_TLB_FLUSH, "asi_exit: a full TLB flush reloaded the full tables' CR3"),
        (EXITS_OTHER, "asi_exit: a kernel access to a non-sensitive address the restricted tables lack (a model gap)"),
        ("asi_enters", "__asi_enter: back into the restricted tables before a return to user mode"),
        ("asi_control_flushes", "branch-predictor flushes (RSB stuffing, and IBPB where the variant has it)"),
        ("asi_l1d_flushes", "L1D flushes (L1TF-affected CPUs)"),
        ("asi_ephmap_copies", "page-cache copies through the ephmap"),
        ("asi_sensitivity_changes", "frames that changed sensitivity: made sensitive (unmapped, flushed) or non-sensitive (zeroed, mapped)"),
    ],
};

const EXITS_PAGE_CACHE: &str = "asi_exits_page_cache";
const EXITS_USER_PAGE: &str = "asi_exits_user_page";
const EXITS_CONTEXT_SWITCH: &str = "asi_exits_context_switch";
const EXITS_TLB_FLUSH: &str = "asi_exits_tlb_flush";
const EXITS_OTHER: &str = "asi_exits_other";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    RfcV2,
    Prototype,
    PrototypeNoIbpb,
    Pcid,
    BrokenEnterKeepsTlb,
    BrokenEphmapLeak,
    BrokenEphmapNoInvlpg,
}

/// What the ephmap does after the copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ephmap {
    None,
    Correct,
    Leak,
    NoInvlpg,
}

/// How a variant transitions.
#[derive(Debug, Clone, Copy)]
struct Policy {
    /// The enter's CR3 write keeps the restricted PCID's entries (bit 63 set).
    enter_keeps: bool,
    /// The exit's CR3 write keeps the full tables' PCID's entries.
    exit_keeps: bool,
    /// The restricted tables run under a PCID of their own.
    own_pcid: bool,
    /// The control flush includes an IBPB.
    ibpb: bool,
    ephmap: Ephmap,
}

impl Variant {
    fn policy(self) -> Policy {
        let prototype = Policy {
            enter_keeps: false,
            exit_keeps: false,
            own_pcid: true,
            ibpb: true,
            ephmap: Ephmap::Correct,
        };
        match self {
            Variant::RfcV2 => Policy {
                ephmap: Ephmap::None,
                ..prototype
            },
            Variant::Prototype => prototype,
            Variant::PrototypeNoIbpb => Policy {
                ibpb: false,
                ..prototype
            },
            Variant::Pcid => Policy {
                enter_keeps: true,
                exit_keeps: true,
                ..prototype
            },
            Variant::BrokenEnterKeepsTlb => Policy {
                enter_keeps: true,
                own_pcid: false,
                ephmap: Ephmap::None,
                ..prototype
            },
            Variant::BrokenEphmapLeak => Policy {
                ephmap: Ephmap::Leak,
                ..prototype
            },
            Variant::BrokenEphmapNoInvlpg => Policy {
                ephmap: Ephmap::NoInvlpg,
                ..prototype
            },
        }
    }
}

/// Why the kernel left the restricted tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    PageCache,
    UserPage,
    ContextSwitch,
    TlbFlush,
    Other,
}

/// The per-CPU taints of the RFCs' model (asm/asi.h): who touched the CPU and what state
/// they may have left, decided on at each transition by the class's taint policy.
mod taint {
    pub const KERNEL_DATA: u8 = 1 << 0;
    pub const USER_DATA: u8 = 1 << 1;
    pub const OTHER_MM_DATA: u8 = 1 << 3;
    pub const USER_CONTROL: u8 = 1 << 4;
    pub const GUEST_CONTROL: u8 = 1 << 5;
    pub const OTHER_MM_CONTROL: u8 = 1 << 6;
    pub const CONTROL: u8 = USER_CONTROL | GUEST_CONTROL | OTHER_MM_CONTROL;
    pub const DATA: u8 = KERNEL_DATA | USER_DATA | OTHER_MM_DATA;
    /// The user class's policy (asi_init_userspace_class): flush control state left by
    /// other processes or guests before entering, data left by the kernel or other
    /// processes, and mark the CPU as touched by user code.
    pub const USER_PREVENT_CONTROL: u8 = GUEST_CONTROL | OTHER_MM_CONTROL;
    pub const USER_PROTECT_DATA: u8 = KERNEL_DATA | OTHER_MM_DATA;
    pub const USER_SETS: u8 = USER_CONTROL | USER_DATA;
}

#[derive(Debug, Clone, Default)]
struct CpuState {
    /// Running on the restricted tables (the prototype's curr_asi).
    restricted: bool,
    taints: u8,
    /// The page the ephmap holds for a copy in progress, and where.
    ephmap: Option<(Pfn, VirtAddr)>,
    /// No-flush transitions: the restricted PCID's entries may be stale (the full space
    /// was flushed, or a frame became sensitive): the next enter flushes it.
    restricted_stale: bool,
    /// The same for the full tables' PCID: the next exit flushes it.
    full_stale: bool,
}

struct Costs {
    exit: f64,
    enter: f64,
    fault: f64,
    ibpb: f64,
    rsb_fill: f64,
    /// Zero where the CPU is not affected by L1TF (no L1D flush).
    l1d_flush: f64,
    set_kpte: f64,
    clear_page: f64,
}

struct Counters {
    exits: [OwnedCounter; 5],
    enters: OwnedCounter,
    control_flushes: OwnedCounter,
    l1d_flushes: OwnedCounter,
    ephmap_copies: OwnedCounter,
    sensitivity_changes: OwnedCounter,
}

pub struct Asi {
    variant: Variant,
    policy: Policy,
    costs: Costs,
    counters: Counters,
    cpus: Vec<CpuState>,
    /// The kernel half every restricted table shares (asi_global_nonsensitive_pgd): the
    /// kernel's own PML4 entries except the direct map's, whose tables map the kernel heap
    /// and the non-sensitive frames only.
    template: Option<Pfn>,
    /// Each address space's restricted PGD, by MmId.
    restricted_roots: Vec<Option<Pfn>>,
    /// Frames whose direct-map alias the restricted tables map (non-sensitive allocations).
    mapped: IntMap<Pfn, ()>,
    /// Frames that held sensitive data since they were last cleared.
    dirty: IntMap<Pfn, ()>,
}

impl Asi {
    pub fn new(variant: Variant, slots: &CounterSlots) -> Asi {
        let c = |name| slots.get(name);
        Asi {
            variant,
            policy: variant.policy(),
            costs: Costs {
                exit: 0.0,
                enter: 0.0,
                fault: 0.0,
                ibpb: 0.0,
                rsb_fill: 0.0,
                l1d_flush: 0.0,
                set_kpte: 0.0,
                clear_page: 0.0,
            },
            counters: Counters {
                exits: [
                    c(EXITS_PAGE_CACHE),
                    c(EXITS_USER_PAGE),
                    c(EXITS_CONTEXT_SWITCH),
                    c(EXITS_TLB_FLUSH),
                    c(EXITS_OTHER),
                ],
                enters: c("asi_enters"),
                control_flushes: c("asi_control_flushes"),
                l1d_flushes: c("asi_l1d_flushes"),
                ephmap_copies: c("asi_ephmap_copies"),
                sensitivity_changes: c("asi_sensitivity_changes"),
            },
            cpus: vec![],
            template: None,
            restricted_roots: vec![],
            mapped: IntMap::default(),
            dirty: IntMap::default(),
        }
    }

    /// `mm`'s restricted PGD.
    pub fn restricted_root(&self, mm: MmId) -> Option<Pfn> {
        self.restricted_roots.get(mm).copied().flatten()
    }

    /// Whether `cpu` runs on the restricted tables.
    pub fn is_restricted(&self, cpu: CpuId) -> bool {
        self.cpus.get(cpu).is_some_and(|s| s.restricted)
    }

    /// The ephmap slot of `cpu`.
    pub fn ephmap_slot(cpu: CpuId) -> VirtAddr {
        VirtAddr(EPHMAP + cpu as u64 * 4096)
    }

    fn restricted_pcid(&self, k: &Kernel, cpu: CpuId) -> Pcid {
        let kernel = k.kernel_pcid(cpu);
        if k.cpus[cpu].mmu.pcide() && self.policy.own_pcid {
            Pcid(kernel.0 | RESTRICTED_PCID_BITS)
        } else {
            kernel
        }
    }

    /// Maps the kernel heap (2 MiB pages, as the prototype's non-sensitive pageblocks are)
    /// into the template's own direct-map tables.
    fn build_template(&mut self, k: &mut Kernel) {
        let template = k.mem.alloc_table(0);
        let direct_slots =
            VirtAddr(DIRECT_MAP).index(4)..VirtAddr(DIRECT_MAP + DIRECT_MAP_SPAN).index(4);
        for slot in 256..512 {
            if direct_slots.contains(&slot) || slot == VirtAddr(EPHMAP).index(4) {
                continue;
            }
            paging::share_pml4_entry(&mut k.mem, template, k.kernel_root, slot);
        }
        // Every direct-map slot a node's memory may reach gets its table now, so the
        // restricted PGDs copied from the template share what is mapped later
        // (preallocate_sub_pgd_pages in asi_global_init).
        for slot in direct_slots {
            let t = k.mem.alloc_table(0);
            k.mem
                .write(template, slot, crate::arch::x86::Pte::table(t, false));
        }
        let heap_bytes = k.paths.heap.bytes();
        for node in 0..k.mem.nodes() {
            let base = k.kernel_heap[node as usize];
            for off in (0..heap_bytes).step_by(PageSize::Size2M.bytes() as usize) {
                let pa = base + off;
                paging::map(
                    &mut k.mem,
                    template,
                    direct_map(pa),
                    PhysAddr(pa),
                    PageSize::Size2M,
                    PteFlags::KERNEL_DATA,
                    node,
                );
            }
        }
        self.template = Some(template);
    }

    /// The branch-predictor flush of maybe_flush_control(): RSB stuffing, and IBPB where
    /// the variant has it (the prototype hard-codes one in asi_exit).
    fn flush_control(&mut self, k: &mut Kernel, cpu: CpuId) {
        let mut cycles = self.costs.rsb_fill;
        if self.policy.ibpb {
            cycles += self.costs.ibpb;
        }
        k.compute(cpu, cycles, TimeCategory::EntryTrampoline);
        k.cpus[cpu].stats.count_owned(self.counters.control_flushes);
        self.cpus[cpu].taints &= !taint::CONTROL;
    }

    /// asi_exit(): leave the restricted tables for the full ones of the loaded address
    /// space (`reload`: the CR3 write is asi_exit's own; without it the kernel has just
    /// written the full tables' CR3 itself).
    fn exit(&mut self, k: &mut Kernel, cpu: CpuId, cause: Cause, reload: bool) {
        if !self.cpus[cpu].restricted {
            return;
        }
        if self.cpus[cpu].taints & taint::CONTROL != 0 {
            self.flush_control(k, cpu);
        }
        self.cpus[cpu].taints |= taint::KERNEL_DATA;
        k.compute(cpu, self.costs.exit, TimeCategory::EntryTrampoline);
        if reload {
            let mm = k.cpus[cpu]
                .asid
                .loaded_mm
                .expect("a restricted CPU has an address space loaded");
            let root = k.pgd(mm, cpu);
            let pcid = k.kernel_pcid(cpu);
            let keep =
                self.policy.exit_keeps && self.keep_entries(k, cpu, self.cpus[cpu].full_stale);
            k.write_cr3(cpu, root, pcid, keep);
            self.cpus[cpu].full_stale &= keep;
        }
        self.cpus[cpu].restricted = false;
        let i = cause as usize;
        k.cpus[cpu].stats.count_owned(self.counters.exits[i]);
    }

    /// __asi_enter(): back into `cpu`'s address space's restricted tables.
    fn enter(&mut self, k: &mut Kernel, cpu: CpuId) {
        if self.cpus[cpu].restricted {
            return;
        }
        let mm = k.current_mm(cpu);
        let root = self
            .restricted_root(mm)
            .expect("every address space has restricted tables");
        if self.cpus[cpu].taints & taint::USER_PREVENT_CONTROL != 0 {
            self.flush_control(k, cpu);
        }
        k.compute(cpu, self.costs.enter, TimeCategory::EntryTrampoline);
        let pcid = self.restricted_pcid(k, cpu);
        let keep =
            self.policy.enter_keeps && self.keep_entries(k, cpu, self.cpus[cpu].restricted_stale);
        k.write_cr3(cpu, root, pcid, keep);
        self.cpus[cpu].restricted_stale &= keep;
        if self.cpus[cpu].taints & taint::USER_PROTECT_DATA != 0 {
            if self.costs.l1d_flush > 0.0 {
                let core = k.cpus[cpu].mmu.core();
                k.caches.empty_l1(L1Side::Data, core);
                k.compute(cpu, self.costs.l1d_flush, TimeCategory::EntryTrampoline);
                k.cpus[cpu].stats.count_owned(self.counters.l1d_flushes);
            }
            self.cpus[cpu].taints &= !taint::DATA;
        }
        self.cpus[cpu].taints |= taint::USER_SETS;
        self.cpus[cpu].restricted = true;
        k.cpus[cpu].stats.count_owned(self.counters.enters);
    }

    /// Whether a transition's CR3 write that would keep the target PCID's entries may:
    /// with PCIDs, and none of them stale.
    fn keep_entries(&self, k: &Kernel, cpu: CpuId, stale: bool) -> bool {
        k.cpus[cpu].mmu.pcide() && !stale
    }

    /// Why an access at `va` faulted in the restricted tables: what the frame is for.
    fn cause_of(k: &Kernel, va: VirtAddr) -> Cause {
        if va.0 < DIRECT_MAP {
            return Cause::Other;
        }
        let pfn = PhysAddr(va.0 - DIRECT_MAP).pfn();
        match k.page_info(pfn).map(|i| i.gfp) {
            Some(Gfp::PageCache) => Cause::PageCache,
            Some(Gfp::UserAnon) => Cause::UserPage,
            _ => Cause::Other,
        }
    }

    /// A frame allocated non-sensitive: its alias is mapped into the restricted tables,
    /// cleared first if it held sensitive data.
    fn make_nonsensitive(&mut self, k: &mut Kernel, cpu: CpuId, pfn: Pfn) {
        if self.mapped.contains_key(&pfn) {
            return;
        }
        if self.dirty.remove(&pfn).is_some() {
            k.store_lines(cpu, pfn.addr().0, 4096 / 64);
            k.compute(cpu, self.costs.clear_page, TimeCategory::DirectMap);
            k.cpus[cpu]
                .stats
                .count_owned(self.counters.sensitivity_changes);
        }
        let template = self.template.expect("booted");
        let node = k.mem.node_of(pfn);
        let va = k.direct_map_addr(pfn);
        paging::map(
            &mut k.mem,
            template,
            va,
            pfn.addr(),
            PageSize::Size4K,
            PteFlags::KERNEL_DATA,
            node,
        );
        self.mapped.insert(pfn, ());
    }

    /// A frame allocated sensitive: if the restricted tables map it (it was a kernel
    /// frame), its alias is removed and flushed everywhere, as flush_tlb_kernel_range()
    /// does it; under no-flush transitions every CPU's restricted PCID is stale too.
    fn make_sensitive(&mut self, k: &mut Kernel, cpu: CpuId, pfn: Pfn) {
        self.dirty.insert(pfn, ());
        if self.mapped.remove(&pfn).is_none() {
            return;
        }
        let template = self.template.expect("booted");
        let va = k.direct_map_addr(pfn);
        paging::unmap(&mut k.mem, template, va);
        k.compute(cpu, self.costs.set_kpte, TimeCategory::DirectMap);
        k.flush_tlb_kernel_range(cpu, va, 1);
        for s in self.cpus.iter_mut() {
            s.restricted_stale = true;
        }
        k.cpus[cpu]
            .stats
            .count_owned(self.counters.sensitivity_changes);
    }
}

impl Defense for Asi {
    fn canon(&self, c: &mut crate::sim::Canon) {
        let Asi {
            variant: _,
            policy: _,
            costs: _,
            counters: _,
            cpus,
            template,
            restricted_roots,
            mapped,
            dirty,
        } = self;
        c.debug(cpus);
        c.debug(&(template, restricted_roots));
        c.sorted_map(mapped.keys().map(|p| (p.0, ())));
        c.sorted_map(dirty.keys().map(|p| (p.0, ())));
    }

    fn name(&self) -> String {
        match self.variant {
            Variant::RfcV2 => "asi:rfcv2",
            Variant::Prototype => "asi:prototype",
            Variant::PrototypeNoIbpb => "asi:prototype-noibpb",
            Variant::Pcid => "asi:pcid",
            Variant::BrokenEnterKeepsTlb => "asi:broken-enter-keeps-tlb",
            Variant::BrokenEphmapLeak => "asi:broken-ephmap-leak",
            Variant::BrokenEphmapNoInvlpg => "asi:broken-ephmap-no-invlpg",
        }
        .into()
    }

    fn configure(&mut self, config: &mut BootConfig, machine: &MachineProfile, params: &Params) {
        // "x86/mm/asi: don't use global pages when ASI enabled": a global kernel entry
        // would outlive the switch between the two tables.
        config.global_kernel = KernelGlobal::None;
        config.sensitive_freelists = true;
        let l1d_lines = (machine.memory.l1d_kib as f64 * 1024.0 / 64.0).round();
        self.costs = Costs {
            exit: params.num("asi.exit_cycles"),
            enter: params.num("asi.enter_cycles"),
            fault: params.num("asi.fault_cycles"),
            ibpb: params.num("asi.ibpb_cycles"),
            rsb_fill: params.num("asi.rsb_fill_cycles"),
            // asi_global_init() sets do_l1tf_flush only on CPUs with X86_BUG_L1TF.
            l1d_flush: if machine.cpu.features.l1tf {
                params.num("asi.l1d_flush_cycles_per_line") * l1d_lines
            } else {
                0.0
            },
            set_kpte: params.num("kernel.set_kpte_cycles"),
            clear_page: params.num("kernel.copy_page_cycles"),
        };
        self.cpus = vec![CpuState::default(); machine.threads() as usize];
    }

    fn on_boot(&mut self, k: &mut Kernel) {
        self.build_template(k);
    }

    fn on_mm_created(&mut self, k: &mut Kernel, _cpu: CpuId, mm: MmId) {
        let template = self.template.expect("booted");
        let node = k.mms[mm].node;
        let root = k.mem.alloc_table(node);
        for slot in 256..512 {
            paging::share_pml4_entry(&mut k.mem, root, template, slot);
        }
        if self.policy.ephmap != Ephmap::None {
            // The ephmap's tables, one set shared by the mm's two PGDs (ephmap_setup()).
            let slot = VirtAddr(EPHMAP).index(4);
            let t = k.mem.alloc_table(node);
            k.mem
                .write(root, slot, crate::arch::x86::Pte::table(t, false));
            let full = k.mms[mm].root;
            paging::share_pml4_entry(&mut k.mem, full, root, slot);
        }
        // The user half is the address space's own (asi_clone_user_pgtbl).
        let full = k.mms[mm].root;
        for slot in 0..256 {
            paging::share_pml4_entry(&mut k.mem, root, full, slot);
        }
        if self.restricted_roots.len() <= mm {
            self.restricted_roots.resize(mm + 1, None);
        }
        self.restricted_roots[mm] = Some(root);
    }

    fn on_user_pgd_populated(&mut self, k: &mut Kernel, mm: MmId, slot: usize) {
        if let Some(root) = self.restricted_root(mm) {
            let full = k.mms[mm].root;
            paging::share_pml4_entry(&mut k.mem, root, full, slot);
        }
    }

    fn on_kernel_exit(&mut self, k: &mut Kernel, cpu: CpuId) {
        self.enter(k, cpu);
    }

    fn on_kernel_fault(
        &mut self,
        k: &mut Kernel,
        cpu: CpuId,
        va: VirtAddr,
        _access: Access,
    ) -> bool {
        if !self.cpus[cpu].restricted {
            return false;
        }
        let Some(mm) = k.cpus[cpu].asid.loaded_mm else {
            return false;
        };
        // asi_exit() only where the full tables map the address (a genuine fault is the
        // kernel's bug and stays one).
        if paging::translate(&k.mem, k.pgd(mm, cpu), va).is_none() {
            return false;
        }
        k.compute(cpu, self.costs.fault, TimeCategory::Kernel);
        let cause = Self::cause_of(k, va);
        self.exit(k, cpu, cause, true);
        true
    }

    fn on_context_switch(&mut self, k: &mut Kernel, cpu: CpuId) {
        // The prototype leaves at every context_switch() (the Google-internal version only
        // when the mm changes).
        self.exit(k, cpu, Cause::ContextSwitch, true);
    }

    fn on_switch_mm(&mut self, k: &mut Kernel, cpu: CpuId, _mm: MmId, need_flush: bool) {
        // switch_mm wrote the new address space's full tables.
        self.exit(k, cpu, Cause::ContextSwitch, false);
        // asi_handle_switch_mm(): the previous process's taints become another mm's.
        let s = &mut self.cpus[cpu];
        let mut other = 0;
        if s.taints & taint::CONTROL != 0 {
            other |= taint::OTHER_MM_CONTROL;
        }
        if s.taints & taint::DATA != 0 {
            other |= taint::OTHER_MM_DATA;
        }
        s.taints =
            (s.taints | other) & !(taint::USER_CONTROL | taint::USER_DATA | taint::GUEST_CONTROL);
        // A recycled ASID's restricted PCID holds another address space's entries.
        if need_flush {
            s.restricted_stale = true;
        }
    }

    fn on_user_tlb_flush(
        &mut self,
        k: &mut Kernel,
        cpu: CpuId,
        _mm: MmId,
        _start: VirtAddr,
        pages: u64,
    ) {
        if pages == crate::kernel::tlb::tlbflush::FLUSH_ALL {
            // The full flush reloaded the full tables' CR3 (native_flush_tlb_local() leaves
            // ASI first); the restricted PCID's copies of the user half are stale now.
            self.exit(k, cpu, Cause::TlbFlush, false);
            self.cpus[cpu].restricted_stale = true;
        } else if self.cpus[cpu].restricted {
            self.cpus[cpu].full_stale = true;
        } else {
            self.cpus[cpu].restricted_stale = true;
        }
    }

    fn on_kernel_page_flush(&mut self, _k: &mut Kernel, cpu: CpuId, _start: VirtAddr, _pages: u64) {
        // INVLPG reached the current PCID only; the other table's copies are stale.
        let s = &mut self.cpus[cpu];
        if s.restricted {
            s.full_stale = true;
        } else {
            s.restricted_stale = true;
        }
    }

    fn on_page_alloc(&mut self, k: &mut Kernel, cpu: CpuId, pfn: Pfn, gfp: Gfp) {
        if gfp.is_highuser() {
            self.make_sensitive(k, cpu, pfn);
        } else {
            self.make_nonsensitive(k, cpu, pfn);
        }
    }

    fn kmap_alias(
        &mut self,
        k: &mut Kernel,
        cpu: CpuId,
        pfn: Pfn,
        access: Access,
    ) -> Option<VirtAddr> {
        // The prototype's ephmap serves shmem reads (ephmap_get() from mm/shmem.c): a
        // page-cache page copied out, whichever tables the CPU runs on.
        let page_cache = k.page_info(pfn).is_some_and(|i| i.gfp == Gfp::PageCache);
        if self.policy.ephmap == Ephmap::None || access != Access::Read || !page_cache {
            return None;
        }
        let mm = k.current_mm(cpu);
        let root = self.restricted_root(mm)?;
        let va = Self::ephmap_slot(cpu);
        let node = k.mms[mm].node;
        paging::map(
            &mut k.mem,
            root,
            va,
            pfn.addr(),
            PageSize::Size4K,
            PteFlags::KERNEL_DATA,
            node,
        );
        k.compute(cpu, self.costs.set_kpte, TimeCategory::DirectMap);
        self.cpus[cpu].ephmap = Some((pfn, va));
        k.cpus[cpu].stats.count_owned(self.counters.ephmap_copies);
        Some(va)
    }

    fn on_kunmap(&mut self, k: &mut Kernel, cpu: CpuId, pfn: Pfn) {
        let Some((held, va)) = self.cpus[cpu].ephmap else {
            return;
        };
        if held != pfn {
            return;
        }
        self.cpus[cpu].ephmap = None;
        if self.policy.ephmap == Ephmap::Leak {
            return;
        }
        let mm = k.current_mm(cpu);
        if let Some(root) = self.restricted_root(mm) {
            paging::unmap(&mut k.mem, root, va);
            k.compute(cpu, self.costs.set_kpte, TimeCategory::DirectMap);
        }
        if self.policy.ephmap == Ephmap::Correct {
            // ephmap_put(): a CPU-local mapping, used and dropped in one PCID (transitions
            // happen outside a copy): the local INVLPG is all software correctness needs.
            k.invlpg(cpu, va);
        }
    }

    fn check_user_mode(&self, k: &Kernel, cpu: CpuId) -> Option<Violation> {
        let mm = k.current_mm(cpu);
        invariant::check(k, cpu, &self.name(), self.restricted_root(mm))
    }
}

#[cfg(test)]
mod tests;
