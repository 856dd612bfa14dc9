//! The kernel model's software parameters: declared here, valued in kernels/linux.toml,
//! resolved once at boot into a plain struct the paths read.

use super::mitigations::KernelMitigations;
use super::IrqTime;
use crate::params::{Decl, Params, Unit};
use crate::sim::Time;

const CYC: (f64, f64) = (0.0, 1e8);

pub const DECLS: &[Decl] = &[
    Decl::num("kernel.irq_path_cycles", Unit::Cycles, (0.0, 100_000.0), "Linux's hard-IRQ path on top of the exception entry and return (APIC EOI, irq_enter/irq_exit)"),
    Decl::choice("kernel.irq_time", &["task-system", "tick", "excluded"], "whose time a hard interrupt's handler is: the interrupted task's system time, tick-sampled, or no task's (CONFIG_IRQ_TIME_ACCOUNTING)"),
    Decl::choice("kernel.speculation_mitigations", &KernelMitigations::WORDS, "which of the recording's speculation mitigations (retpolines, Safe RET) the kernel runs on its paths: auto decides by the machine (a detected host: the recording's; arm64: none; other x86: retpolines only), or recorded, retpoline, none"),
    Decl::num("kernel.tlb_single_page_flush_ceiling", Unit::Count, (0.0, 1e6), "above this many pages a range flush becomes a full flush"),
    Decl::num("kernel.exit_latency_ns", Unit::Ns, (0.0, 1e7), "a minimal process's exit timed on the recording host, from which the exit path's work is derived (its pages' teardown apart)"),
    Decl::num("kernel.exit_page_cycles", Unit::Cycles, CYC, "tearing down one anonymous page of an address space (exit_mmap: unmap, rmap, memcg uncharge, free)"),
    Decl::num("kernel.fork_latency_ns", Unit::Ns, (0.0, 1e7), "fork() of a minimal parent timed on the recording host, from which the fork path's work is derived (the parent's pages apart)"),
    Decl::num("kernel.fork_page_cycles", Unit::Cycles, CYC, "copying one of the parent's anonymous page mappings at fork (copy_page_range: both PTEs write-protected, the page's map count)"),
    Decl::num("kernel.fork_refcount_ops", Unit::Count, (0.0, 1e4), "refcount_t operations of copy_process()"),
    Decl::num("kernel.exit_refcount_ops", Unit::Count, (0.0, 1e4), "refcount_t operations of exit()"),
    Decl::num("kernel.exec_refcount_ops", Unit::Count, (0.0, 1e4), "refcount_t operations of execve()"),
    Decl::num("kernel.file_page_cycles", Unit::Cycles, CYC, "per page of a buffered read() or write() besides the copy"),
    Decl::num("kernel.copy_page_cycles", Unit::Cycles, CYC, "copying one 4 KiB page (rep movsb from L2/L3)"),
    Decl::num("kernel.set_kpte_cycles", Unit::Cycles, CYC, "one set_kpte(): lookup_address() walk and the PTE update"),
    Decl::num("kernel.split_cycles", Unit::Cycles, CYC, "splitting one large direct-map page: table page and 512 entries"),
    Decl::num("kernel.call_function_handler_cycles", Unit::Cycles, CYC, "generic IPI handler around the function (flush_smp_call_function_queue)"),
    Decl::num("kernel.ipi_lines_per_request", Unit::Count, (0.0, 64.0), "cache lines a target moves from the initiator per call request"),
    Decl::num("kernel.sched.timeslice_ms", Unit::Ms, (0.01, 1000.0), "time a runnable task gets before preemption by a waiting one"),
];

/// Paths whose work the model derives from a latency timed apart from the recording, not
/// from the recording's own: (path, parameter in ns). The recording cannot loop an exit,
/// and its fork is the recording driver's.
pub const LATENCIES_TIMED_APART: &[(&str, &str)] = &[
    ("fork", "kernel.fork_latency_ns"),
    ("exit", "kernel.exit_latency_ns"),
];

/// The kernel's parameters, resolved. Read on hot paths, so plain fields.
#[derive(Debug, Clone)]
pub struct KernelParams {
    pub irq_path_cycles: f64,
    pub irq_time: IrqTime,
    pub speculation_mitigations: KernelMitigations,
    pub tlb_single_page_flush_ceiling: u64,
    pub exit_latency_ns: f64,
    pub exit_page_cycles: f64,
    pub fork_latency_ns: f64,
    pub fork_page_cycles: f64,
    pub fork_refcount_ops: u32,
    pub exit_refcount_ops: u32,
    pub exec_refcount_ops: u32,
    pub file_page_cycles: f64,
    pub copy_page_cycles: f64,
    pub set_kpte_cycles: f64,
    pub split_cycles: f64,
    pub call_function_handler_cycles: f64,
    pub ipi_lines_per_request: u32,
    pub timeslice: Time,
}

impl KernelParams {
    pub fn from(p: &Params) -> KernelParams {
        let count = |path| p.num(path) as u32;
        KernelParams {
            irq_path_cycles: p.num("kernel.irq_path_cycles"),
            irq_time: [IrqTime::TaskSystem, IrqTime::Tick, IrqTime::Excluded]
                .into_iter()
                .find(|t| t.name() == p.word("kernel.irq_time"))
                .expect("the declaration lists the same words"),
            speculation_mitigations: KernelMitigations::named(
                p.word("kernel.speculation_mitigations"),
            )
            .expect("the declaration lists the same words"),
            tlb_single_page_flush_ceiling: p.num("kernel.tlb_single_page_flush_ceiling") as u64,
            exit_latency_ns: p.num("kernel.exit_latency_ns"),
            exit_page_cycles: p.num("kernel.exit_page_cycles"),
            fork_latency_ns: p.num("kernel.fork_latency_ns"),
            fork_page_cycles: p.num("kernel.fork_page_cycles"),
            fork_refcount_ops: count("kernel.fork_refcount_ops"),
            exit_refcount_ops: count("kernel.exit_refcount_ops"),
            exec_refcount_ops: count("kernel.exec_refcount_ops"),
            file_page_cycles: p.num("kernel.file_page_cycles"),
            copy_page_cycles: p.num("kernel.copy_page_cycles"),
            set_kpte_cycles: p.num("kernel.set_kpte_cycles"),
            split_cycles: p.num("kernel.split_cycles"),
            call_function_handler_cycles: p.num("kernel.call_function_handler_cycles"),
            ipi_lines_per_request: count("kernel.ipi_lines_per_request"),
            timeslice: Time((p.num("kernel.sched.timeslice_ms") * 1e9) as u64),
        }
    }
}
