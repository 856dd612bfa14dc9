//! Trace replay: a recorded run's tasks, re-executed on any machine model.
//!
//! Pass 1 (split.rs) streams the trace once and splits it into one operation file per task.
//! Pass 2 (source.rs, drive.rs) runs those files through the simulator's engine loop: every
//! task becomes a program that reads its own file as the scheduler runs it, and the kernel
//! frees what exited tasks leave behind as the run goes (kernel/reap.rs). Memory and file
//! descriptors stay bounded by the live tasks, never by the trace's length.
//!
//! What a task did becomes: user computation (its on-CPU time outside syscalls, in cycles of
//! the recording host), system calls (their measured on-CPU kernel time), anonymous page
//! faults (user-anon allocations outside syscalls), fork (at the child's creation, in the
//! parent's stream), thread creation (a new task whose thread-group id is not its own tid:
//! it shares its creator's address space), exec, wait (wait4/waitid block until a child
//! exits) and exit. A syscall during which the task's CPU flushed part of its address space
//! (`tlb:tlb_flush`, local shootdown: munmap, mprotect, madvise) replays that flush through
//! the simulated machine's flush_tlb_mm_range, so a threaded program's shootdowns reach as
//! many CPUs as run its threads there. Flushes in page faults (COW of a threaded process's
//! page) are not replayed: the fault is not delimited in the trace. Page-fault kernel time
//! stays inside the user time around it (and the model adds its own fault path on top).

mod drive;
mod ops;
mod source;
mod split;

pub use drive::{drive, Outcome, Progress};
pub use source::{root_program, FileSource};
pub use split::split;

use std::collections::HashSet;
use std::path::PathBuf;

/// Totals of the recorded run, for comparing a replay against.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Recorded {
    pub tasks: u64,
    pub user_ns: u64,
    pub system_ns: u64,
    pub syscalls: u64,
    pub anon_faults: u64,
    pub forks: u64,
    pub threads: u64,
    /// Syscalls during which the task flushed part of its address space.
    pub flushing_syscalls: u64,
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
    use crate::format::{Event, GfpClass, Meta, Op as T, TraceWriter};
    use kharden::kernel::Kernel;
    use kharden::machine;
    use kharden::sim::Counter;
    use std::fs::File;
    use std::path::Path;
    use std::sync::Arc;

    /// Task 10 starts three more tasks that run on other CPUs for 2 ms, then munmaps 4 pages
    /// twenty times (the recording shows each flush); `threads` makes them its threads
    /// (thread-group id 10) rather than child processes.
    fn write_trace(path: &Path, threads: bool) {
        let f = std::io::BufWriter::new(File::create(path).unwrap());
        let mut w = TraceWriter::new(f, &Meta::default()).unwrap();
        w.set_syscall_name(11, "munmap");
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
        }
        let mut t = 1000;
        for _ in 0..20 {
            t += 50_000;
            put(t, 10, T::SysEnter { nr: 11 });
            put(
                t + 100,
                10,
                T::TlbFlush {
                    cpu: 0,
                    reason: 2,
                    pages: 4,
                },
            );
            put(t + 1000, 10, T::SysExit { nr: 11, ret: 0 });
        }
        for tid in 11..14 {
            put(2_000_000, tid, T::SwitchOut { state: 0x10 });
            put(2_000_000, tid, T::Exit);
        }
        put(2_100_000, 10, T::Exit);
        w.finish().unwrap();
    }

    fn replay(threads: bool) -> (Recorded, kharden::sim::Stats) {
        let dir = std::env::temp_dir().join(format!(
            "kharden-replay-unit-{}-{threads}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let trace = dir.join("t.trace");
        write_trace(&trace, threads);
        std::fs::create_dir_all(dir.join("ops")).unwrap();
        let split = split(&trace, &dir.join("ops")).unwrap();
        let program = root_program(&split, 3.0, 1);
        let k = Kernel::boot(machine::load("ivybridge-i5-3550").unwrap(), vec![]);
        let out = drive(k, program, |_| Ok(())).unwrap();
        let (r, w) = (out.runner, out.window);
        assert!(
            r.k.tasks
                .iter()
                .all(|t| t.state == kharden::kernel::sched::TaskState::Dead),
            "every task ran to its end"
        );
        let mms: std::collections::HashSet<_> = r.k.tasks.iter().map(|t| t.mm).collect();
        assert_eq!(
            mms.len(),
            if threads { 1 } else { 4 },
            "threads share the leader's mm"
        );
        std::fs::remove_dir_all(&dir).ok();
        (split.recorded, w.tasks)
    }

    #[test]
    fn threads_share_the_mm_and_their_flushes_reach_the_other_cpus() {
        let (rec, threaded) = replay(true);
        assert_eq!((rec.threads, rec.forks, rec.flushing_syscalls), (3, 0, 20));
        // Each munmap flushes CPU 0 and interrupts the three CPUs running the other threads.
        assert_eq!(threaded.counter(Counter::NrTlbRemoteFlush), 20);
        assert_eq!(threaded.counter(Counter::IpisSent), 60);
        let (rec, processes) = replay(false);
        assert_eq!((rec.threads, rec.forks), (0, 3));
        assert_eq!(
            processes.counter(Counter::IpisSent),
            0,
            "separate processes: nobody else runs the mm"
        );
    }

    /// `n` short tasks one after another, each forked by the root, faulting in 64 pages and
    /// exiting; tids are reused (a tid comes back after its task exited).
    fn write_sequential(path: &Path, n: u32) {
        let f = std::io::BufWriter::new(File::create(path).unwrap());
        let mut w = TraceWriter::new(f, &Meta::default()).unwrap();
        let comm: Arc<str> = Arc::from("sh");
        let mut put = |time_ns, tid, op| w.write(&Event { time_ns, tid, op }).unwrap();
        put(
            0,
            1,
            T::TaskNew {
                pid: 1,
                parent: None,
                comm: comm.clone(),
            },
        );
        put(0, 1, T::SwitchIn { cpu: 0 });
        let mut t = 0;
        for i in 0..n {
            let tid = 100 + i % 7;
            t += 100_000;
            put(
                t,
                tid,
                T::TaskNew {
                    pid: tid,
                    parent: Some(1),
                    comm: comm.clone(),
                },
            );
            put(t, tid, T::SwitchIn { cpu: 1 });
            put(
                t + 10_000,
                tid,
                T::PageAlloc {
                    pfn: 5,
                    order: 6,
                    gfp: 0,
                    class: GfpClass::UserAnon,
                },
            );
            put(t + 50_000, tid, T::SwitchOut { state: 0x10 });
            put(t + 50_000, tid, T::Exit);
        }
        put(t + 200_000, 1, T::Exit);
        w.finish().unwrap();
    }

    fn replay_sequential(n: u32) -> (usize, usize, u64) {
        let dir = tempfile::tempdir().unwrap();
        let trace = dir.path().join("t.trace");
        write_sequential(&trace, n);
        let ops = dir.path().join("ops");
        std::fs::create_dir(&ops).unwrap();
        let split = split(&trace, &ops).unwrap();
        assert_eq!(
            split.recorded.tasks,
            n as u64 + 1,
            "a reused tid is a new task"
        );
        let k = Kernel::boot(machine::load("ivybridge-i5-3550").unwrap(), vec![]);
        let out = drive(k, root_program(&split, 3.0, 1), |_| Ok(())).unwrap();
        let faults = out.window.tasks.counter(Counter::PageFaults);
        (out.runner.k.mem.table_pages(), out.peak_live, faults)
    }

    /// Issue 18: replay memory grew ~37 KB per dead task (tasks, mms and page tables never
    /// freed). Now only the kernel's vmalloc page tables grow: task ids are not reused, so
    /// kernel stacks (32 KiB apart) reach one new page-table page per 64 tasks, which Linux
    /// does not free either; every address space's tables are freed.
    #[test]
    fn dead_tasks_are_freed_and_tables_stay_flat() {
        let (tables_small, live_small, faults) = replay_sequential(100);
        assert_eq!(faults, 100 * 64, "every order-6 allocation faults 64 pages");
        let (tables_big, live_big, _) = replay_sequential(1000);
        assert!(live_small <= 3 && live_big <= 3, "{live_small} {live_big}");
        // Measured: 144, 164, 182 and 210 tables after 100, 1000, 2000 and 4000 tasks (each
        // task's address space alone is about eight tables).
        let vmalloc_tables = (1000 - 100) / 64 + 8;
        assert!(
            tables_big <= tables_small + vmalloc_tables,
            "page tables grow with dead tasks: {tables_small} -> {tables_big}"
        );
    }
}
