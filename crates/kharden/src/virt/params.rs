//! Parameters of KVM's software paths and of the guest's ssdd step. Hardware facts (exit,
//! entry, INVEPT costs) are in the machine profile's `[virt]` section instead. The values live
//! in kernels/linux.toml ([kvm], [guest]) like every software parameter.

use super::placement::Placement;
use crate::params::{Decl, Params, Unit};

const CYC: (f64, f64) = (0.0, 1e8);

/// The declarations of KVM's costs and the guest's parameters.
pub const DECLS: &[Decl] = &[
    Decl::num(
        "kvm.exit_software_cycles",
        Unit::Cycles,
        CYC,
        "KVM's exit/entry software path around every VM exit",
    ),
    Decl::num(
        "kvm.cr0_handler_cycles",
        Unit::Cycles,
        CYC,
        "handle_cr -> kvm_set_cr0 -> kvm_post_set_cr0 up to the MMU calls",
    ),
    Decl::num(
        "kvm.init_mmu_cycles",
        Unit::Cycles,
        CYC,
        "kvm_init_mmu: roles, guest walker reset, permission bitmasks",
    ),
    Decl::num(
        "kvm.unload_cycles",
        Unit::Cycles,
        CYC,
        "kvm_mmu_unload's fixed part",
    ),
    Decl::num(
        "kvm.free_root_cycles",
        Unit::Cycles,
        CYC,
        "per root freed by kvm_mmu_free_roots",
    ),
    Decl::num(
        "kvm.load_cycles",
        Unit::Cycles,
        CYC,
        "kvm_mmu_load's fixed part",
    ),
    Decl::num(
        "kvm.root_lookup_cycles",
        Unit::Cycles,
        CYC,
        "finding an existing root (hash or roots list)",
    ),
    Decl::num(
        "kvm.root_alloc_cycles",
        Unit::Cycles,
        CYC,
        "allocating and initialising a fresh root page",
    ),
    Decl::num(
        "kvm.ept_violation_cycles",
        Unit::Cycles,
        CYC,
        "one EPT violation handled by kvm_tdp_page_fault, table allocations excluded",
    ),
    Decl::num(
        "kvm.table_alloc_cycles",
        Unit::Cycles,
        CYC,
        "per EPT/shadow table page allocated during a fault",
    ),
    Decl::num(
        "kvm.db_reinject_cycles",
        Unit::Cycles,
        CYC,
        "#DB intercepted and reinjected",
    ),
    Decl::num(
        "kvm.shadow_pf_cycles",
        Unit::Cycles,
        CYC,
        "a guest #PF under shadow paging",
    ),
    Decl::num(
        "kvm.cr3_fast_switch_cycles",
        Unit::Cycles,
        CYC,
        "shadow paging: CR3 exit with the root in the previous-roots cache",
    ),
    Decl::num(
        "kvm.cr3_slow_switch_cycles",
        Unit::Cycles,
        CYC,
        "shadow paging: CR3 exit on the slow path (hash lookup, sync)",
    ),
    Decl::num(
        "kvm.emulate_cycles",
        Unit::Cycles,
        CYC,
        "shadow paging: one write to a write-protected guest page table emulated",
    ),
    Decl::num(
        "kvm.guest_walk_cycles",
        Unit::Cycles,
        CYC,
        "a walk of the guest's page tables in software (FNAME(walk_addr_generic)), fixed part",
    ),
    Decl::num(
        "kvm.guest_walk_level_cycles",
        Unit::Cycles,
        CYC,
        "per guest page-table level a software walk reads (memslot, hva, __get_user, checks)",
    ),
    Decl::num(
        "kvm.pte_write_cycles",
        Unit::Cycles,
        CYC,
        "shadow paging: kvm_mmu_pte_write on the shadow pages of the written gfn",
    ),
    Decl::num(
        "guest.pairs",
        Unit::Count,
        (1.0, 1e4),
        "ssdd tracer/tracee pairs",
    ),
    Decl::num(
        "guest.steps_per_pair",
        Unit::Count,
        (1.0, 1e9),
        "PTRACE_SINGLESTEP iterations per pair",
    ),
    Decl::num(
        "guest.wp_pairs_per_context_switch",
        Unit::Ratio,
        (0.0, 1e3),
        "CR0.WP toggle pairs per guest context switch (KERNEXEC around load_TLS)",
    ),
    Decl::num(
        "guest.wp_pairs_other_per_step",
        Unit::Ratio,
        (0.0, 1e4),
        "further CR0.WP toggle pairs per ssdd step (ptrace, signal, wait paths)",
    ),
    Decl::num(
        "guest.guest_work_cycles_per_step",
        Unit::Cycles,
        CYC,
        "guest cycles per ssdd step not modelled as touches, exits or walks",
    ),
    Decl::num(
        "guest.guest_ram_mib",
        Unit::Count,
        (64.0, 1e7),
        "guest RAM over which its objects spread, MiB",
    ),
    Decl::choice(
        "guest.placement",
        Placement::NAMES,
        "where the guest's kernel objects and user pages sit: as traced in a freshly booted Linux guest (workloads/ssdd-guest-placement.toml), in consecutive frames, or anywhere in its RAM",
    ),
    Decl {
        path: "guest.host_thp",
        unit: Unit::Bool,
        range: (0.0, 0.0),
        help: "the host backs guest RAM with 2 MiB pages, so EPT maps 2 MiB leaves",
        per_event: None,
    },
    Decl {
        path: "guest.per_cpu_pgd",
        unit: Unit::Bool,
        range: (0.0, 0.0),
        help: "PaX per-CPU PGD: a process switch copies the next mm's user PGD entries into the CPU's PGD",
        per_event: None,
    },
    Decl {
        path: "guest.kernel_text_4k",
        unit: Unit::Bool,
        range: (0.0, 0.0),
        help: "the guest maps its kernel text with 4 KiB pages instead of 2 MiB ones",
        per_event: None,
    },
    Decl::num(
        "guest.lines_per_touch",
        Unit::Count,
        (1.0, 64.0),
        "cache lines each guest page touch reads or writes",
    ),
];

/// Cycles KVM's own code spends on the paths the CR0.WP story exercises (host kernel 6.2,
/// kvm.git/queue of early 2023). No published per-function figure was found: each is an
/// ESTIMATE from the work the function does (named in its comment).
#[derive(Debug, Clone)]
pub struct KvmCosts {
    /// Cycles of KVM's exit/entry software path around every exit (vmx_vcpu_run register
    /// save/restore, fastpath checks, vcpu_enter_guest request loop). ESTIMATE: ~150
    /// instructions with a few MSR/VMCS reads.
    pub exit_software_cycles: f64,
    /// handle_cr → kvm_set_cr0 → kvm_post_set_cr0 up to the MMU calls: VMCS reads, the
    /// instruction decode of the exit qualification, CR0 checks. ESTIMATE.
    pub cr0_handler_cycles: f64,
    /// kvm_init_mmu: cpu_role computation, reset of the guest walker and
    /// update_permission_bitmask (16 entries × 8 access types) and the PKRU bitmask.
    /// ESTIMATE from the loops' length.
    pub init_mmu_cycles: f64,
    /// kvm_mmu_unload fixed part: taking mmu_lock for write, kvm_mmu_free_roots' checks,
    /// the remote-flush bookkeeping. ESTIMATE.
    pub unload_cycles: f64,
    /// Per root freed (current and each cached previous root): refcount drop, the list or
    /// hash update. ESTIMATE.
    pub free_root_cycles: f64,
    /// kvm_mmu_load fixed part: mmu_topup_memory_caches (already topped up), mmu_lock,
    /// load_pdptrs skip, kvm_mmu_load_pgd (VMWRITE of EPTP/CR3). ESTIMATE.
    pub load_cycles: f64,
    /// Finding an existing root (legacy: kvm_mmu_get_shadow_page hash lookup; TDP: the
    /// roots list walk with a refcount get). ESTIMATE.
    pub root_lookup_cycles: f64,
    /// Allocating and initialising a fresh root page (kvm_mmu_memory_cache alloc, the
    /// kvm_mmu_page init, list insertion). ESTIMATE.
    pub root_alloc_cycles: f64,
    /// An EPT violation handled by kvm_tdp_page_fault: gfn→pfn (memslot lookup,
    /// get_user_pages_fast on a present THP), the walk and SPTE install, per violation,
    /// excluding table allocations. ESTIMATE.
    pub ept_violation_cycles: f64,
    /// Per EPT/shadow table page allocated during a fault (from the memory cache, zeroed).
    /// ESTIMATE: clearing 4 KiB plus bookkeeping.
    pub table_alloc_cycles: f64,
    /// #DB intercepted and reinjected (handle_exception_nmi → kvm_queue_exception, event
    /// injection on entry). ESTIMATE.
    pub db_reinject_cycles: f64,
    /// Shadow paging: a guest #PF handled by FNAME(page_fault): shadow page lookup, SPTE
    /// install, its software walk of the guest tables excluded. ESTIMATE.
    pub shadow_pf_cycles: f64,
    /// Shadow paging: MOV to CR3 exit handled by kvm_mmu_new_pgd when the new root is in
    /// the previous-roots cache (fast_pgd_switch). ESTIMATE.
    pub cr3_fast_switch_cycles: f64,
    /// Shadow paging: the slow path when it is not: mmu_lock, kvm_mmu_get_shadow_page hash
    /// lookup of the root for (gfn, role), kvm_mmu_sync_roots. ESTIMATE.
    pub cr3_slow_switch_cycles: f64,
    /// Shadow paging: a store to a write-protected guest page table, from FNAME(page_fault)
    /// finding the gfn write-tracked to x86_decode_insn, x86_emulate_insn and the write
    /// through kvm_write_guest, its three software walks excluded. ESTIMATE.
    pub emulate_cycles: f64,
    /// A walk of the guest's page tables in software (FNAME(walk_addr_generic)): the fixed
    /// part (the walker's set-up, permission_fault, the A/D check, the GPA). ESTIMATE.
    pub guest_walk_cycles: f64,
    /// Per guest level such a walk reads: the memslot (last used slot), the hva, the entry
    /// through __get_user, the present, reserved-bit and access checks. ESTIMATE.
    pub guest_walk_level_cycles: f64,
    /// kvm_mmu_pte_write after an emulated write: the gfn's shadow pages looked up,
    /// write-flooding and misalignment checks, the SPTE updated. ESTIMATE.
    pub pte_write_cycles: f64,
}

impl KvmCosts {
    /// One exit and its entry on `hw`, with KVM's exit/entry software around them.
    pub fn exit_cycles(&self, hw: &crate::machine::VirtHardware) -> f64 {
        hw.vmexit_cycles + hw.vmentry_cycles + self.exit_software_cycles
    }

    /// The `kvm.*` parameters of a run.
    pub fn from(p: &Params) -> KvmCosts {
        let c = |name: &str| p.num(&format!("kvm.{name}"));
        KvmCosts {
            exit_software_cycles: c("exit_software_cycles"),
            cr0_handler_cycles: c("cr0_handler_cycles"),
            init_mmu_cycles: c("init_mmu_cycles"),
            unload_cycles: c("unload_cycles"),
            free_root_cycles: c("free_root_cycles"),
            load_cycles: c("load_cycles"),
            root_lookup_cycles: c("root_lookup_cycles"),
            root_alloc_cycles: c("root_alloc_cycles"),
            ept_violation_cycles: c("ept_violation_cycles"),
            table_alloc_cycles: c("table_alloc_cycles"),
            db_reinject_cycles: c("db_reinject_cycles"),
            shadow_pf_cycles: c("shadow_pf_cycles"),
            cr3_fast_switch_cycles: c("cr3_fast_switch_cycles"),
            cr3_slow_switch_cycles: c("cr3_slow_switch_cycles"),
            emulate_cycles: c("emulate_cycles"),
            guest_walk_cycles: c("guest_walk_cycles"),
            guest_walk_level_cycles: c("guest_walk_level_cycles"),
            pte_write_cycles: c("pte_write_cycles"),
        }
    }
}

/// The guest: a grsecurity (KERNEXEC) kernel running `ssdd`.
#[derive(Debug, Clone)]
pub struct GuestParams {
    /// ssdd tracer/tracee pairs. rt-tests' ssdd of early 2023 parses only -f/--forks and
    /// -i/--iters with getopt_long, so `ssdd 10 50000` ignores its positional arguments and
    /// runs the defaults: 10 pairs (src/ssdd/ssdd.c, `static int nforks = 10`).
    pub pairs: u64,
    /// PTRACE_SINGLESTEP iterations per pair: the default 10000 (`nsteps = 10000`), see
    /// `pairs`.
    pub steps_per_pair: u64,
    /// CR0.WP toggle pairs (open + close) per guest context switch in __switch_to:
    /// grsecurity wraps the TLS descriptor writes (load_TLS into the read-only GDT) in
    /// pax_open_kernel/pax_close_kernel. ESTIMATE: one pair; grsecurity's source for the
    /// 2023 kernel is not public. pax_switch_mm's pair comes with `per_cpu_pgd`.
    pub wp_pairs_per_context_switch: f64,
    /// Further toggle pairs per ssdd step on the ptrace, signal and wait paths (writes to
    /// __read_only data). Fitted to the legacy base row: no source counts them.
    pub wp_pairs_other_per_step: f64,
    /// Guest cycles per ssdd step not modelled as page touches, exits or walks (the
    /// instructions of the syscalls, trap, signal delivery and two context switches).
    /// Fitted to the legacy + patch row.
    pub guest_work_cycles_per_step: f64,
    /// Guest RAM in MiB, over which the guest's kernel objects and user pages are spread.
    /// ESTIMATE: a small test VM of 2 GiB.
    pub guest_ram_mib: u64,
    /// Where the guest's kernel objects and user pages sit in guest-physical memory
    /// (placement.rs): what decides how many 2 MiB regions a rebuilt TDP root faults back.
    pub placement: Placement,
    /// Whether the host backs guest RAM with 2 MiB pages (THP), so EPT maps 2 MiB leaves.
    /// ESTIMATE: QEMU's default anonymous memory with THP enabled.
    pub host_thp: bool,
    /// Cache lines each guest page touch reads or writes, so the guest's data competes
    /// with page-walk entries in the caches (its cycles are in the guest work). ESTIMATE:
    /// a kernel object access touches a few lines, a stack frame several.
    pub lines_per_touch: u64,
    /// Whether the guest maps its kernel text with 4 KiB pages (each text page its own TLB
    /// entry) rather than Linux's 2 MiB pages. ESTIMATE: 2 MiB, as x86-64 Linux maps the
    /// image; grsecurity's 2023 KERNEXEC layout is not public.
    pub kernel_text_4k: bool,
    /// PaX's per-CPU PGD (CONFIG_PAX_PER_CPU_PGD, under UDEREF on amd64): every CPU runs on
    /// its own PGD, and a process switch copies the next mm's 256 user PGD entries into it
    /// (pax_switch_mm -> __clone_user_pgds, in a KERNEXEC toggle pair of its own) instead
    /// of loading the mm's PGD. ESTIMATE: on, as the public PaX patches and hardened
    /// configs have it; the seed's 2023 guest config is not published.
    pub per_cpu_pgd: bool,
    /// The run's kernel recording, whose ssdd paths lay out the guest kernel's text.
    pub recording: std::sync::Arc<crate::kernel::paths::recording::Recording>,
}

impl GuestParams {
    /// The `guest.*` parameters of a run.
    pub fn from(p: &Params) -> GuestParams {
        let n = |name: &str| p.num(&format!("guest.{name}"));
        GuestParams {
            pairs: n("pairs") as u64,
            steps_per_pair: n("steps_per_pair") as u64,
            wp_pairs_per_context_switch: n("wp_pairs_per_context_switch"),
            wp_pairs_other_per_step: n("wp_pairs_other_per_step"),
            guest_work_cycles_per_step: n("guest_work_cycles_per_step"),
            guest_ram_mib: n("guest_ram_mib") as u64,
            placement: Placement::named(p.word("guest.placement"))
                .expect("guest.placement is a declared choice"),
            host_thp: p.flag("guest.host_thp"),
            lines_per_touch: n("lines_per_touch") as u64,
            kernel_text_4k: p.flag("guest.kernel_text_4k"),
            per_cpu_pgd: p.flag("guest.per_cpu_pgd"),
            recording: p.recording().clone(),
        }
    }
}
