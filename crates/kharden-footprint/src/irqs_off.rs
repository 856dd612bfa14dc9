//! Code that perf's cpu-clock sampling cannot see: cpu-clock samples from an hrtimer
//! interrupt, so code that runs with interrupts disabled is never the interrupted
//! instruction. Which functions each path runs there is read from the kernel source (Linux
//! 6.1-6.18, files named below); each is counted whole. Names missing from the running
//! kernel's kallsyms (inlined, renamed) are reported, not guessed.

/// Entry and exit of every syscall: arch/x86/entry/entry_64.S (entry_SYSCALL_64, the PTI
/// CR3 switch and the sysret path) and do_syscall_64 (arch/x86/entry/syscall_64.c; in 6.18
/// syscall_exit_to_user_mode is inlined into it) running with interrupts off until
/// enter_from_user_mode enables them and again from the exit work on.
const SYSCALL: &[&str] = &[
    "entry_SYSCALL_64",
    "entry_SYSCALL_64_safe_stack",
    "entry_SYSCALL_64_after_hwframe",
    "do_syscall_64",
    "switch_fpu_return",
];

/// An exception or interrupt from user mode: arch/x86/include/asm/idtentry.h and
/// entry_64.S (error_entry, error_return, the iret path), kernel/entry/common.c.
const EXCEPTION: &[&str] = &[
    "error_entry",
    "error_return",
    "irqentry_enter_from_user_mode",
    "irqentry_exit_to_user_mode",
    "irqentry_enter",
    "irqentry_exit",
    "swapgs_restore_regs_and_return_to_usermode",
    "native_irq_return_iret",
];

/// arch/x86/mm/fault.c: exc_page_fault reads CR2 and enters with interrupts off.
const PAGE_FAULT: &[&str] = &["asm_exc_page_fault", "exc_page_fault"];

/// kernel/sched/core.c __schedule -> context_switch with the runqueue lock held and
/// interrupts off: switch_mm_irqs_off (arch/x86/mm/tlb.c), __switch_to_asm
/// (entry_64.S), __switch_to (arch/x86/kernel/process_64.c), finish_task_switch.
const SWITCH: &[&str] = &[
    "__schedule",
    "switch_mm_irqs_off",
    "cr4_update_irqsoff",
    "switch_ldt",
    "__switch_to_asm",
    "__switch_to",
    "finish_task_switch.isra.0",
];

/// A new task's first return: ret_from_fork_asm (entry_64.S), ret_from_fork
/// (arch/x86/kernel/process.c), schedule_tail.
const FORK_CHILD: &[&str] = &["ret_from_fork_asm", "ret_from_fork", "schedule_tail"];

/// The call-function IPI: sysvec_call_function (arch/x86/kernel/smp.c) ->
/// __flush_smp_call_function_queue (kernel/smp.c) -> the callback, irq_enter/exit.
const CALL_FUNCTION: &[&str] = &[
    "asm_sysvec_call_function",
    "sysvec_call_function",
    "__sysvec_call_function",
    "__flush_smp_call_function_queue",
    "irq_enter_rcu",
    "irq_exit_rcu",
    "__irq_exit_rcu",
];

/// flush_tlb_func (arch/x86/mm/tlb.c) flushing one page, or the local full flush.
const TLB_FLUSH: &[&str] = &[
    "flush_tlb_func",
    "native_flush_tlb_one_user",
    "flush_tlb_one_user",
    "native_flush_tlb_local",
];

/// kernel/sched/membarrier.c: the IPI callback.
const MEMBARRIER: &[&str] = &["ipi_mb"];

/// The local APIC timer: sysvec_apic_timer_interrupt (arch/x86/kernel/apic/apic.c) ->
/// hrtimer_interrupt (kernel/time/hrtimer.c) -> tick_nohz_handler
/// (kernel/time/tick-sched.c) -> update_process_times (kernel/time/timer.c) -> sched_tick,
/// account_process_tick, rcu_sched_clock_irq; reprogramming the TSC deadline.
const TICK: &[&str] = &[
    "asm_sysvec_apic_timer_interrupt",
    "sysvec_apic_timer_interrupt",
    "__sysvec_apic_timer_interrupt",
    "hrtimer_interrupt",
    "__hrtimer_run_queues",
    "tick_nohz_handler",
    "update_process_times",
    "account_process_tick",
    "sched_tick",
    "rcu_sched_clock_irq",
    "clockevents_program_event",
    "lapic_next_deadline",
    "irq_enter_rcu",
    "irq_exit_rcu",
    "__irq_exit_rcu",
];

/// The debug exception from user mode: arch/x86/kernel/traps.c (exc_debug_user is entered
/// with interrupts off, sends SIGTRAP and re-enables them only around send_sigtrap).
const DEBUG: &[&str] = &["asm_exc_debug", "noist_exc_debug", "exc_debug_user"];

/// The interrupts-off functions of `path`, by kernel symbol name.
pub fn functions(path: &str) -> Vec<&'static str> {
    let groups: &[&[&str]] = match path {
        "fault-anon" | "fault-file" | "fault-cow" => &[PAGE_FAULT, EXCEPTION],
        "context-switch" => &[SYSCALL, SWITCH],
        "fork" | "wait4" | "ptrace-singlestep" => &[SYSCALL, SWITCH],
        "ptrace-stop" => &[DEBUG, EXCEPTION, SWITCH],
        "exit" => &[SYSCALL, SWITCH, FORK_CHILD, PAGE_FAULT, EXCEPTION],
        "execve" => &[SYSCALL, PAGE_FAULT, EXCEPTION],
        "mprotect-shootdown" | "munmap" | "mprotect" => &[SYSCALL, TLB_FLUSH],
        "ipi-tlb-flush" => &[CALL_FUNCTION, EXCEPTION, TLB_FLUSH],
        "ipi-membarrier" => &[CALL_FUNCTION, EXCEPTION, MEMBARRIER],
        "timer-tick" => &[TICK, EXCEPTION],
        _ => &[SYSCALL],
    };
    let mut names: Vec<&str> = groups.iter().flat_map(|g| g.iter().copied()).collect();
    names.sort_unstable();
    names.dedup();
    names
}
