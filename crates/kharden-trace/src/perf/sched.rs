//! The sched family: perf's own task records (fork, exit, comm) and the sched tracepoints
//! (switch, migrate, fork, exec, exit), which build and follow the workload's process tree.

use super::convert::{Conversion, Sample};
use crate::format::Op;
use linux_perf_data::linux_perf_event_reader::ForkOrExitRecord;
use std::io::{self, Write};
use std::sync::Arc;

impl<W: Write> Conversion<W> {
    /// perf's FORK record: a child of a tree task joins the tree.
    pub(super) fn fork_record(&mut self, f: &ForkOrExitRecord) -> io::Result<()> {
        let (tid, ptid, pid) = (f.tid as u32, f.ptid as u32, f.pid as u32);
        self.parent_of.insert(tid, ptid);
        self.tgid_of.insert(tid, pid);
        let t = f.timestamp.saturating_sub(self.base);
        if self.live.contains_key(&ptid) && !self.live.contains_key(&tid) && f.timestamp != 0 {
            let comm = self.live[&ptid].comm.clone();
            self.new_task(t, tid, pid, ptid, comm)?;
        }
        Ok(())
    }

    pub(super) fn exit_record(&mut self, f: &ForkOrExitRecord) {
        self.parent_of.remove(&(f.tid as u32));
        self.tgid_of.remove(&(f.tid as u32));
    }

    /// perf's COMM record: names the root and renames tree tasks.
    pub(super) fn comm_record(&mut self, pid: i32, tid: i32, comm: String) {
        let tid = tid as u32;
        self.maybe_root(pid, tid, &comm);
        if let Some(l) = self.live.get_mut(&tid) {
            l.comm = Arc::from(comm.as_str());
        }
    }

    /// Emits a task's creation (ending a stale task of the same tid first) and follows it.
    fn new_task(
        &mut self,
        t: u64,
        tid: u32,
        pid: u32,
        parent: u32,
        comm: Arc<str>,
    ) -> io::Result<()> {
        if self.trace_has_live(tid) {
            self.emit(t, tid, Op::Exit)?;
        }
        // The parent is in the clone that made the child: its flags say whether the child
        // shares the descriptor table (clone3's are in user memory: threads share it).
        let flags = self
            .live
            .get(&parent)
            .and_then(|l| l.in_syscall)
            .filter(|(nr, _, _)| self.names.get(nr).map(String::as_str) == Some("clone"))
            .map_or(0, |(_, args, _)| args[0]);
        self.fds.fork(parent, tid, pid != tid, flags);
        self.emit(
            t,
            tid,
            Op::TaskNew {
                pid,
                parent: Some(parent),
                comm: comm.clone(),
            },
        )?;
        self.adopt(tid, comm);
        Ok(())
    }

    pub(super) fn switch(&mut self, s: &Sample) -> io::Result<()> {
        let (t, cpu) = (s.t, s.cpu);
        let prev = s.layout.i32(s.raw, 0).unwrap_or(-1) as u32;
        let state = s.layout.int(s.raw, 1).unwrap_or(0);
        let next = s.layout.i32(s.raw, 2).unwrap_or(-1) as u32;
        // After lost events a tree task may seem to still run on this CPU (or on another
        // one): it stopped unseen, so it is switched out here.
        self.vacate(t, cpu, prev)?;
        if self.live.contains_key(&prev) {
            self.emit(t, prev, Op::SwitchOut { state })?;
            self.cpu_of.remove(&prev);
            if self.live[&prev].exiting && state & 0x30 != 0 {
                self.emit(t, prev, Op::Exit)?;
                self.live.remove(&prev);
            }
        }
        if self.live.contains_key(&next) {
            self.leave_other_cpu(t, next)?;
            self.on_cpu.insert(cpu, next);
            self.cpu_of.insert(next, cpu);
        }
        if next == 0 {
            if self.live.contains_key(&prev) {
                self.lazy_owner.insert(cpu, prev);
            }
        } else if self.live.contains_key(&next) {
            self.lazy_owner.insert(cpu, next);
            self.emit(t, next, Op::SwitchIn { cpu })?;
        } else {
            self.lazy_owner.remove(&cpu);
        }
        Ok(())
    }

    /// A tree task's own event on `cpu` says it runs there. Where the kernel recorded no
    /// switch-in (a task woken onto an idle CPU of this repository's recording host comes
    /// back with none: its sched_switch out of the idle task is missing), it is switched in
    /// here, at its first event back; the moment it really resumed is not known, so the
    /// time from there to this event is lost rather than invented.
    pub(super) fn running_here(&mut self, t: u64, tid: u32, cpu: u32) -> io::Result<()> {
        if self.cpu_of.get(&tid) == Some(&cpu) {
            return Ok(());
        }
        self.leave_other_cpu(t, tid)?;
        self.vacate(t, cpu, tid)?;
        self.on_cpu.insert(cpu, tid);
        self.cpu_of.insert(tid, cpu);
        self.lazy_owner.insert(cpu, tid);
        self.emit(t, tid, Op::SwitchIn { cpu })?;
        self.sum.inferred_switch_ins += 1;
        Ok(())
    }

    /// `cpu` is free from `t`: the tree task recorded on it, unless it is `except` (whose
    /// own switch-out the caller writes), stopped unseen and is switched out (repaired).
    fn vacate(&mut self, t: u64, cpu: u32, except: u32) -> io::Result<()> {
        if let Some(cur) = self.on_cpu.remove(&cpu) {
            if cur != except && self.live.contains_key(&cur) {
                self.emit(t, cur, Op::SwitchOut { state: 0 })?;
                self.cpu_of.remove(&cur);
                self.sum.repaired += 1;
            }
        }
        Ok(())
    }

    /// `tid`, about to run somewhere, is no longer recorded on the CPU it was seen on: it
    /// left it unseen and is switched out (repaired).
    fn leave_other_cpu(&mut self, t: u64, tid: u32) -> io::Result<()> {
        if let Some(other) = self.cpu_of.remove(&tid) {
            self.on_cpu.remove(&other);
            self.emit(t, tid, Op::SwitchOut { state: 0 })?;
            self.sum.repaired += 1;
        }
        Ok(())
    }

    pub(super) fn migrate(&mut self, s: &Sample) -> io::Result<()> {
        let pid = s.layout.i32(s.raw, 0).unwrap_or(-1) as u32;
        if self.live.contains_key(&pid) {
            let from = s.layout.int(s.raw, 1).unwrap_or(0) as u32;
            let to = s.layout.int(s.raw, 2).unwrap_or(0) as u32;
            self.emit(s.t, pid, Op::Migrate { from, to })?;
        }
        Ok(())
    }

    /// sched_process_fork: a child of a tree task joins the tree (if perf's FORK record
    /// did not already add it).
    pub(super) fn fork(&mut self, s: &Sample) -> io::Result<()> {
        let parent = s.layout.i32(s.raw, 0).unwrap_or(-1) as u32;
        let child = s.layout.i32(s.raw, 1).unwrap_or(-1) as u32;
        if self.live.contains_key(&parent) && !self.live.contains_key(&child) {
            let comm: Arc<str> = Arc::from(s.layout.str(s.raw, 2).unwrap_or("?"));
            let pid = self.tgid_of.get(&child).copied().unwrap_or(child);
            self.new_task(s.t, child, pid, parent, comm)?;
        }
        Ok(())
    }

    /// sched_process_exec of a tree task: its comm becomes the file's base name, as the
    /// kernel's does (15 characters).
    pub(super) fn exec(&mut self, s: &Sample) -> io::Result<()> {
        let filename = s.layout.str(s.raw, 0).unwrap_or("?");
        let base_name = filename.rsplit('/').next().unwrap_or(filename);
        let comm: String = base_name.chars().take(15).collect();
        self.emit(
            s.t,
            s.tid,
            Op::Exec {
                filename: Arc::from(filename),
            },
        )?;
        self.fds.exec(s.tid);
        if let Some(l) = self.live.get_mut(&s.tid) {
            l.comm = Arc::from(comm.as_str());
        }
        Ok(())
    }

    /// sched_process_exit: the task ends at its last switch-out (see `switch`).
    pub(super) fn exit(&mut self, s: &Sample) {
        let pid = s.layout.i32(s.raw, 0).unwrap_or(-1) as u32;
        if let Some(l) = self.live.get_mut(&pid) {
            l.exiting = true;
        }
    }
}
