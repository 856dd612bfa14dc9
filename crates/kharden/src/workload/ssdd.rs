//! rt-tests' `ssdd` on the kernel model (run it in a VM with `Kernel::run_in_vm` to get the
//! seed's setting): tracer/tracee pairs on one CPU; each step is the tracer's
//! ptrace(PTRACE_SINGLESTEP) and waitpid, a switch to the tracee, its one instruction and
//! the #DB trap, ptrace_stop waking the tracer, a switch back, and the tracer's SIGCHLD
//! handler with its rt_sigreturn. The pairs exist side by side (their tasks, stacks and page
//! tables); the steps measured are one pair's, back to back, so a step switches twice, as
//! the path model's does (virt/guest.rs). Every switch runs the kernel's context switch (and a KERNEXEC plug-in's
//! CR0.WP toggles there); the paths' code and data are their measured footprints.
//!
//! The two ptrace paths run without their measured work: the recording host is itself a
//! KVM guest whose every #DB exits to its hypervisor, so their latency (33 us a step) is
//! mostly that host's virtualization. The guest's instructions per step are instead the
//! run's `guest_work_cycles` (what `reproduce kvm-cr0wp` fits, as for the path model).

use crate::error::{Error, Result};
use crate::kernel::paths::path_work::Work;
use crate::kernel::sched::scheduler::TaskState;
use crate::kernel::{CpuId, Kernel, TaskId};
use crate::sim::{Stats, Time, TimeCategory};

/// The one CPU (vCPU) every pair runs on.
const CPU: CpuId = 0;

pub struct Ssdd {
    pairs: Vec<(TaskId, TaskId)>,
    /// Guest cycles per step not in a modelled path (fitted by the reproduction).
    pub guest_work_cycles: f64,
}

/// What a measured stretch of steps took.
pub struct SsddRun {
    pub steps: u64,
    pub elapsed: Time,
    pub stats: Stats,
}

impl Ssdd {
    /// `pairs` tracers, each with its tracee forked and stopped, on a one-CPU kernel.
    pub fn start(k: &mut Kernel, pairs: u64) -> Result<Ssdd> {
        if k.cpus.len() != 1 {
            return Err(Error::new(format!(
                "ssdd on the kernel model runs on one vCPU; {} has {}",
                k.machine.name,
                k.cpus.len()
            )));
        }
        if pairs == 0 {
            return Err(Error::new("ssdd: pairs must be positive"));
        }
        let shell = k.spawn_on(CPU, "sh", None);
        let mut all = vec![];
        for _ in 0..pairs {
            let tracer = k.spawn_on(CPU, "ssdd", Some(shell));
            k.switch_to(CPU, tracer);
            k.enter_user(CPU);
            let tracee = k.fork(CPU, tracer, "ssdd-tracee")?;
            k.tasks[tracee].state = TaskState::Blocked; // stopped by PTRACE_ATTACH
            all.push((tracer, tracee));
        }
        Ok(Ssdd {
            pairs: all,
            guest_work_cycles: 0.0,
        })
    }

    /// Runs `steps` steps of the last pair started (its tracer is on the CPU) and returns
    /// what they took.
    pub fn run(&mut self, k: &mut Kernel, steps: u64) -> Result<SsddRun> {
        let before = k.cpus[CPU].stats.clone();
        let t0 = k.cpus[CPU].now;
        let pair = *self.pairs.last().expect("pairs are positive");
        for _ in 0..steps {
            self.step(k, pair)?;
        }
        let mut stats = k.cpus[CPU].stats.clone();
        stats.subtract(&before);
        Ok(SsddRun {
            steps,
            elapsed: k.cpus[CPU].now - t0,
            stats,
        })
    }

    fn step(&self, k: &mut Kernel, (tracer, tracee): (TaskId, TaskId)) -> Result<()> {
        let half_syscall = k.machine.costs.syscall_roundtrip_cycles as f64 / 2.0;
        let half_trap = k.machine.costs.interrupt_entry_cycles as f64 / 2.0;
        debug_assert_eq!(k.cpus[CPU].current, Some(tracer));
        k.compute(CPU, self.guest_work_cycles, TimeCategory::Kernel);
        // The tracer: ptrace(PTRACE_SINGLESTEP) resumes the tracee; waitpid blocks.
        k.compute(CPU, half_syscall, TimeCategory::SyscallInsn);
        k.leave_user_mode(CPU);
        hand_over(k, "ptrace-singlestep", tracer, tracee)?;
        // The tracee returns to user mode with TF set, runs one instruction and traps.
        k.compute(CPU, half_trap, TimeCategory::InterruptEntry);
        k.enter_user(CPU);
        k.user_work(CPU, 1.0, &[])?;
        if let Some(vm) = k.vm.as_mut() {
            let c = vm.debug_trap();
            k.compute(CPU, c, TimeCategory::VmExit);
        }
        k.compute(CPU, half_trap, TimeCategory::InterruptEntry);
        k.leave_user_mode(CPU);
        // exc_debug -> ptrace_stop: SIGCHLD to the tracer, which wakes; the tracee stops.
        hand_over(k, "ptrace-stop", tracee, tracer)?;
        // The tracer returns from waitpid through its SIGCHLD handler.
        k.run_known_path(CPU, "signal-deliver", Work::Measured)?;
        k.compute(CPU, half_syscall, TimeCategory::SyscallInsn);
        k.enter_user(CPU);
        let sigreturn = crate::kernel::paths::syscall::lookup(&k.paths, "rt_sigreturn")
            .ok_or_else(|| Error::new("rt_sigreturn is not in the syscall table"))?;
        k.syscall(CPU, &sigreturn)
    }
}

/// `from` runs ptrace path `path` (its code and data; its work is the step's fitted guest
/// work), wakes `to` and blocks; the scheduler switches to `to`.
fn hand_over(k: &mut Kernel, path: &str, from: TaskId, to: TaskId) -> Result<()> {
    k.run_known_path(CPU, path, Work::Cycles(0.0))?;
    let now = k.cpus[CPU].now;
    k.wake_up(to, now);
    k.tasks[from].state = TaskState::Blocked;
    k.schedule(CPU);
    Ok(())
}
