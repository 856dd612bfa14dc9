//! Parameters of KVM's software paths and of the guest's ssdd step. Hardware facts (exit,
//! entry, INVEPT costs) are in the machine profile's `[virt]` section instead.

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
    /// Shadow paging: a guest #PF handled by FNAME(page_fault): guest walk in software,
    /// shadow page lookup, SPTE install. ESTIMATE.
    pub shadow_pf_cycles: f64,
    /// Shadow paging: MOV to CR3 exit handled by kvm_mmu_new_pgd when the new root is in
    /// the previous-roots cache (fast_pgd_switch). ESTIMATE.
    pub cr3_fast_switch_cycles: f64,
    /// Shadow paging: the slow path when it is not: mmu_lock, kvm_mmu_get_shadow_page hash
    /// lookup of the root for (gfn, role), kvm_mmu_sync_roots. ESTIMATE.
    pub cr3_slow_switch_cycles: f64,
}

impl Default for KvmCosts {
    fn default() -> Self {
        KvmCosts {
            exit_software_cycles: 400.0,
            cr0_handler_cycles: 300.0,
            init_mmu_cycles: 600.0,
            unload_cycles: 300.0,
            free_root_cycles: 150.0,
            load_cycles: 500.0,
            root_lookup_cycles: 300.0,
            root_alloc_cycles: 1500.0,
            ept_violation_cycles: 2500.0,
            table_alloc_cycles: 800.0,
            db_reinject_cycles: 300.0,
            shadow_pf_cycles: 3000.0,
            cr3_fast_switch_cycles: 600.0,
            cr3_slow_switch_cycles: 2000.0,
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
    /// CR0.WP toggle pairs (open + close) per guest context switch: grsecurity wraps the
    /// TLS descriptor writes of __switch_to (load_TLS into the read-only GDT) in
    /// pax_open_kernel/pax_close_kernel. ESTIMATE: one pair; grsecurity's source for the
    /// 2023 kernel is not public.
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
    /// Whether the host backs guest RAM with 2 MiB pages (THP), so EPT maps 2 MiB leaves.
    /// ESTIMATE: QEMU's default anonymous memory with THP enabled.
    pub host_thp: bool,
    /// Cache lines each guest page touch reads or writes, so the guest's data competes
    /// with page-walk entries in the caches (its cycles are in the guest work). ESTIMATE:
    /// a kernel object access touches a few lines, a stack frame several.
    pub lines_per_touch: u64,
}

impl Default for GuestParams {
    fn default() -> Self {
        GuestParams {
            pairs: 10,
            steps_per_pair: 10_000,
            wp_pairs_per_context_switch: 1.0,
            wp_pairs_other_per_step: 0.0,
            guest_work_cycles_per_step: 0.0,
            guest_ram_mib: 2048,
            host_thp: true,
            lines_per_touch: 8,
        }
    }
}
