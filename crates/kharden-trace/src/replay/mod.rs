//! Trace replay: a recorded run's tasks, re-executed on any machine model.
//!
//! Pass 1 (split.rs) streams the trace once and splits it into one operation file per task.
//! Pass 2 (source.rs, drive.rs) runs those files through the simulator's engine loop: every
//! task becomes a program that reads its own file as the scheduler runs it, and the kernel
//! frees what exited tasks leave behind as the run goes (kernel/memory/reap.rs). Memory and file
//! descriptors stay bounded by the live tasks, never by the trace's length.
//!
//! What a task did becomes: user computation (its on-CPU time outside syscalls and faults,
//! the recorder's own cost taken out, in cycles of the recording host), system calls (each
//! the recorded path of the variant its descriptor, size and result say it was:
//! variant.rs; a call no variant describes keeps its recorded kernel time), page faults by
//! kind (a fault event and the allocations after it: anonymous, copy-on-write, file),
//! fork (at the child's creation, in the parent's stream), thread creation (a new task
//! whose thread-group id is not its own tid: it shares its creator's address space), exec,
//! wait (wait4/waitid block until a child exits) and exit. A syscall during which the
//! task's CPU flushed part of its address space (`tlb:tlb_flush`, local shootdown: munmap,
//! mprotect, madvise) replays that flush through the simulated machine's
//! flush_tlb_mm_range, so a threaded program's shootdowns reach as many CPUs as run its
//! threads there. Flushes in page faults (COW of a threaded process's page) are not
//! replayed: the fault is not delimited in the trace. docs/design/replay.md has the
//! design and its validation.

#[cfg(test)]
mod correction_tests;
mod drive;
#[cfg(test)]
mod flat_tests;
mod ops;
mod source;
mod split;
pub mod variant;

pub use drive::{drive, Outcome, Progress};
pub use source::{root_program, FileSource};
pub use split::split;

use crate::format::{TracerCost, Untraced};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

/// The recorded calls of one kind of the model's operations (Op::label): how many, and
/// their kernel time (tracer removed) with the entry and exit code the model also counts.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct CallTotals {
    pub calls: u64,
    pub recorded_ns: f64,
}

/// Totals of the recorded run, for comparing a replay against.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Recorded {
    pub tasks: u64,
    pub syscalls: u64,
    pub anon_faults: u64,
    pub cow_faults: u64,
    pub file_faults: u64,
    /// New processes, and how many of them were started with vfork or posix_spawn (clone3).
    pub forks: u64,
    pub vforks: u64,
    pub threads: u64,
    /// Syscalls during which the task flushed part of its address space.
    pub flushing_syscalls: u64,
    /// User and kernel (syscall) on-CPU time as the trace's intervals give them.
    pub traced_user_ns: f64,
    pub traced_system_ns: f64,
    /// The user time with the recorder's cost and the faults' kernel time taken out, and
    /// the syscalls' kernel time with the recorder's cost taken out (without their entry and
    /// exit code, which the trace counts as user time around them).
    pub user_ns: f64,
    pub system_ns: f64,
    /// The faults' kernel time taken out of the user time (their native latencies).
    pub fault_ns: f64,
    /// The costs (the recorder's, the faults' kernel time) the user intervals hold by the
    /// recorder's measurement per event and the faults' native latencies, and the factor
    /// that scales them to the user time `user_total` names (1 for the events alone).
    pub user_due_ns: f64,
    pub user_scale: f64,
    /// What the user side was scaled to.
    pub user_total: UserTotal,
    /// The sampled user time and its error (ns), when the recording sampled.
    pub sampled_user_ns: Option<(f64, f64)>,
    /// The recorder's kernel-side cost that found no interval long enough to come out of.
    pub unpaid_kernel_ns: f64,
    /// Syscall exits whose enter the trace does not have (a child's first return).
    pub exits_without_enter: u64,
    /// The untraced entry and exit code of one syscall (the trace's calibration).
    pub entry_exit_ns: f64,
    pub tracer: Option<TracerCost>,
    pub untraced: Option<Untraced>,
    /// The calls by the model's operation they become.
    pub by_label: BTreeMap<&'static str, CallTotals>,
}

/// What a replay's user time is scaled to (Recorded::scale_user_costs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub enum UserTotal {
    /// The recorder's per-event costs as its loop measured them, taken out as they are.
    #[default]
    Events,
    /// The traced run's user-mode cpu-clock samples.
    Samples,
    /// The command's untraced runs: their median CPU time split by a sampled run's user
    /// share (Untraced::user_ns).
    UntracedRuns,
}

impl Recorded {
    /// The user intervals' costs are scaled so that what stays is what an untraced run
    /// spends in user mode: the command's untraced runs' (`record --untraced-runs N`,
    /// Untraced::user_ns) when the recording made them, else the user time the recording's
    /// cpu-clock samples measured. The recorder's work is all in the kernel, so the samples know the
    /// traced run's user total, which the per-event costs measured on a loop do not to the
    /// precision a syscall-dense command needs (dd: 75 ns of user work per call against
    /// about 900 of the recorder's); but the traced run's own user work is slower than the
    /// untraced run's (the tracepoints' pollution after every event), which only the
    /// untraced runs know. Either way the factor falls on the costs, the time after events.
    fn scale_user_costs(
        &mut self,
        samples: Option<crate::format::CpuSamples>,
        untraced: Option<&crate::format::Untraced>,
    ) {
        self.user_scale = 1.0;
        self.sampled_user_ns = samples.filter(|s| s.user > 0).map(|s| s.user_ns());
        let target = match (untraced.and_then(|u| u.user_ns()), self.sampled_user_ns) {
            (Some(user), _) => Some((user, UserTotal::UntracedRuns)),
            (None, Some((user, _))) => Some((user, UserTotal::Samples)),
            (None, None) => None,
        };
        if let Some((user, how)) = target {
            self.user_total = how;
            if self.user_due_ns > 0.0 {
                self.user_scale = ((self.traced_user_ns - user) / self.user_due_ns).max(0.0);
            }
        }
        self.user_ns = (self.traced_user_ns - self.user_scale * self.user_due_ns).max(0.0);
    }

    fn add_call(&mut self, label: &'static str, ns: f64, entry_exit: f64) {
        let t = self.by_label.entry(label).or_default();
        t.calls += 1;
        t.recorded_ns += ns + entry_exit;
    }

    /// What the recording says an untraced run spends in user and system mode: its user
    /// time, and its syscalls' kernel time with their entry and exit code and its faults'.
    pub fn untraced_estimate(&self) -> (f64, f64) {
        (
            self.user_ns,
            self.system_ns + self.syscalls as f64 * self.entry_exit_ns + self.fault_ns,
        )
    }
}

/// The split trace: one op file per task (numbered in order of appearance), the root task's
/// number and the numbers of the tasks that are make.
pub struct Split {
    pub dir: PathBuf,
    pub root: u32,
    pub makes: HashSet<u32>,
    pub recorded: Recorded,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Event, Meta, Op as T, TraceWriter};
    use kharden::kernel::Kernel;
    use kharden::machine;
    use kharden::sim::Counter;
    use std::fs::File;
    use std::path::Path;
    use std::sync::Arc;

    /// How task 10 starts the other three: as its threads (thread-group id 10), or as child
    /// processes from inside clone or vfork.
    #[derive(Clone, Copy, PartialEq, Debug)]
    enum Start {
        Threads,
        Clone,
        Vfork,
    }

    /// Task 10 starts three more tasks that run on other CPUs for 2 ms, then munmaps 4 pages
    /// twenty times (the recording shows each flush).
    fn write_trace(path: &Path, start: Start) {
        let threads = start == Start::Threads;
        let f = std::io::BufWriter::new(File::create(path).unwrap());
        let mut w = TraceWriter::new(f, &Meta::default()).unwrap();
        w.set_syscall_name(11, "munmap");
        w.set_syscall_name(56, "clone");
        w.set_syscall_name(58, "vfork");
        let comm: Arc<str> = Arc::from("app");
        let mut put = |time_ns, tid, op| w.write(&Event { time_ns, tid, op }).unwrap();
        put(
            0,
            10,
            T::TaskNew {
                pid: 10,
                parent: None,
                comm: comm.clone(),
            },
        );
        put(0, 10, T::SwitchIn { cpu: 0 });
        for (i, tid) in (11..14).enumerate() {
            let pid = if threads { 10 } else { tid };
            let nr = if start == Start::Vfork { 58 } else { 56 };
            put(999, 10, T::sys_enter(nr));
            put(
                1000,
                tid,
                T::TaskNew {
                    pid,
                    parent: Some(10),
                    comm: comm.clone(),
                },
            );
            put(1000, tid, T::SwitchIn { cpu: i as u32 + 1 });
            put(1000, 10, T::sys_exit(nr, tid as i64));
        }
        let mut t = 1000;
        for _ in 0..20 {
            t += 50_000;
            put(t, 10, T::sys_enter(11));
            put(
                t + 100,
                10,
                T::TlbFlush {
                    cpu: 0,
                    reason: 2,
                    pages: 4,
                },
            );
            put(t + 1000, 10, T::sys_exit(11, 0));
        }
        for tid in 11..14 {
            put(2_000_000, tid, T::SwitchOut { state: 0x10 });
            put(2_000_000, tid, T::Exit);
        }
        put(2_100_000, 10, T::Exit);
        w.finish().unwrap();
    }

    fn replay(start: Start) -> (Recorded, kharden::sim::Stats) {
        let threads = start == Start::Threads;
        let dir = std::env::temp_dir().join(format!(
            "kharden-replay-unit-{}-{start:?}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let trace = dir.join("t.trace");
        write_trace(&trace, start);
        std::fs::create_dir_all(dir.join("ops")).unwrap();
        let k = Kernel::boot(machine::load("ivybridge-i5-3550").unwrap(), vec![]);
        let split = split(&trace, &dir.join("ops"), &k.paths).unwrap();
        let program = root_program(&split, k.paths.clone(), 3.0, 1);
        let out = drive(k, program, |_| Ok(())).unwrap();
        let (r, w) = (out.runner, out.window);
        assert!(
            r.k.tasks
                .iter()
                .all(|t| t.state == kharden::kernel::sched::scheduler::TaskState::Dead),
            "every task ran to its end"
        );
        let mms: std::collections::HashSet<_> = r.k.tasks.iter().map(|t| t.mm).collect();
        assert_eq!(
            mms.len(),
            if threads { 1 } else { 4 },
            "threads share the leader's mm"
        );
        std::fs::remove_dir_all(&dir).ok();
        (split.recorded.clone(), w.tasks)
    }

    #[test]
    fn threads_share_the_mm_and_their_flushes_reach_the_other_cpus() {
        let (rec, threaded) = replay(Start::Threads);
        assert_eq!((rec.threads, rec.forks, rec.flushing_syscalls), (3, 0, 20));
        // Each munmap flushes CPU 0 and interrupts the three CPUs running the other threads.
        assert_eq!(threaded.counter(Counter::NrTlbRemoteFlush), 20);
        assert_eq!(threaded.counter(Counter::IpisSent), 60);
        let (rec, processes) = replay(Start::Clone);
        assert_eq!((rec.threads, rec.forks, rec.vforks), (0, 3, 0));
        assert_eq!(
            processes.counter(Counter::IpisSent),
            0,
            "separate processes: nobody else runs the mm"
        );
    }

    /// A child started from inside vfork is replayed as one: no copy of the parent's address
    /// space, so none of the parent's TLB flushes that each fork's dup_mmap ends with.
    #[test]
    fn children_started_by_vfork_are_replayed_as_vforks() {
        let (rec, vforked) = replay(Start::Vfork);
        assert_eq!((rec.forks, rec.vforks), (3, 3));
        let (_, forked) = replay(Start::Clone);
        let full = |s: &kharden::sim::Stats| s.counter(Counter::NrTlbLocalFlushAll);
        assert_eq!(full(&forked), full(&vforked) + 3, "one flush per fork");
    }
}
