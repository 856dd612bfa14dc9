//! `kharden trace stats`: a summary of a trace, computed in one streaming pass.

use crate::format::{self, tlb_flush_reason_name, Event, GfpClass, Meta, Op, TraceReader};
use kharden::report::table::Table;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::io::Read;

#[derive(Debug, Clone, Default, Serialize)]
pub struct AllocRow {
    pub class: String,
    pub order: u8,
    pub allocations: u64,
    pub pages: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct TaskTime {
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    pub cpu_ns: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    pub meta: Meta,
    pub events: u64,
    pub duration_ns: u64,
    /// Tasks seen (processes and threads); `processes` counts thread-group leaders.
    pub tasks: u64,
    pub processes: u64,
    pub threads: u64,
    pub forks: u64,
    pub execs: u64,
    pub exits: u64,
    pub syscalls: u64,
    pub syscalls_by_name: BTreeMap<String, u64>,
    pub page_allocs: Vec<AllocRow>,
    pub pages_allocated: BTreeMap<String, u64>,
    pub page_frees: u64,
    pub pages_freed: u64,
    pub tlb_flushes: BTreeMap<String, u64>,
    pub context_switches: u64,
    pub preemptions: u64,
    pub migrations: u64,
    pub page_faults_user: u64,
    pub page_faults_kernel: u64,
    pub lost_events: u64,
    pub cpu_ns_total: u64,
    /// CPU time per command name (comm after the last exec), largest first.
    pub cpu_by_comm: Vec<(String, u64, u64)>,
    /// The tasks with the most CPU time (at most 20), largest first.
    pub top_tasks: Vec<TaskTime>,
}

struct TaskState {
    pid: u32,
    comm: String,
    running_since: Option<u64>,
    cpu_ns: u64,
}

/// Accumulates statistics event by event.
#[derive(Default)]
pub struct StatsBuilder {
    s: Stats,
    sys_by_nr: HashMap<u32, u64>,
    allocs: BTreeMap<(GfpClass, u8), (u64, u64)>,
    live: HashMap<u32, TaskState>,
    by_comm: HashMap<String, (u64, u64)>,
    finished: Vec<TaskTime>,
    last_time: u64,
}

impl StatsBuilder {
    pub fn add(&mut self, e: &Event) {
        let s = &mut self.s;
        s.events += 1;
        self.last_time = self.last_time.max(e.time_ns);
        match &e.op {
            Op::TaskNew { pid, parent, comm } => {
                s.tasks += 1;
                if *pid == e.tid {
                    s.processes += 1;
                } else {
                    s.threads += 1;
                }
                if parent.is_some() {
                    s.forks += 1;
                }
                self.live.insert(
                    e.tid,
                    TaskState {
                        pid: *pid,
                        comm: comm.to_string(),
                        running_since: None,
                        cpu_ns: 0,
                    },
                );
            }
            Op::Exec { filename } => {
                s.execs += 1;
                if let Some(t) = self.live.get_mut(&e.tid) {
                    t.comm = filename.rsplit('/').next().unwrap_or(filename).to_string();
                }
            }
            Op::Exit => {
                s.exits += 1;
                if let Some(mut t) = self.live.remove(&e.tid) {
                    if let Some(since) = t.running_since.take() {
                        t.cpu_ns += e.time_ns.saturating_sub(since);
                    }
                    self.finish_task(e.tid, t);
                }
            }
            Op::SwitchIn { .. } => {
                s.context_switches += 1;
                if let Some(t) = self.live.get_mut(&e.tid) {
                    t.running_since = Some(e.time_ns);
                }
            }
            Op::SwitchOut { state } => {
                if *state == 0 {
                    s.preemptions += 1;
                }
                if let Some(t) = self.live.get_mut(&e.tid) {
                    if let Some(since) = t.running_since.take() {
                        t.cpu_ns += e.time_ns.saturating_sub(since);
                    }
                }
            }
            Op::Migrate { .. } => s.migrations += 1,
            Op::SysEnter { nr, .. } => {
                s.syscalls += 1;
                *self.sys_by_nr.entry(*nr).or_default() += 1;
            }
            Op::SysExit { .. } => {}
            Op::PageAlloc { order, class, .. } => {
                let a = self.allocs.entry((*class, *order)).or_default();
                a.0 += 1;
                a.1 += 1u64 << order.min(&40);
            }
            Op::PageFree { order, .. } => {
                s.page_frees += 1;
                s.pages_freed += 1u64 << order.min(&40);
            }
            Op::TlbFlush { reason, .. } => {
                *s.tlb_flushes
                    .entry(tlb_flush_reason_name(*reason).to_string())
                    .or_default() += 1
            }
            Op::PageFault { user, .. } => {
                if *user {
                    s.page_faults_user += 1
                } else {
                    s.page_faults_kernel += 1
                }
            }
            Op::Lost { count } => s.lost_events += count,
        }
    }

    fn finish_task(&mut self, tid: u32, t: TaskState) {
        self.s.cpu_ns_total = self.s.cpu_ns_total.saturating_add(t.cpu_ns);
        let c = self.by_comm.entry(t.comm.clone()).or_default();
        c.0 += 1;
        c.1 = c.1.saturating_add(t.cpu_ns);
        self.finished.push(TaskTime {
            tid,
            pid: t.pid,
            comm: t.comm,
            cpu_ns: t.cpu_ns,
        });
        if self.finished.len() > 1000 {
            self.trim();
        }
    }

    fn trim(&mut self) {
        self.finished
            .sort_by(|a, b| b.cpu_ns.cmp(&a.cpu_ns).then(a.tid.cmp(&b.tid)));
        self.finished.truncate(20);
    }

    /// Finishes the statistics; `syscall_name` names syscall numbers.
    pub fn finish(mut self, meta: Meta, syscall_name: impl Fn(u32) -> Option<String>) -> Stats {
        let end = self.last_time;
        let mut live: Vec<(u32, TaskState)> = self.live.drain().collect();
        live.sort_by_key(|(t, _)| *t);
        for (tid, mut t) in live {
            if let Some(since) = t.running_since.take() {
                t.cpu_ns += end.saturating_sub(since);
            }
            self.finish_task(tid, t);
        }
        self.trim();
        let mut s = self.s;
        s.meta = meta;
        s.duration_ns = end;
        s.top_tasks = self.finished;
        for (nr, n) in self.sys_by_nr {
            let name = syscall_name(nr).unwrap_or_else(|| format!("nr{nr}"));
            *s.syscalls_by_name.entry(name).or_default() += n;
        }
        for ((class, order), (n, pages)) in self.allocs {
            s.page_allocs.push(AllocRow {
                class: class.name().to_string(),
                order,
                allocations: n,
                pages,
            });
            *s.pages_allocated
                .entry(class.name().to_string())
                .or_default() += pages;
        }
        let mut by_comm: Vec<(String, u64, u64)> = self
            .by_comm
            .into_iter()
            .map(|(c, (n, ns))| (c, n, ns))
            .collect();
        by_comm.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
        s.cpu_by_comm = by_comm;
        s
    }
}

/// Reads a whole trace and summarises it.
pub fn compute<R: Read>(mut r: TraceReader<R>) -> Result<Stats, format::TraceError> {
    let mut b = StatsBuilder::default();
    for e in r.by_ref() {
        b.add(&e?);
    }
    let meta = r.meta().clone();
    Ok(b.finish(meta, |nr| r.syscall_name(nr).map(|s| s.to_string())))
}

fn ms(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1e6)
}

impl Stats {
    /// The human-readable report: one table per aspect.
    pub fn tables(&self) -> Vec<Table> {
        let mut out = Vec::new();
        let mut t = Table::new(
            format!(
                "trace of `{}` (kernel {}, {} CPUs)",
                self.meta.command.join(" "),
                self.meta.kernel,
                self.meta.nr_cpus
            ),
            &["what", "count"],
        );
        let rows: Vec<(&str, String)> = vec![
            ("events", self.events.to_string()),
            ("duration (ms)", ms(self.duration_ns)),
            ("tasks", self.tasks.to_string()),
            ("processes", self.processes.to_string()),
            ("threads", self.threads.to_string()),
            ("forks", self.forks.to_string()),
            ("execs", self.execs.to_string()),
            ("exits", self.exits.to_string()),
            ("syscalls", self.syscalls.to_string()),
            (
                "context switches (switch-ins)",
                self.context_switches.to_string(),
            ),
            (
                "preemptions (switched out runnable)",
                self.preemptions.to_string(),
            ),
            ("migrations", self.migrations.to_string()),
            ("page faults (user)", self.page_faults_user.to_string()),
            ("page faults (kernel)", self.page_faults_kernel.to_string()),
            ("page frees (calls)", self.page_frees.to_string()),
            ("pages freed", self.pages_freed.to_string()),
            ("CPU time, all tasks (ms)", ms(self.cpu_ns_total)),
            ("lost events", self.lost_events.to_string()),
        ];
        for (k, v) in rows {
            t.push(vec![k.to_string(), v]);
        }
        out.push(t);

        let mut t = Table::new(
            "page allocations by GFP class and order",
            &["class", "order", "allocations", "pages"],
        );
        for r in &self.page_allocs {
            t.push(vec![
                r.class.clone(),
                r.order.to_string(),
                r.allocations.to_string(),
                r.pages.to_string(),
            ]);
        }
        out.push(t);

        let mut t = Table::new(
            "TLB flushes by reason (tlb:tlb_flush)",
            &["reason", "count"],
        );
        for (k, v) in &self.tlb_flushes {
            t.push(vec![k.clone(), v.to_string()]);
        }
        out.push(t);

        let mut t = Table::new("syscalls by name", &["syscall", "count"]);
        let mut sys: Vec<(&String, &u64)> = self.syscalls_by_name.iter().collect();
        sys.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        for (k, v) in sys {
            t.push(vec![k.clone(), v.to_string()]);
        }
        out.push(t);

        let mut t = Table::new("CPU time by command", &["comm", "tasks", "cpu ms"]);
        for (c, n, ns) in &self.cpu_by_comm {
            t.push(vec![c.clone(), n.to_string(), ms(*ns)]);
        }
        out.push(t);

        let mut t = Table::new(
            "CPU time per task (top 20)",
            &["tid", "pid", "comm", "cpu ms"],
        );
        for task in &self.top_tasks {
            t.push(vec![
                task.tid.to_string(),
                task.pid.to_string(),
                task.comm.clone(),
                ms(task.cpu_ns),
            ]);
        }
        out.push(t);
        out
    }
}
