//! Pass 1: the trace, streamed once, split into one operation file per task.
//!
//! Tasks are numbered in order of appearance (a tid reused after an exit is a new task with
//! a new number), so a file is never written twice. Each live task buffers its operations and
//! appends them to its file in chunks, opening the file only for that write: file
//! descriptors stay constant and memory is bounded by the live tasks, whatever the trace's
//! length.

use super::ops::{self, file_of, io};
use super::{Recorded, Split};
use crate::format::{self, GfpClass, Op as TraceOp};
use kharden::{Error, Result};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::Path;

/// A task's buffered operations are appended to its file beyond this many bytes, and every
/// task's once all buffers together exceed `MAX_BUFFERED`.
const CHUNK: usize = 4096;
const MAX_BUFFERED: usize = 64 << 20;

struct TaskState {
    seq: u32,
    on_cpu_since: Option<u64>,
    in_syscall: Option<u32>,
    /// On-CPU ns accumulated in the current mode since the last emitted op.
    acc_ns: u64,
    /// Pages this task flushed from its address space during the current syscall.
    flushed_pages: u64,
    is_make: bool,
    pending: Vec<u8>,
}

impl TaskState {
    /// Emits the time accumulated in user mode as one User op; returns its ns.
    fn flush_user(&mut self) -> u64 {
        if self.in_syscall.is_some() || self.acc_ns == 0 {
            return 0;
        }
        let ns = std::mem::take(&mut self.acc_ns);
        self.pending.push(ops::USER);
        self.pending.extend_from_slice(&(ns as f64).to_le_bytes());
        ns
    }

    fn account(&mut self, now: u64) {
        if let Some(since) = self.on_cpu_since {
            self.acc_ns = self.acc_ns.saturating_add(now.saturating_sub(since));
            self.on_cpu_since = Some(now);
        }
    }

    /// Appends the buffered operations to the task's file.
    fn write_out(&mut self, dir: &Path) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let path = file_of(dir, self.seq);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| io(&path, e))?;
        f.write_all(&self.pending).map_err(|e| io(&path, e))?;
        self.pending.clear();
        Ok(())
    }
}

/// Splits `trace` into per-task op files under `dir` (an empty private directory).
pub fn split(trace: &Path, dir: &Path) -> Result<Split> {
    let mut reader = format::open(trace)?;
    let mut tasks: HashMap<u32, TaskState> = HashMap::new();
    let mut makes: HashSet<u32> = HashSet::new();
    let mut next_seq: u32 = 0;
    let mut buffered = 0usize;
    let mut root = None;
    let mut rec = Recorded::default();
    while let Some(ev) = reader.next() {
        let ev = ev?;
        let (t, tid) = (ev.time_ns, ev.tid);
        if let TraceOp::TaskNew { pid, parent, comm } = &ev.op {
            let seq = next_seq;
            next_seq = next_seq
                .checked_add(1)
                .ok_or_else(|| Error::at(trace.display(), "more than 2^32 tasks"))?;
            let path = file_of(dir, seq);
            // create_new: never follows or reuses an existing file.
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(|e| io(&path, e))?;
            // A child starts under its parent's name; what it execs decides (see Exec).
            tasks.insert(
                tid,
                TaskState {
                    seq,
                    on_cpu_since: None,
                    in_syscall: None,
                    acc_ns: 0,
                    flushed_pages: 0,
                    is_make: &**comm == "make",
                    pending: Vec::new(),
                },
            );
            rec.tasks += 1;
            match parent.and_then(|p| tasks.get_mut(&p)) {
                Some(ps) => {
                    ps.account(t);
                    rec.user_ns = rec.user_ns.saturating_add(ps.flush_user());
                    if *pid != tid {
                        rec.threads += 1;
                        ps.pending.push(ops::THREAD);
                        ps.pending.extend_from_slice(&seq.to_le_bytes());
                    } else {
                        // The syscall the parent is in says how: vfork, or clone3, which
                        // glibc uses for posix_spawn (CLONE_VM | CLONE_VFORK) and threads
                        // only (its fork is clone), shares the parent's mm until exec.
                        let how = ps.in_syscall.and_then(|nr| reader.syscall_name(nr));
                        let vfork = matches!(how.map(|n| &**n), Some("vfork" | "clone3"));
                        rec.forks += 1;
                        rec.vforks += vfork as u64;
                        ps.pending.push(ops::FORK);
                        ps.pending.extend_from_slice(&seq.to_le_bytes());
                        ps.pending.push(vfork as u8);
                    }
                }
                None => root = root.or(Some(seq)),
            }
            continue;
        }
        let Some(st) = tasks.get_mut(&tid) else {
            continue;
        };
        let before = st.pending.len();
        match &ev.op {
            TraceOp::SwitchIn { .. } => st.on_cpu_since = Some(t),
            TraceOp::SwitchOut { .. } => {
                st.account(t);
                st.on_cpu_since = None;
            }
            TraceOp::SysEnter { nr, .. } => {
                st.account(t);
                rec.user_ns = rec.user_ns.saturating_add(st.flush_user());
                st.acc_ns = 0;
                st.in_syscall = Some(*nr);
            }
            TraceOp::SysExit { .. } => {
                st.account(t);
                let nr = st.in_syscall.take().unwrap_or(u32::MAX);
                let ns = std::mem::take(&mut st.acc_ns);
                rec.system_ns = rec.system_ns.saturating_add(ns);
                rec.syscalls += 1;
                st.pending.push(ops::SYSCALL);
                st.pending.extend_from_slice(&(ns as f64).to_le_bytes());
                let name = reader.syscall_name(nr).map(|n| &**n);
                if matches!(name, Some("wait4" | "waitid")) {
                    st.pending.push(ops::WAIT);
                }
                let flushed = std::mem::take(&mut st.flushed_pages);
                if flushed > 0 {
                    rec.flushing_syscalls += 1;
                    st.pending.push(ops::FLUSH);
                    st.pending.extend_from_slice(&flushed.to_le_bytes());
                }
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
                st.pending.push(ops::EXEC);
                st.is_make = filename.rsplit('/').next() == Some("make");
            }
            TraceOp::PageAlloc {
                class: GfpClass::UserAnon,
                order,
                ..
            } if st.in_syscall.is_none() => {
                st.account(t);
                rec.user_ns = rec.user_ns.saturating_add(st.flush_user());
                // The reader bounds orders (format::MAX_ORDER), so the count fits.
                let pages = 1u32 << order;
                rec.anon_faults += pages as u64;
                st.pending.push(ops::FAULTS);
                st.pending.extend_from_slice(&pages.to_le_bytes());
            }
            TraceOp::Exit => {
                st.account(t);
                rec.user_ns = rec.user_ns.saturating_add(st.flush_user());
                st.pending.push(ops::EXIT);
                let mut st = tasks.remove(&tid).expect("looked up above");
                buffered = buffered.saturating_sub(before);
                st.write_out(dir)?;
                if st.is_make {
                    makes.insert(st.seq);
                }
                continue;
            }
            _ => {}
        }
        buffered += st.pending.len() - before;
        if st.pending.len() >= CHUNK {
            buffered -= st.pending.len();
            st.write_out(dir)?;
        }
        if buffered > MAX_BUFFERED {
            for st in tasks.values_mut() {
                st.write_out(dir)?;
            }
            buffered = 0;
        }
    }
    // Tasks still alive at the end of the trace exit there.
    for (_, mut st) in tasks {
        rec.user_ns = rec.user_ns.saturating_add(st.flush_user());
        st.pending.push(ops::EXIT);
        st.write_out(dir)?;
        if st.is_make {
            makes.insert(st.seq);
        }
    }
    let root = root.ok_or_else(|| Error::at(trace.display(), "the trace has no root task"))?;
    Ok(Split {
        dir: dir.to_path_buf(),
        root,
        makes,
        recorded: rec,
    })
}
