//! The scheduler: per-CPU run queues, wake-up placement that prefers an idle CPU near the
//! task's last one (Linux select_idle_sibling), new-idle balancing that pulls a waiting task
//! from the busiest queue, time slices, and context switches through switch_mm. Periodic and
//! nohz idle balancing from the tick are in balance.rs.

use crate::kernel::{CpuId, Kernel, TaskId};
use crate::sim::{Counter, Time};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    Runnable,
    Running(CpuId),
    /// Waiting for a child to exit.
    Blocked,
    Dead,
}

impl Kernel {
    /// Nothing running, nothing waiting, and no wake-up on its way.
    pub(super) fn is_idle(&self, cpu: CpuId) -> bool {
        self.cpus[cpu].current.is_none() && self.cpus[cpu].rq.is_empty() && !self.cpus[cpu].starting
    }

    /// Makes `task` runnable at time `at`; returns the CPU it was placed on when that CPU
    /// was idle and must now be started (its clock is moved to the wake-up plus any C-state
    /// exit latency).
    pub fn wake_up(&mut self, task: TaskId, at: Time) -> Option<CpuId> {
        self.note_clock_read();
        self.tasks[task].state = TaskState::Runnable;
        let prev = self.tasks[task].last_cpu.unwrap_or(0);
        let n = self.cpus.len();
        let target = if self.is_idle(prev) {
            Some(prev)
        } else {
            let same_socket =
                (0..n).find(|&c| self.socket_of(c) == self.socket_of(prev) && self.is_idle(c));
            same_socket.or_else(|| (0..n).find(|&c| self.is_idle(c)))
        };
        match target {
            Some(cpu) => {
                self.cpus[cpu].rq.push_back(task);
                let exit = self.idle_exit_latency(cpu, at);
                let c = &mut self.cpus[cpu];
                c.now = c.now.max(at) + exit;
                self.cpus[cpu].starting = true;
                Some(cpu)
            }
            None => {
                // Everyone is busy: queue on the shortest run queue of the task's socket.
                let cpu = (0..n)
                    .filter(|&c| self.socket_of(c) == self.socket_of(prev))
                    .min_by_key(|&c| self.cpus[c].rq.len())
                    .unwrap_or(prev);
                self.cpus[cpu].rq.push_back(task);
                None
            }
        }
    }

    /// Picks what `cpu` runs next: its own queue, else a task stolen from the longest queue
    /// (same socket first). Returns `None` and leaves the CPU idle (lazy TLB) if nothing waits.
    pub fn schedule(&mut self, cpu: CpuId) -> Option<TaskId> {
        self.note_clock_read();
        self.cpus[cpu].starting = false;
        let next = self.cpus[cpu].rq.pop_front().or_else(|| self.steal(cpu));
        let prev = self.cpus[cpu].current;
        match next {
            Some(t) => {
                if prev != Some(t) {
                    self.context_switch(cpu, t);
                }
                Some(t)
            }
            None => {
                if prev.is_some() {
                    self.leave_user_mode(cpu); // the idle loop runs in the kernel
                    self.with_defenses(|d, k| d.on_context_switch(k, cpu));
                    self.cpus[cpu].current = None;
                    self.enter_lazy_tlb(cpu);
                }
                None
            }
        }
    }

    fn steal(&mut self, cpu: CpuId) -> Option<TaskId> {
        let n = self.cpus.len();
        let busiest = (0..n)
            .filter(|&c| c != cpu && !self.cpus[c].rq.is_empty())
            .max_by_key(|&c| {
                (
                    self.cpus[c].rq.len(),
                    self.socket_of(c) == self.socket_of(cpu),
                    std::cmp::Reverse(c),
                )
            })?;
        self.cpus[busiest].rq.pop_back() // counted as a migration when it runs here
    }

    fn context_switch(&mut self, cpu: CpuId, next: TaskId) {
        if let Some(prev) = self.cpus[cpu].current {
            if self.tasks[prev].state == TaskState::Running(cpu) {
                self.tasks[prev].state = TaskState::Runnable;
            }
            self.tasks[prev].last_ran = Some(self.cpus[cpu].now);
        }
        self.cpus[cpu].stats.count(Counter::ContextSwitches);
        self.leave_user_mode(cpu);
        self.with_defenses(|d, k| d.on_context_switch(k, cpu));
        self.switch_to(cpu, next);
        // __schedule's path runs on both sides of switch_mm; charged after it, with the next
        // task's stack and mm, where the refills of a flushing CR3 write land.
        if let Err(e) = self.run_known_path(
            cpu,
            "context-switch",
            crate::kernel::paths::path_work::Work::Measured,
        ) {
            panic!("context switch: {e}");
        }
        if self.tasks[next].last_cpu.is_some_and(|l| l != cpu) {
            self.cpus[cpu].stats.count(Counter::Migrations);
        }
        self.tasks[next].last_cpu = Some(cpu);
        self.tasks[next].state = TaskState::Running(cpu);
        self.cpus[cpu].slice_start = self.cpus[cpu].now;
        self.with_defenses(|d, k| d.on_task_switched_in(k, cpu, next));
    }

    /// True when the running task used its slice and someone waits on this CPU.
    pub fn should_preempt(&self, cpu: CpuId) -> bool {
        self.note_clock_read();
        !self.cpus[cpu].rq.is_empty()
            && self.cpus[cpu].now - self.cpus[cpu].slice_start >= self.params.timeslice
    }

    /// Kernel mode for the scheduler: a CPU still in user mode (its task preempted at a
    /// tick) entered the kernel through the interrupt, PTI's CR3 switch included, so that
    /// __schedule's text and a lazily kept mm are reached through the kernel page tables.
    pub fn leave_user_mode(&mut self, cpu: CpuId) {
        if self.cpus[cpu].user_mode {
            self.cpus[cpu].user_mode = false;
            self.with_defenses(|d, k| d.on_kernel_entry(k, cpu));
        }
        self.log_mode(cpu, false);
    }

    /// Puts the running task at the back of its queue.
    pub fn preempt(&mut self, cpu: CpuId) {
        if let Some(t) = self.cpus[cpu].current {
            self.tasks[t].state = TaskState::Runnable;
            self.cpus[cpu].rq.push_back(t);
        }
    }
}
