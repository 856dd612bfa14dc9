//! Pass 1: the trace, streamed once, split into one operation file per task.
//!
//! Each task's on-CPU time is cut at its events into user and kernel intervals, and what
//! the recording added to them is taken out (docs/design/replay.md, "What the recording
//! removes"): the recorder's own cost measured at record time (the trace's `tracer`: so
//! much per syscall on each side, so much per other event), and the kernel time of page
//! faults, which no tracepoint ends and which therefore sits in the user intervals (each
//! fault's measured native latency, by kind; the model runs the fault itself). A cost is a
//! debt paid from the next time accumulated in its mode, so no interval goes negative.
//!
//! Tasks are numbered in order of appearance (a tid reused after an exit is a new task with
//! a new number), so a file is never written twice. Each live task buffers its operations and
//! appends them to its file in chunks, opening the file only for that write: file
//! descriptors stay constant and memory is bounded by the live tasks, whatever the trace's
//! length.

use super::ops::{self, file_of, io};
use super::variant::{self, Inside, Variant};
use super::{Recorded, Split};
use crate::format::{self, GfpClass, Op as TraceOp};
use kharden::kernel::paths::table::KernelPaths;
use kharden::{Error, Result};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::Path;

/// A task's buffered operations are appended to its file beyond this many bytes, and every
/// task's once all buffers together exceed `MAX_BUFFERED`.
const CHUNK: usize = 4096;
const MAX_BUFFERED: usize = 64 << 20;

/// What is taken out of the intervals (ns).
#[derive(Debug, Clone, Copy, Default)]
struct Costs {
    syscall_user: f64,
    syscall_kernel: f64,
    event: f64,
    /// A process's own recorder cost, charged to its exec.
    process: f64,
    entry_exit: f64,
    /// Native latency of an anonymous, a copy-on-write and a file fault.
    fault: [f64; 3],
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum FaultKind {
    Anon,
    Cow,
    File,
}

impl FaultKind {
    fn index(self) -> usize {
        self as usize
    }
}

struct Call {
    nr: u32,
    args: [u64; 6],
    inside: Inside,
    flushed: u64,
    /// The recorder's cost taken out of this call's kernel time (ns).
    removed: f64,
}

/// A start the task made inside the syscall it is in, written when the syscall returns
/// (with the call's recorded kernel time, which the model's fork or exec is compared with).
enum Started {
    Fork { seq: u32, vfork: bool },
    Thread { seq: u32 },
    Exec,
}

struct TaskState {
    seq: u32,
    started: Vec<Started>,
    on_cpu_since: Option<u64>,
    call: Option<Call>,
    /// On-CPU ns accumulated in the current mode since the last emitted op.
    acc_ns: u64,
    /// Costs (ns) to take out of the user time, accrued since the last User op (written with
    /// it; pass 2 scales them to the recording's sampled user time and pays them), and out
    /// of the kernel time to come.
    user_debt: f64,
    kernel_debt: f64,
    /// A user page fault whose kind its next events decide: error code, pages allocated.
    fault: Option<(u64, u32)>,
    is_make: bool,
    pending: Vec<u8>,
}

impl TaskState {
    fn account(&mut self, now: u64) {
        if let Some(since) = self.on_cpu_since {
            self.acc_ns = self.acc_ns.saturating_add(now.saturating_sub(since));
            self.on_cpu_since = Some(now);
        }
    }

    fn in_kernel(&self) -> bool {
        self.call.is_some()
    }

    /// Takes the accumulated time, less what it pays of `debt`.
    fn take(acc: &mut u64, debt: &mut f64) -> f64 {
        let raw = std::mem::take(acc) as f64;
        let paid = raw.min(*debt);
        *debt -= paid;
        raw - paid
    }

    /// Emits the time accumulated in user mode as one User op, with the costs accrued to
    /// come out of it, and counts both.
    fn flush_user(&mut self, rec: &mut Recorded) {
        if self.in_kernel() || (self.acc_ns == 0 && self.user_debt == 0.0) {
            return;
        }
        let raw = std::mem::take(&mut self.acc_ns) as f64;
        let due = std::mem::take(&mut self.user_debt);
        rec.traced_user_ns += raw;
        rec.user_due_ns += due;
        self.pending.push(ops::USER);
        self.pending.extend_from_slice(&raw.to_le_bytes());
        self.pending.extend_from_slice(&due.to_le_bytes());
    }

    /// The cost of one recorded event, in the mode the task is in.
    fn event(&mut self, costs: &Costs) {
        self.charge(costs.event);
    }

    /// `ns` of the recorder's, in the interval the task is in.
    fn charge(&mut self, ns: f64) {
        if let Some(c) = self.call.as_mut() {
            self.kernel_debt += ns;
            c.removed += ns;
        } else {
            self.user_debt += ns;
        }
    }

    /// A user fault whose kind is now known: the fault op, and its kernel time a debt of
    /// the user time (it ran inside the user interval the trace cut).
    fn fault_done(&mut self, rec: &mut Recorded, costs: &Costs) {
        let Some((error_code, allocs)) = self.fault.take() else {
            return;
        };
        // x86 error code: bit 0 protection violation (the page was present), bit 1 write.
        let kind = match (allocs > 0, error_code & 1 != 0) {
            (true, true) => FaultKind::Cow,
            (true, false) => FaultKind::Anon,
            (false, _) => FaultKind::File,
        };
        self.push_faults(kind, allocs.max(1), rec, costs);
    }

    fn push_faults(&mut self, kind: FaultKind, n: u32, rec: &mut Recorded, costs: &Costs) {
        match kind {
            FaultKind::Anon => rec.anon_faults += n as u64,
            FaultKind::Cow => rec.cow_faults += n as u64,
            FaultKind::File => rec.file_faults += n as u64,
        }
        let ns = costs.fault[kind.index()] * n as f64;
        rec.fault_ns += ns;
        self.user_debt += ns;
        self.pending.push(ops::FAULTS);
        self.pending.push(kind.index() as u8);
        self.pending.extend_from_slice(&n.to_le_bytes());
    }

    /// Writes the starts made inside the syscall that took `ns` of kernel time.
    fn write_started(&mut self, ns: f64, removed: f64) {
        for s in std::mem::take(&mut self.started) {
            match s {
                Started::Fork { seq, vfork } => {
                    self.pending.push(ops::FORK);
                    self.pending.extend_from_slice(&seq.to_le_bytes());
                    self.pending.push(vfork as u8);
                    self.pending.extend_from_slice(&ns.to_le_bytes());
                    self.pending.extend_from_slice(&removed.to_le_bytes());
                }
                Started::Thread { seq } => {
                    self.pending.push(ops::THREAD);
                    self.pending.extend_from_slice(&seq.to_le_bytes());
                }
                Started::Exec => {
                    self.pending.push(ops::EXEC);
                    self.pending.extend_from_slice(&ns.to_le_bytes());
                    self.pending.extend_from_slice(&removed.to_le_bytes());
                }
            }
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

fn costs_of(meta: &format::Meta, paths: &KernelPaths) -> Costs {
    let fault = |name| paths.native_ns(name).unwrap_or(0.0);
    let mut c = Costs {
        fault: [fault("fault-anon"), fault("fault-cow"), fault("fault-file")],
        ..Default::default()
    };
    if let Some(t) = &meta.tracer {
        c.syscall_user = t.syscall_user_ns.max(0.0);
        c.syscall_kernel = t.syscall_kernel_ns.max(0.0);
        c.event = t.event_ns.max(0.0);
        c.process = t.process_ns.max(0.0);
        c.entry_exit = t.entry_exit_ns.max(0.0);
    }
    c
}

/// Splits `trace` into per-task op files under `dir` (an empty private directory), the
/// faults' native latencies those of recording `paths`.
pub fn split(trace: &Path, dir: &Path, paths: &KernelPaths) -> Result<Split> {
    let mut reader = format::open(trace)?;
    let costs = costs_of(reader.meta(), paths);
    let tracer = reader.meta().tracer.clone();
    let untraced = reader.meta().untraced.clone();
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
                    started: Vec::new(),
                    on_cpu_since: None,
                    call: None,
                    acc_ns: 0,
                    user_debt: 0.0,
                    kernel_debt: 0.0,
                    fault: None,
                    is_make: &**comm == "make",
                    pending: Vec::new(),
                },
            );
            rec.tasks += 1;
            match parent.and_then(|p| tasks.get_mut(&p)) {
                Some(ps) => {
                    ps.account(t);
                    ps.flush_user(&mut rec);
                    ps.event(&costs);
                    if *pid != tid {
                        rec.threads += 1;
                        ps.started.push(Started::Thread { seq });
                    } else {
                        // The syscall the parent is in says how: vfork, or clone3, which
                        // glibc uses for posix_spawn (CLONE_VM | CLONE_VFORK) and threads
                        // only (its fork is clone), shares the parent's mm until exec.
                        let how = ps.call.as_ref().and_then(|c| reader.syscall_name(c.nr));
                        let vfork = matches!(how.map(|n| &**n), Some("vfork" | "clone3"));
                        rec.forks += 1;
                        rec.vforks += vfork as u64;
                        ps.started.push(Started::Fork { seq, vfork });
                    }
                    // Outside a syscall (a trace without syscall events) it is written now.
                    if ps.call.is_none() {
                        ps.write_started(0.0, 0.0);
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
        st.account(t);
        // A fault's kind is decided by the allocations that follow it, before anything else.
        if !matches!(
            ev.op,
            TraceOp::PageAlloc { .. } | TraceOp::PageFree { .. } | TraceOp::TlbFlush { .. }
        ) {
            st.fault_done(&mut rec, &costs);
        }
        match &ev.op {
            TraceOp::SwitchIn { .. } => st.on_cpu_since = Some(t),
            TraceOp::SwitchOut { .. } => {
                st.event(&costs);
                st.on_cpu_since = None;
            }
            TraceOp::SysEnter { nr, args } => {
                st.user_debt += costs.syscall_user;
                st.flush_user(&mut rec);
                st.acc_ns = 0;
                st.call = Some(Call {
                    nr: *nr,
                    args: *args,
                    inside: Inside::default(),
                    flushed: 0,
                    removed: costs.syscall_kernel,
                });
            }
            TraceOp::SysExit { nr, ret, target } => {
                st.kernel_debt += costs.syscall_kernel;
                let raw = st.acc_ns as f64;
                let ns = TaskState::take(&mut st.acc_ns, &mut st.kernel_debt);
                rec.traced_system_ns += raw;
                // An exit without its enter (a child's return from the clone that made it,
                // or an enter perf lost): its time is fork's, which the model runs.
                let Some(call) = st.call.take().filter(|c| c.nr == *nr) else {
                    rec.exits_without_enter += 1;
                    continue;
                };
                let name = reader.syscall_name(*nr).map(|n| &**n).unwrap_or("");
                let v = variant::classify(name, &call.args, *ret, *target, call.inside);
                rec.syscalls += 1;
                let effect = (call.flushed > 0).then_some(
                    kharden::kernel::paths::syscall::Effect::FlushUserRange {
                        pages: call.flushed,
                    },
                );
                // The model's operation for it (its label does not depend on the clock).
                let label = variant::to_op(paths, v, ns, 1.0, effect, None).map_or(
                    match name {
                        "execve" | "execveat" => "execve",
                        _ => "fork",
                    },
                    |op| op.label(),
                );
                rec.add_call(label, ns, costs.entry_exit);
                rec.system_ns += ns;
                st.write_started(ns, call.removed);
                if v == Variant::Omitted {
                    buffered += st.pending.len() - before;
                    continue;
                }
                let (code, a, b) = v.encode();
                st.pending.push(ops::SYSCALL);
                st.pending.push(code);
                st.pending.extend_from_slice(&a.to_le_bytes());
                st.pending.extend_from_slice(&b.to_le_bytes());
                st.pending.extend_from_slice(&ns.to_le_bytes());
                st.pending.extend_from_slice(&call.removed.to_le_bytes());
                if matches!(name, "wait4" | "waitid") {
                    st.pending.push(ops::WAIT);
                }
                if call.flushed > 0 {
                    rec.flushing_syscalls += 1;
                    st.pending.push(ops::FLUSH);
                    st.pending.extend_from_slice(&call.flushed.to_le_bytes());
                }
            }
            // The flushing CPU's own event (local shootdown, or the whole-mm variant) while
            // the task is in a syscall: it started a flush of its address space.
            TraceOp::TlbFlush { reason, pages, .. } => {
                st.event(&costs);
                if let (2 | 3, Some(c)) = (reason, st.call.as_mut()) {
                    c.flushed = c.flushed.saturating_add(*pages);
                }
            }
            TraceOp::Exec { filename } => {
                st.charge(costs.event + costs.process);
                st.started.push(Started::Exec);
                if st.call.is_none() {
                    st.write_started(0.0, 0.0);
                }
                st.is_make = filename.rsplit('/').next() == Some("make");
            }
            TraceOp::PageFault {
                user: true,
                error_code,
                ..
            } if !st.in_kernel() => {
                st.flush_user(&mut rec);
                st.event(&costs);
                st.fault = Some((*error_code, 0));
            }
            TraceOp::PageAlloc { class, order, .. } => {
                st.event(&costs);
                // The reader bounds orders (format::MAX_ORDER), so the count fits.
                let pages = 1u32 << order;
                match (*class, st.call.as_mut(), st.fault.as_mut()) {
                    (GfpClass::UserAnon, None, Some((_, allocs))) => *allocs += pages,
                    // No fault event (a trace without the fault tracepoints): an
                    // allocation for user memory outside a syscall is an anonymous fault.
                    (GfpClass::UserAnon, None, None) => {
                        st.flush_user(&mut rec);
                        st.push_faults(FaultKind::Anon, pages, &mut rec, &costs);
                    }
                    (GfpClass::PageCache, Some(c), _) => c.inside.page_cache_allocs += pages,
                    _ => {}
                }
            }
            TraceOp::PageFree { order, .. } => {
                st.event(&costs);
                if let Some(c) = st.call.as_mut() {
                    c.inside.pages_freed += 1u32 << order;
                }
            }
            TraceOp::PageFault { .. } | TraceOp::Migrate { .. } => st.event(&costs),
            TraceOp::Exit => {
                st.flush_user(&mut rec);
                // exit_group's kernel time so far is exit's, which the model runs.
                rec.traced_system_ns += st.acc_ns as f64;
                if st.in_kernel() {
                    st.kernel_debt += costs.syscall_kernel / 2.0;
                    let ns = TaskState::take(&mut st.acc_ns, &mut st.kernel_debt);
                    rec.system_ns += ns;
                    rec.add_call("exit", ns, costs.entry_exit / 2.0);
                }
                st.write_started(0.0, 0.0);
                st.pending.push(ops::EXIT);
                let mut st = tasks.remove(&tid).expect("looked up above");
                rec.unpaid_kernel_ns += st.kernel_debt;
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
        st.fault_done(&mut rec, &costs);
        st.flush_user(&mut rec);
        st.write_started(0.0, 0.0);
        rec.unpaid_kernel_ns += st.kernel_debt;
        st.pending.push(ops::EXIT);
        st.write_out(dir)?;
        if st.is_make {
            makes.insert(st.seq);
        }
    }
    let root = root.ok_or_else(|| Error::at(trace.display(), "the trace has no root task"))?;
    rec.entry_exit_ns = costs.entry_exit;
    rec.scale_user_costs(reader.meta().cpu_samples, untraced.as_ref());
    rec.tracer = tracer;
    rec.untraced = untraced;
    Ok(Split {
        dir: dir.to_path_buf(),
        root,
        makes,
        recorded: rec,
    })
}
