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
/// (entry_64.S), __switch_to (arch/x86/kernel/process_64.c), finish_task_switch; and the
/// switched-in task's FPU registers, restored on its return to user mode with interrupts
/// off (switch_fpu_return -> restore_fpregs_from_fpstate, arch/x86/kernel/fpu/core.c).
const SWITCH: &[&str] = &[
    "__schedule",
    "switch_mm_irqs_off",
    "cr4_update_irqsoff",
    "switch_ldt",
    "__switch_to_asm",
    "__switch_to",
    "finish_task_switch.isra.0",
    "restore_fpregs_from_fpstate",
];

/// __schedule before context_switch (kernel/sched/core.c), with interrupts off from its
/// local_irq_disable: rcu_note_context_switch, the runqueue lock, update_rq_clock, the pick
/// (pick_next_task_fair -> pick_eevdf; put_prev_entity and set_next_entity through
/// put_prev_set_next_task; update_curr and the load averages, kernel/sched/fair.c), psi's
/// task switch and the sched_switch tracepoint. Debian's 6.1 under ftrace
/// (kernels/linux-6.1.0-47-amd64-ftrace.toml) runs these on every switch, and the sampled
/// recording of 6.18 had none of them (docs/design/footprints.md section 3).
const PICK_NEXT: &[&str] = &[
    "rcu_note_context_switch",
    "raw_spin_rq_lock_nested",
    "raw_spin_rq_unlock",
    "_raw_spin_lock",
    "_raw_spin_unlock",
    "update_rq_clock",
    "sched_clock_cpu",
    "pick_next_task_fair",
    "pick_task_fair",
    "pick_eevdf",
    "put_prev_task_fair",
    "put_prev_entity",
    "set_next_task_fair",
    "set_next_entity",
    "update_curr",
    "cpuacct_charge",
    "check_cfs_rq_runtime",
    "update_load_avg",
    "__update_load_avg_se",
    "__update_load_avg_cfs_rq",
    "psi_task_switch",
    "psi_flags_change",
    "psi_group_change",
    "__traceiter_sched_switch",
];

/// sched_yield (kernel/sched/syscalls.c do_sched_yield, under this_rq_lock_irq).
const YIELD: &[&str] = &["do_sched_yield", "yield_task_fair"];

/// A new task's first return: ret_from_fork_asm (entry_64.S), ret_from_fork
/// (arch/x86/kernel/process.c), schedule_tail.
const FORK_CHILD: &[&str] = &["ret_from_fork_asm", "ret_from_fork", "schedule_tail"];

/// The call-function IPI: sysvec_call_function, or sysvec_call_function_single for one
/// target (arch/x86/kernel/smp.c) -> generic_smp_call_function_single_interrupt ->
/// __flush_smp_call_function_queue (kernel/smp.c) -> the callback, irq_enter/exit. The
/// single-target vector and generic_smp_call_function_single_interrupt are what Debian's
/// 6.1 ran for every TLB-flush and membarrier IPI under ftrace.
const CALL_FUNCTION: &[&str] = &[
    "asm_sysvec_call_function",
    "sysvec_call_function",
    "__sysvec_call_function",
    "asm_sysvec_call_function_single",
    "sysvec_call_function_single",
    "__sysvec_call_function_single",
    "generic_smp_call_function_single_interrupt",
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

/// kill's send, under lock_task_sighand's spin_lock_irqsave (kernel/signal.c
/// do_send_sig_info): __send_signal_locked queues a sigqueue (GFP_ATOMIC slab allocation,
/// the ucounts rlimit) and complete_signal wakes the target (signal_wake_up_state).
const SEND_SIGNAL: &[&str] = &[
    "__lock_task_sighand",
    "_raw_spin_lock_irqsave",
    "_raw_spin_unlock_irqrestore",
    "send_signal_locked",
    "__send_signal_locked",
    "prepare_signal",
    "inc_rlimit_get_ucounts",
    "kmem_cache_alloc_noprof",
    "complete_signal",
    "signal_wake_up_state",
    "wake_up_state",
];

/// try_to_wake_up of a sleeping task pinned to another, busy CPU, under p->pi_lock with
/// interrupts off (kernel/sched/core.c): select_task_rq, ttwu_queue taking the remote
/// runqueue's lock (the wakelist is used only when that CPU is idle), ttwu_do_activate ->
/// enqueue_task_fair (kernel/sched/fair.c: update_curr, place_entity, the load averages,
/// the rbtree insert), psi accounting (psi=1 on this host), wakeup_preempt ->
/// check_preempt_wakeup_fair -> resched_curr and the reschedule IPI through the physical
/// x2APIC (arch/x86/kernel/apic/x2apic_phys.c). The recording host's ipi:ipi_send_cpu and
/// csd:csd_queue_cpu tracepoints confirm this branch (one IPI per kill from
/// wakeup_preempt, no wakelist).
const WAKE_REMOTE: &[&str] = &[
    "try_to_wake_up",
    "select_task_rq",
    "raw_spin_rq_lock_nested",
    "raw_spin_rq_unlock",
    "update_rq_clock",
    "sched_clock_cpu",
    "ttwu_do_activate",
    "activate_task",
    "enqueue_task",
    "enqueue_task_fair",
    "update_curr",
    "place_entity",
    "avg_vruntime",
    "update_load_avg",
    "__update_load_avg_se",
    "__update_load_avg_cfs_rq",
    "update_cfs_group",
    "__enqueue_entity",
    "min_vruntime_cb_rotate",
    "hrtick_update",
    "psi_task_change",
    "psi_group_change",
    "wakeup_preempt",
    "check_preempt_wakeup_fair",
    "pick_eevdf",
    "resched_curr",
    "__resched_curr",
    "native_smp_send_reschedule",
    "x2apic_send_IPI",
    "__x2apic_send_IPI_dest",
];

/// Changing the blocked mask (kernel/signal.c __set_current_blocked under siglock with
/// spin_lock_irq): rt_sigreturn's restore of the mask, and delivery's block of the handled
/// signal.
const SET_BLOCKED: &[&str] = &[
    "_raw_spin_lock_irq",
    "_raw_spin_unlock_irq",
    "__set_task_blocked",
    "recalc_sigpending",
];

/// Signal delivery on the return to user mode: exit_to_user_mode_loop is entered with
/// interrupts off (kernel/entry/common.c); get_signal dequeues under siglock with
/// spin_lock_irq (kernel/signal.c: dequeue_signal, next_signal, collect_signal freeing the
/// sigqueue and its ucount, recalc_sigpending).
const DELIVER: &[&str] = &[
    "exit_to_user_mode_loop",
    "dequeue_signal",
    "next_signal",
    "collect_signal",
    "__sigqueue_free",
    "dec_rlimit_put_ucounts",
    "kmem_cache_free",
];

/// mm/percpu.c pcpu_alloc_noprof's area search and allocation under pcpu_lock with
/// spin_lock_irqsave: a mount allocates four per-CPU areas (the vfsmount's counters, the
/// superblock's s_writers rwsems), per the host's percpu:percpu_alloc_percpu tracepoint.
const PERCPU_ALLOC: &[&str] = &[
    "_raw_spin_lock_irqsave",
    "_raw_spin_unlock_irqrestore",
    "pcpu_find_block_fit",
    "pcpu_alloc_area",
    "pcpu_block_update_hint_alloc",
    "pcpu_block_refresh_hint",
    "pcpu_chunk_relocate",
];

/// The interrupts-off functions of `path`, by kernel symbol name.
pub fn functions(path: &str) -> Vec<&'static str> {
    let groups: &[&[&str]] = match path {
        "fault-anon" | "fault-file" | "fault-cow" => &[PAGE_FAULT, EXCEPTION],
        "context-switch" => &[SYSCALL, SWITCH, PICK_NEXT, YIELD],
        "fork" | "wait4" | "ptrace-singlestep" => &[SYSCALL, SWITCH, PICK_NEXT],
        "ptrace-stop" => &[DEBUG, EXCEPTION, SWITCH, PICK_NEXT],
        "exit" => &[
            SYSCALL, SWITCH, PICK_NEXT, FORK_CHILD, PAGE_FAULT, EXCEPTION,
        ],
        "execve" => &[SYSCALL, PAGE_FAULT, EXCEPTION],
        "mprotect-shootdown" | "munmap" | "mprotect" => &[SYSCALL, TLB_FLUSH],
        "ipi-tlb-flush" => &[CALL_FUNCTION, EXCEPTION, TLB_FLUSH],
        "ipi-membarrier" => &[CALL_FUNCTION, EXCEPTION, MEMBARRIER],
        "timer-tick" => &[TICK, EXCEPTION],
        "kill" => &[SYSCALL, SEND_SIGNAL, WAKE_REMOTE],
        "signal-deliver" => &[DELIVER, SET_BLOCKED],
        "rt_sigreturn" => &[SYSCALL, SET_BLOCKED],
        "mount-proc" => &[SYSCALL, PERCPU_ALLOC],
        // It sleeps once in synchronize_rcu_expedited (namespace_unlock).
        "umount" => &[SYSCALL, SWITCH, PICK_NEXT],
        _ => &[SYSCALL],
    };
    let mut names: Vec<&str> = groups.iter().flat_map(|g| g.iter().copied()).collect();
    names.sort_unstable();
    names.dedup();
    names
}
