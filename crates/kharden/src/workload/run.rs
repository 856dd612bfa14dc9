//! The engine loop: CPUs take turns in simulated-time order (the event queue holds each
//! busy CPU's next free moment), each running one operation of its task's program. Blocking,
//! exiting and preemption go through the kernel's scheduler; wake-ups start idle CPUs.

use super::program::{Op, Program};
use crate::arch::x86::{Access, VirtAddr};
use crate::error::Result;
use crate::kernel::memory::layout::{USER_DATA, USER_STACK_TOP, USER_TEXT};
use crate::kernel::sched::scheduler::TaskState;
use crate::kernel::{CpuId, Kernel, TaskId};
use crate::sim::{EventQueue, Pcg32, Stats, Time};
use std::collections::BTreeMap;

/// Statistics of a measured window.
#[derive(Debug, Clone, Default)]
pub struct Window {
    pub elapsed: Time,
    /// Work of the workload's tasks (what `time` reports as user and system time).
    pub tasks: Stats,
    /// Work done on idle CPUs (IPI handlers), charged to the idle task.
    pub idle: Stats,
    /// The tasks' system time by the operation it was spent in (Op::label, and
    /// "context-switch"); what no operation of the CPU's own accounts for (timer ticks,
    /// handlers of other CPUs' requests) is "interrupts".
    pub kernel_by_op: BTreeMap<&'static str, Time>,
}

impl Window {
    /// Adds another window's time and work to this one (pooling independent samples).
    pub fn merge(&mut self, other: &Window) {
        self.elapsed += other.elapsed;
        self.tasks.merge(&other.tasks);
        self.idle.merge(&other.idle);
        for (&op, &t) in &other.kernel_by_op {
            *self.kernel_by_op.entry(op).or_insert(Time::ZERO) += t;
        }
    }
}

pub struct Runner {
    pub k: Kernel,
    programs: Vec<Option<Box<dyn Program>>>,
    queue: EventQueue<CpuId>,
    alive_children: Vec<u32>,
    exited_children: Vec<u32>,
    waiting: Vec<bool>,
    /// Threads (clone(CLONE_THREAD)): not waited for by the parent.
    is_thread: Vec<bool>,
    rng: Pcg32,
    pub ops: u64,
    /// System time by operation since the measurement began.
    kernel_by_op: BTreeMap<&'static str, Time>,
}

impl Runner {
    /// A runner whose first task (on CPU 0) runs `init`.
    pub fn new(mut k: Kernel, init: Box<dyn Program>, seed: u64) -> Runner {
        let task = k.spawn(init.name(), None);
        k.tasks[task].last_cpu = Some(0);
        let mut r = Runner {
            k,
            programs: vec![],
            queue: EventQueue::default(),
            alive_children: vec![],
            exited_children: vec![],
            waiting: vec![],
            is_thread: vec![],
            rng: Pcg32::new(seed, 0x7275),
            ops: 0,
            kernel_by_op: BTreeMap::new(),
        };
        r.adopt(task, init);
        if let Some(cpu) = r.k.wake_up(task, Time::ZERO) {
            r.queue.push(r.k.cpus[cpu].now, cpu);
        }
        r
    }

    /// A child `parent` just created on `cpu`, running `program` from now.
    fn start_child(
        &mut self,
        cpu: CpuId,
        parent: TaskId,
        child: TaskId,
        program: Box<dyn Program>,
    ) {
        let now = self.k.cpus[cpu].now;
        self.adopt(child, program);
        self.alive_children[parent] += 1;
        self.wake(child, now);
    }

    fn adopt(&mut self, task: TaskId, program: Box<dyn Program>) {
        let n = task + 1;
        if self.programs.len() < n {
            self.programs.resize_with(n, || None);
            self.alive_children.resize(n, 0);
            self.exited_children.resize(n, 0);
            self.waiting.resize(n, false);
            self.is_thread.resize(n, false);
        }
        self.programs[task] = Some(program);
        // A reaped task's slot (kernel/memory/reap.rs) starts afresh.
        self.alive_children[task] = 0;
        self.exited_children[task] = 0;
        self.waiting[task] = false;
        self.is_thread[task] = false;
    }

    fn totals(&self) -> (Stats, Stats) {
        let mut tasks = Stats::default();
        let mut idle = Stats::default();
        for c in &self.k.cpus {
            tasks.merge(&c.stats);
            idle.merge(&c.idle_stats);
        }
        (tasks, idle)
    }

    /// True once no CPU has anything left to do (every task has exited or waits forever).
    pub fn finished(&self) -> bool {
        self.queue.is_empty()
    }

    /// Runs until simulated time `warmup`, then measures until `warmup + window` (or until
    /// every task has exited).
    pub fn run(&mut self, warmup: Time, window: Time) -> Result<Window> {
        self.run_until(warmup)?;
        let (t0, i0) = self.totals();
        self.kernel_by_op.clear();
        let start = warmup;
        self.run_until(warmup + window)?;
        let (mut tasks, mut idle) = self.totals();
        tasks.subtract(&t0);
        idle.subtract(&i0);
        let mut kernel_by_op = std::mem::take(&mut self.kernel_by_op);
        let seen = kernel_by_op.values().fold(Time::ZERO, |a, &t| a + t);
        *kernel_by_op.entry("interrupts").or_insert(Time::ZERO) += tasks.system_time() - seen;
        let end = self
            .k
            .cpus
            .iter()
            .map(|c| c.now)
            .max()
            .unwrap_or(start)
            .min(warmup + window);
        Ok(Window {
            elapsed: end - start,
            tasks,
            idle,
            kernel_by_op,
        })
    }

    fn run_until(&mut self, end: Time) -> Result<()> {
        while let Some((at, cpu)) = self.queue.pop() {
            if at > end {
                self.queue.push(at, cpu);
                break;
            }
            if at > self.k.global_now {
                self.k.global_now = at;
                for c in self.k.cpus.iter_mut().map(|c| &mut c.irq_calendar) {
                    c.prune(at);
                }
                self.k.forget_modes_before(at);
            }
            self.step(cpu)?;
        }
        Ok(())
    }

    /// Runs one operation on `cpu` and schedules the CPU's next turn.
    fn step(&mut self, cpu: CpuId) -> Result<()> {
        let task = match self.k.cpus[cpu]
            .current
            .filter(|&t| self.k.tasks[t].state == TaskState::Running(cpu))
        {
            Some(t) => t,
            None => match self.switch(cpu) {
                Some(t) => t,
                None => return Ok(()), // idle until a wake-up
            },
        };
        let op = self.programs[task]
            .as_mut()
            .expect("running task has a program")
            .next(&mut self.rng);
        self.ops += 1;
        let label = op.label();
        let keep_running = self.timed(cpu, label, |r| r.execute(cpu, task, op))?;
        if keep_running {
            for idle in self.k.scheduler_tick(cpu) {
                self.queue.push(self.k.cpus[idle].now, idle);
            }
        }
        if !keep_running || self.k.should_preempt(cpu) {
            if keep_running {
                self.k.preempt(cpu);
            }
            if self
                .timed(cpu, "context-switch", |r| Ok(r.switch(cpu)))?
                .is_none()
            {
                return Ok(());
            }
        }
        self.queue.push(self.k.cpus[cpu].now, cpu);
        Ok(())
    }

    /// Runs `f`, adding the system time it took on `cpu` to operation `label`.
    fn timed<T>(
        &mut self,
        cpu: CpuId,
        label: &'static str,
        f: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<T> {
        let before = self.k.cpus[cpu].stats.system_time();
        let r = f(self)?;
        let spent = self.k.cpus[cpu].stats.system_time() - before;
        if spent > Time::ZERO {
            *self.kernel_by_op.entry(label).or_insert(Time::ZERO) += spent;
        }
        Ok(r)
    }

    /// Picks the next task for `cpu` and returns it to user mode; `None` leaves it idle.
    fn switch(&mut self, cpu: CpuId) -> Option<TaskId> {
        let prev = self.k.cpus[cpu].current;
        let next = self.k.schedule(cpu)?;
        if prev != Some(next) || !self.k.cpus[cpu].user_mode {
            self.k.enter_user(cpu);
        }
        Some(next)
    }

    fn wake(&mut self, task: TaskId, at: Time) {
        if let Some(cpu) = self.k.wake_up(task, at) {
            self.queue.push(self.k.cpus[cpu].now, cpu);
        }
    }

    /// Executes one operation; false when the task blocked or exited.
    fn execute(&mut self, cpu: CpuId, task: TaskId, op: Op) -> Result<bool> {
        let k = &mut self.k;
        match op {
            Op::User {
                cycles,
                touches,
                l1_lines,
            } => {
                let mm = k.tasks[task].mm;
                let heap = k.mms[mm].heap;
                let resident = k.mms[mm].heap_pages;
                let mut list = vec![
                    (VirtAddr(USER_TEXT + 0x40), Access::Exec),
                    (VirtAddr(USER_STACK_TOP - 0x80), Access::Write),
                ];
                if resident > 0 {
                    for i in 0..touches {
                        let page = self.rng.below(resident.min(u32::MAX as u64) as u32) as u64;
                        let access = if i % 3 == 0 {
                            Access::Write
                        } else {
                            Access::Read
                        };
                        list.push((heap.offset(page * 4096 + 64 * (i as u64 % 64)), access));
                    }
                }
                k.user_work(cpu, cycles, &list)?;
                k.displace_l1_by_user(cpu, l1_lines);
            }
            Op::AnonFaults(n) => {
                for _ in 0..n {
                    k.anon_fault(cpu)?;
                }
            }
            Op::FileFaults(n) => {
                for _ in 0..n {
                    k.file_fault(cpu)?;
                }
            }
            Op::ZeroPageFaults(n) => {
                for _ in 0..n {
                    k.zero_page_fault(cpu)?;
                }
            }
            Op::History(op) => {
                let was = std::mem::replace(&mut k.fast_forward, true);
                let r = self.execute(cpu, task, *op);
                self.k.fast_forward = was;
                return r;
            }
            Op::WithKernelWork { op, cycles } => {
                let r = self.execute(cpu, task, *op)?;
                self.k
                    .compute(cpu, cycles, crate::sim::TimeCategory::Kernel);
                return Ok(r);
            }
            Op::CowFaults(n) => {
                for _ in 0..n {
                    k.cow_fault(cpu)?;
                }
            }
            Op::FileRead { fs, pages, misses } => {
                k.file_read(cpu, fs, pages, misses, VirtAddr(USER_DATA))?
            }
            Op::FileWrite {
                fs,
                pages,
                new_pages,
            } => k.file_write(cpu, fs, pages, new_pages, VirtAddr(USER_DATA))?,
            Op::Pread { file, page } => k.pread(cpu, file, page, VirtAddr(USER_DATA))?,
            Op::Syscall {
                spec,
                count,
                extra_cycles,
                effect,
            } => {
                let mut spec = spec;
                spec.work_cycles += extra_cycles;
                spec.effect = effect.unwrap_or(spec.effect);
                for _ in 0..count {
                    k.syscall(cpu, &spec)?;
                }
            }
            Op::Fork(program) => {
                let child = k.fork(cpu, task, program.name())?;
                self.start_child(cpu, task, child, program);
            }
            Op::Vfork(program) => {
                let child = k.vfork(cpu, task, program.name())?;
                self.start_child(cpu, task, child, program);
            }
            Op::SpawnThread(program) => {
                let name = program.name().to_string();
                let thread = k.spawn_thread(cpu, task, &name);
                let now = k.cpus[cpu].now;
                self.adopt(thread, program);
                self.is_thread[thread] = true;
                self.wake(thread, now);
            }
            Op::Exec => k.exec(cpu, task)?,
            Op::WaitChild => {
                if self.exited_children[task] > 0 {
                    self.exited_children[task] -= 1;
                } else if self.alive_children[task] > 0 {
                    k.tasks[task].state = TaskState::Blocked;
                    self.waiting[task] = true;
                    return Ok(false);
                }
            }
            Op::Exit => {
                k.exit(cpu, task)?;
                self.programs[task] = None;
                if self.is_thread[task] {
                    return Ok(false);
                }
                if let Some(p) = k.tasks[task].parent {
                    self.alive_children[p] -= 1;
                    if self.waiting[p] {
                        self.waiting[p] = false;
                        let now = self.k.cpus[cpu].now;
                        self.wake(p, now);
                    } else {
                        self.exited_children[p] += 1;
                    }
                }
                return Ok(false);
            }
        }
        Ok(true)
    }
}
