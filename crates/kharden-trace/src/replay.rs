//! Trace replay: a recorded run's tasks, re-executed on any machine model.
//!
//! Pass 1 streams the trace once and splits it into one operation file per task (memory
//! holds only the live tasks' state and an open writer each). Pass 2 runs those files through
//! the simulator's engine loop: every task becomes a program that reads its own file as the
//! scheduler runs it, so replay memory stays bounded by live tasks, never by trace length.
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

use crate::format::{self, GfpClass, Op as TraceOp};
use kharden::kernel::syscall::{self, Effect};
use kharden::sim::Pcg32;
use kharden::workload::program::{Op, Program};
use kharden::{Error, Result};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

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

/// The split trace: one op file per task, and the root task.
pub struct Split {
    pub dir: PathBuf,
    pub root: u32,
    pub recorded: Recorded,
}

#[derive(Default)]
struct TaskState {
    on_cpu_since: Option<u64>,
    in_syscall: Option<u32>,
    /// On-CPU ns accumulated in the current mode since the last emitted op.
    acc_ns: u64,
    /// Pages this task flushed from its address space during the current syscall.
    flushed_pages: u64,
    writer: Option<BufWriter<File>>,
}

// Op file records: a tag byte and little-endian fields.
const USER: u8 = 1; // f64 ns
const SYSCALL: u8 = 2; // f64 ns
const FAULT: u8 = 3;
const FORK: u8 = 4; // u32 child tid, u8 child is make
const EXEC: u8 = 5;
const WAIT: u8 = 6;
const EXIT: u8 = 7;
const THREAD: u8 = 8; // u32 thread tid
const FLUSH: u8 = 9; // follows a SYSCALL: u64 pages flushed during it

fn file_of(dir: &Path, tid: u32) -> PathBuf {
    dir.join(format!("{tid}.ops"))
}

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::at(path.display(), format!("replay scratch file: {e}"))
}

impl TaskState {
    fn write(&mut self, bytes: &[u8], path: &Path) -> Result<()> {
        match &mut self.writer {
            Some(w) => w.write_all(bytes).map_err(|e| io(path, e)),
            None => Ok(()),
        }
    }

    /// Emits the time accumulated in user mode as one User op.
    fn flush_user(&mut self, path: &Path) -> Result<()> {
        if self.in_syscall.is_none() && self.acc_ns > 0 {
            let ns = std::mem::take(&mut self.acc_ns) as f64;
            let mut b = vec![USER];
            b.extend_from_slice(&ns.to_le_bytes());
            self.write(&b, path)?;
        }
        Ok(())
    }

    fn account(&mut self, now: u64) {
        if let Some(since) = self.on_cpu_since {
            self.acc_ns += now.saturating_sub(since);
            self.on_cpu_since = Some(now);
        }
    }
}

/// Pass 1: split `trace` into per-task op files under `dir`.
pub fn split(trace: &Path, dir: &Path) -> Result<Split> {
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let mut reader = format::open(trace)?;
    let mut tasks: HashMap<u32, TaskState> = HashMap::new();
    let mut comms: HashMap<u32, bool> = HashMap::new();
    let mut root = None;
    let mut rec = Recorded::default();
    while let Some(ev) = reader.next() {
        let ev = ev?;
        let (t, tid) = (ev.time_ns, ev.tid);
        let path = file_of(dir, tid);
        match &ev.op {
            TraceOp::TaskNew { pid, parent, comm } => {
                let f = File::create(&path).map_err(|e| io(&path, e))?;
                tasks.insert(
                    tid,
                    TaskState {
                        writer: Some(BufWriter::new(f)),
                        ..Default::default()
                    },
                );
                // A child starts under its parent's name; what it execs decides (see Exec).
                comms.insert(tid, &**comm == "make");
                rec.tasks += 1;
                match parent.and_then(|p| tasks.get_mut(&p).map(|s| (p, s))) {
                    Some((p, ps)) => {
                        let ppath = file_of(dir, p);
                        ps.account(t);
                        ps.flush_user(&ppath)?;
                        let b = if *pid != tid {
                            rec.threads += 1;
                            let mut b = vec![THREAD];
                            b.extend_from_slice(&tid.to_le_bytes());
                            b
                        } else {
                            rec.forks += 1;
                            let mut b = vec![FORK];
                            b.extend_from_slice(&tid.to_le_bytes());
                            b.push(0);
                            b
                        };
                        ps.write(&b, &ppath)?;
                    }
                    None => root = root.or(Some(tid)),
                }
                continue;
            }
            TraceOp::Lost { .. } => continue,
            _ => {}
        }
        let Some(st) = tasks.get_mut(&tid) else {
            continue;
        };
        match &ev.op {
            TraceOp::SwitchIn { .. } => st.on_cpu_since = Some(t),
            TraceOp::SwitchOut { .. } => {
                st.account(t);
                st.on_cpu_since = None;
            }
            TraceOp::SysEnter { nr } => {
                st.account(t);
                st.flush_user(&path)?;
                st.acc_ns = 0;
                st.in_syscall = Some(*nr);
            }
            TraceOp::SysExit { .. } => {
                st.account(t);
                let nr = st.in_syscall.take().unwrap_or(u32::MAX);
                let ns = std::mem::take(&mut st.acc_ns);
                rec.system_ns += ns;
                rec.syscalls += 1;
                let name = reader
                    .syscall_name(nr)
                    .map(|n| n.to_string())
                    .unwrap_or_default();
                let mut b = vec![SYSCALL];
                b.extend_from_slice(&(ns as f64).to_le_bytes());
                if name == "wait4" || name == "waitid" {
                    b.push(WAIT);
                }
                let flushed = std::mem::take(&mut st.flushed_pages);
                if flushed > 0 {
                    rec.flushing_syscalls += 1;
                    b.push(FLUSH);
                    b.extend_from_slice(&flushed.to_le_bytes());
                }
                st.write(&b, &path)?;
            }
            // The flushing CPU's own event (local shootdown, or the whole-mm variant) while
            // the task is in a syscall: it started a flush of its address space.
            TraceOp::TlbFlush {
                reason: 2 | 3,
                pages,
                ..
            } if st.in_syscall.is_some() => {
                st.flushed_pages = st.flushed_pages.saturating_add(*pages);
            }
            TraceOp::Exec { filename } => {
                st.account(t);
                st.write(&[EXEC], &path)?;
                comms.insert(tid, filename.rsplit('/').next() == Some("make"));
            }
            TraceOp::PageAlloc {
                class: GfpClass::UserAnon,
                order,
                ..
            } if st.in_syscall.is_none() => {
                st.account(t);
                st.flush_user(&path)?;
                rec.anon_faults += 1 << order;
                for _ in 0..(1u32 << order) {
                    st.write(&[FAULT], &path)?;
                }
            }
            TraceOp::Exit => {
                st.account(t);
                st.flush_user(&path)?;
                st.write(&[EXIT], &path)?;
                if let Some(mut w) = st.writer.take() {
                    w.flush().map_err(|e| io(&path, e))?;
                }
                tasks.remove(&tid);
            }
            _ => {}
        }
    }
    // Tasks still alive at the end of the trace exit there.
    for (tid, mut st) in tasks {
        let path = file_of(dir, tid);
        st.flush_user(&path)?;
        st.write(&[EXIT], &path)?;
        if let Some(mut w) = st.writer.take() {
            w.flush().map_err(|e| io(&path, e))?;
        }
    }
    // User time: everything on CPU that was not inside a syscall.
    let root = root.ok_or_else(|| Error::at(trace.display(), "the trace has no root task"))?;
    rec.user_ns = total_user_ns(dir)?;
    let make_children: Vec<u32> = comms.iter().filter(|(_, &m)| m).map(|(&t, _)| t).collect();
    std::fs::write(
        dir.join("make.tids"),
        make_children
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join("\n"),
    )
    .map_err(|e| io(dir, e))?;
    Ok(Split {
        dir: dir.to_path_buf(),
        root,
        recorded: rec,
    })
}

fn total_user_ns(dir: &Path) -> Result<u64> {
    let mut total = 0.0;
    for entry in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
        let path = entry.map_err(|e| io(dir, e))?.path();
        if path.extension().is_some_and(|e| e == "ops") {
            let mut src = FileSource::open(&path, 1.0, "")?;
            while let Some(rec) = src.read_record()? {
                if let Record::User(ns) = rec {
                    total += ns;
                }
            }
        }
    }
    Ok(total as u64)
}

enum Record {
    User(f64),
    /// On-CPU ns, whether it was a wait, pages it flushed from the address space.
    Syscall(f64, bool, u64),
    Fault,
    Fork(u32),
    Thread(u32),
    Exec,
    Exit,
}

/// Pass 2's program: one task's op file, read as the task runs.
pub struct FileSource {
    input: BufReader<File>,
    path: PathBuf,
    dir: PathBuf,
    /// Cycles per recorded nanosecond (the recording host's clock in GHz).
    host_ghz: f64,
    name: String,
    /// How many copies of each job a make task forks (--scale-jobs), and the make tids.
    scale: u32,
    makes: std::rc::Rc<std::collections::HashSet<u32>>,
    is_make: bool,
    pending: std::collections::VecDeque<Op>,
    failed: bool,
}

impl FileSource {
    fn open(path: &Path, host_ghz: f64, name: &str) -> Result<FileSource> {
        let f = File::open(path).map_err(|e| io(path, e))?;
        Ok(FileSource {
            input: BufReader::new(f),
            path: path.to_path_buf(),
            dir: path.parent().unwrap_or(Path::new(".")).to_path_buf(),
            host_ghz,
            name: name.into(),
            scale: 1,
            makes: Default::default(),
            is_make: false,
            pending: Default::default(),
            failed: false,
        })
    }

    fn read_record(&mut self) -> Result<Option<Record>> {
        let mut tag = [0u8; 1];
        match self.input.read(&mut tag) {
            Ok(0) => return Ok(None),
            Ok(_) => {}
            Err(e) => return Err(io(&self.path, e)),
        }
        let f64_of = |input: &mut BufReader<File>| -> std::io::Result<f64> {
            let mut b = [0u8; 8];
            input.read_exact(&mut b)?;
            Ok(f64::from_le_bytes(b))
        };
        let rec = match tag[0] {
            USER => Record::User(f64_of(&mut self.input).map_err(|e| io(&self.path, e))?),
            SYSCALL => {
                let ns = f64_of(&mut self.input).map_err(|e| io(&self.path, e))?;
                // Markers may follow: a wait, then the pages it flushed.
                let wait = self.take_marker(WAIT)?;
                let flushed = if self.take_marker(FLUSH)? {
                    let mut b = [0u8; 8];
                    self.input
                        .read_exact(&mut b)
                        .map_err(|e| io(&self.path, e))?;
                    u64::from_le_bytes(b)
                } else {
                    0
                };
                Record::Syscall(ns, wait, flushed)
            }
            FAULT => Record::Fault,
            FORK => {
                let mut b = [0u8; 5];
                self.input
                    .read_exact(&mut b)
                    .map_err(|e| io(&self.path, e))?;
                Record::Fork(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            THREAD => {
                let mut b = [0u8; 4];
                self.input
                    .read_exact(&mut b)
                    .map_err(|e| io(&self.path, e))?;
                Record::Thread(u32::from_le_bytes(b))
            }
            EXEC => Record::Exec,
            EXIT => Record::Exit,
            t => {
                return Err(Error::at(
                    self.path.display(),
                    format!("corrupt replay file: tag {t}"),
                ))
            }
        };
        Ok(Some(rec))
    }

    /// Consumes the next byte if it is the marker `tag`.
    fn take_marker(&mut self, tag: u8) -> Result<bool> {
        let buf = std::io::BufRead::fill_buf(&mut self.input).map_err(|e| io(&self.path, e))?;
        let found = buf.first() == Some(&tag);
        if found {
            std::io::BufRead::consume(&mut self.input, 1);
        }
        Ok(found)
    }

    fn child(&self, tid: u32) -> Result<FileSource> {
        let mut c = FileSource::open(
            &file_of(&self.dir, tid),
            self.host_ghz,
            &format!("task {tid}"),
        )?;
        c.scale = self.scale;
        c.makes = self.makes.clone();
        c.is_make = self.makes.contains(&tid);
        Ok(c)
    }

    fn next_op(&mut self) -> Result<Op> {
        if let Some(op) = self.pending.pop_front() {
            return Ok(op);
        }
        let Some(rec) = self.read_record()? else {
            return Ok(Op::Exit);
        };
        let generic = syscall::lookup("getpid").expect("getpid is in the table");
        Ok(match rec {
            Record::User(ns) => Op::User {
                cycles: ns * self.host_ghz,
                touches: 8,
            },
            Record::Syscall(ns, wait, flushed) => {
                let op = Op::Syscall {
                    spec: generic,
                    count: 1,
                    extra_cycles: (ns * self.host_ghz - generic.work_cycles).max(0.0),
                    // u64::MAX pages is TLB_FLUSH_ALL in both the trace and the model.
                    effect: (flushed > 0).then_some(Effect::FlushUserRange { pages: flushed }),
                };
                if wait {
                    // A make waits for each copy of its jobs.
                    let copies = if self.is_make { self.scale } else { 1 };
                    for _ in 0..copies {
                        self.pending.push_back(Op::WaitChild);
                    }
                }
                op
            }
            Record::Fault => Op::AnonFaults(1),
            Record::Fork(tid) => {
                let copies = if self.is_make && !self.makes.contains(&tid) {
                    self.scale
                } else {
                    1
                };
                for _ in 1..copies {
                    self.pending.push_back(Op::Fork(Box::new(self.child(tid)?)));
                }
                Op::Fork(Box::new(self.child(tid)?))
            }
            Record::Thread(tid) => Op::SpawnThread(Box::new(self.child(tid)?)),
            Record::Exec => Op::Exec,
            Record::Exit => Op::Exit,
        })
    }
}

impl Program for FileSource {
    fn next(&mut self, _rng: &mut Pcg32) -> Op {
        if self.failed {
            return Op::Exit;
        }
        match self.next_op() {
            Ok(op) => op,
            Err(e) => {
                // The engine's programs cannot fail; a broken scratch file ends the task and
                // is reported on stderr once.
                eprintln!("kharden: replay: {e}");
                self.failed = true;
                Op::Exit
            }
        }
    }
    fn name(&self) -> &str {
        &self.name
    }
}

/// The root task's program for pass 2.
pub fn root_program(split: &Split, host_ghz: f64, scale_jobs: u32) -> Result<Box<dyn Program>> {
    let makes: std::collections::HashSet<u32> =
        std::fs::read_to_string(split.dir.join("make.tids"))
            .map_err(|e| io(&split.dir, e))?
            .lines()
            .filter_map(|l| l.parse().ok())
            .collect();
    let mut src = FileSource::open(&file_of(&split.dir, split.root), host_ghz, "root")?;
    src.scale = scale_jobs.max(1);
    src.is_make = makes.contains(&split.root);
    src.makes = std::rc::Rc::new(makes);
    Ok(Box::new(src))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Event, Meta, Op as T, TraceWriter};
    use kharden::kernel::Kernel;
    use kharden::machine;
    use kharden::sim::{Counter, Time};
    use kharden::workload::run::Runner;
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
        let split = split(&trace, &dir.join("ops")).unwrap();
        let program = root_program(&split, 3.0, 1).unwrap();
        let k = Kernel::boot(machine::load("ivybridge-i5-3550").unwrap(), vec![]);
        let mut r = Runner::new(k, program, 1);
        let w = r.run(Time::ZERO, Time(u64::MAX / 4)).unwrap();
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
}
