//! What the kernel offers plug-ins: the hooks it calls at named events (a defense implements
//! the ones it needs), the hypervisor it calls when it runs as a guest (virt/ implements
//! it), and the oracle's types it raises when a checked property breaks. Defined on the
//! kernel's side so the kernel never imports a defense, virt/ or the oracle.

use super::page_alloc::Gfp;
use super::{BootConfig, CpuId, Kernel, MmId, TaskId};
use crate::arch::x86::ept::SecondStage;
use crate::arch::x86::{Access, Pfn, VirtAddr};
use crate::machine::MachineProfile;
use crate::params::Params;
use serde::Serialize;

/// The hooks. All default to doing nothing.
pub trait Defense {
    /// Name as given on the command line, e.g. "pti:linux".
    fn name(&self) -> String;

    /// Before boot: adjust boot choices (global kernel mappings, PCID use, ...) and read
    /// the defense's own parameters.
    fn configure(&mut self, _config: &mut BootConfig, _machine: &MachineProfile, _params: &Params) {
    }

    /// After the kernel half is mapped and the CPUs are up.
    fn on_boot(&mut self, _k: &mut Kernel) {}

    /// A new address space exists, created on `cpu` (its kernel half is shared, its user
    /// half empty).
    fn on_mm_created(&mut self, _k: &mut Kernel, _cpu: CpuId, _mm: MmId) {}

    /// A user-half PGD slot of `mm` went from empty to populated (a new PUD/P4D).
    fn on_user_pgd_populated(&mut self, _k: &mut Kernel, _mm: MmId, _slot: usize) {}

    /// Just after entering the kernel from user mode (syscall, exception, interrupt).
    fn on_kernel_entry(&mut self, _k: &mut Kernel, _cpu: CpuId) {}

    /// Just before returning to user mode.
    fn on_kernel_exit(&mut self, _k: &mut Kernel, _cpu: CpuId) {}

    /// `cpu` switched to `mm`; `need_flush` when its ASID's TLB contents were stale.
    fn on_switch_mm(&mut self, _k: &mut Kernel, _cpu: CpuId, _mm: MmId, _need_flush: bool) {}

    /// The kernel flushed user addresses [start, start + pages) of `mm` from this CPU's TLB
    /// in the kernel's context (`pages` = kernel::tlb::tlbflush::FLUSH_ALL for a full flush).
    fn on_user_tlb_flush(
        &mut self,
        _k: &mut Kernel,
        _cpu: CpuId,
        _mm: MmId,
        _start: VirtAddr,
        _pages: u64,
    ) {
    }

    /// A page was allocated (after the allocator's own work) / is being freed.
    fn on_page_alloc(&mut self, _k: &mut Kernel, _cpu: CpuId, _pfn: Pfn, _gfp: Gfp) {}
    fn on_page_free(&mut self, _k: &mut Kernel, _cpu: CpuId, _pfn: Pfn, _gfp: Gfp) {}

    /// An empty per-CPU free list was refilled with `batch` from the node.
    fn on_pcp_refill(&mut self, _k: &mut Kernel, _cpu: CpuId, _batch: &[Pfn]) {}

    /// Before a measurement: every frame of `frames` was handed to user space and freed
    /// earlier in the workload's life (a long-running build recycles its frames). Set up the
    /// state that history leaves; nothing is charged.
    fn on_frames_recycled(&mut self, _k: &mut Kernel, _frames: &[Pfn]) {}

    /// A kernel path did `n` refcount_t operations (half increments, half decrements).
    fn on_refcount_ops(&mut self, _k: &mut Kernel, _cpu: CpuId, _n: u32) {}

    /// The kernel maps a page for a copy (kmap/kmap_atomic) and unmaps it afterwards.
    fn on_kmap(&mut self, _k: &mut Kernel, _cpu: CpuId, _pfn: Pfn) {}
    fn on_kunmap(&mut self, _k: &mut Kernel, _cpu: CpuId, _pfn: Pfn) {}

    /// After on_kmap: an alias of the defense's own through which the copy is to reach the
    /// page (`access` is the copy's access to it), instead of the direct map; `None` keeps
    /// the direct map. ASI's ephmap maps a page-cache page into a per-CPU slot of the
    /// address space's restricted tables so a read need not leave them.
    fn kmap_alias(
        &mut self,
        _k: &mut Kernel,
        _cpu: CpuId,
        _pfn: Pfn,
        _access: Access,
    ) -> Option<VirtAddr> {
        None
    }

    /// A kernel-mode access to kernel address `va` took a not-present page fault. Return
    /// true when the defense made it reachable (ASI's restricted tables leave sensitive
    /// memory out; its fault handler switches to the full tables): the kernel then charges
    /// the exception and retries the access once. A fault nobody handles is the kernel's
    /// bug and stays an error.
    fn on_kernel_fault(
        &mut self,
        _k: &mut Kernel,
        _cpu: CpuId,
        _va: VirtAddr,
        _access: Access,
    ) -> bool {
        false
    }

    /// Linux's context_switch() is about to switch `cpu` away from its running task (to
    /// another task, or to idle), before switch_mm.
    fn on_context_switch(&mut self, _k: &mut Kernel, _cpu: CpuId) {}

    /// fork() created `child` from `parent` (dup_task_struct copies the parent's task_struct,
    /// so per-task state is inherited).
    fn on_task_forked(&mut self, _k: &mut Kernel, _cpu: CpuId, _parent: TaskId, _child: TaskId) {}

    /// `task` was just switched in on `cpu` (after switch_mm; Linux's switch_mm_irqs_off
    /// runs with the incoming task known).
    fn on_task_switched_in(&mut self, _k: &mut Kernel, _cpu: CpuId, _task: TaskId) {}

    /// The kernel flushed kernel addresses [start, start + pages) from this CPU's TLB page by
    /// page (Linux __flush_tlb_one_kernel, which also calls flush_tlb_one_user for them).
    fn on_kernel_page_flush(
        &mut self,
        _k: &mut Kernel,
        _cpu: CpuId,
        _start: VirtAddr,
        _pages: u64,
    ) {
    }

    /// text_poke() wrote content `version` into the original image's text line at `va`;
    /// a defense that keeps other copies of the text writes them here.
    fn on_text_poke(&mut self, _k: &mut Kernel, _cpu: CpuId, _va: VirtAddr, _version: u64) {}

    /// The security property, checked in user mode right after a return from the kernel.
    fn check_user_mode(&self, _k: &Kernel, _cpu: CpuId) -> Option<Violation> {
        None
    }

    /// The plug-in's state for kernel/steady.rs (Canon: no clocks, no stamps, no memos).
    /// Without it the kernel never takes a state with this plug-in for a repeat of another.
    fn canon(&self, c: &mut crate::sim::Canon) {
        c.opaque();
    }
}

/// Stands in for a defense while its own hook runs (see Kernel::with_defenses).
pub struct Running;

impl Defense for Running {
    fn name(&self) -> String {
        "(running)".into()
    }
}

/// The hypervisor under a kernel that runs as a guest (`Kernel::run_in_vm`): the second
/// stage of every CPU's walks, and the exits the guest's privileged events take. Each
/// returns the cycles its exit costs; the kernel charges them to the CPU as vm-exit.
pub trait Hypervisor {
    /// The second stage (EPT) the guest's walks go through.
    fn second_stage(&mut self) -> &mut dyn SecondStage;

    /// Cycles of the exits the second stage took since the last call (EPT violations).
    fn take_exit_cycles(&mut self) -> f64;

    /// The guest's MOV to CR0 setting WP to `wp` (KERNEXEC's pax_open_kernel and
    /// pax_close_kernel).
    fn write_cr0_wp(&mut self, wp: bool) -> Cr0Write;

    /// A #DB the guest takes (single-stepping).
    fn debug_trap(&mut self) -> f64;

    /// The hypervisor's state for kernel/steady.rs (Canon: no clocks, no stamps, no memos).
    fn canon(&self, c: &mut crate::sim::Canon);

    /// Itself, for its owner to read back as its own type (`Kernel::vm_as`).
    fn as_any(&self) -> &dyn std::any::Any;
}

/// What a guest's MOV to CR0 cost and whether its vCPU must drop every cached translation
/// (the hypervisor loaded a root and flushed its EPTP) before the guest goes on.
pub struct Cr0Write {
    pub cycles: f64,
    pub flush: bool,
}

/// How often invariants are checked at returns to user mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OracleMode {
    Off,
    /// The first 16 returns, then every n-th (cheap enough for long runs).
    Sampled(u64),
    /// Every return (what `kharden check` uses).
    Every,
}

impl Default for OracleMode {
    /// Sampled, cheap enough for long runs.
    fn default() -> Self {
        OracleMode::Sampled(1024)
    }
}

impl OracleMode {
    pub fn due(self, returns: u64) -> bool {
        match self {
            OracleMode::Off => false,
            OracleMode::Every => true,
            OracleMode::Sampled(n) => returns <= 16 || returns % n == 0,
        }
    }
}

/// A broken security property, with enough detail to find the cause.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub defense: String,
    pub cpu: usize,
    pub what: String,
}
