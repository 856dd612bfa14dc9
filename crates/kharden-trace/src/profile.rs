//! Workload profiles derived from traces: per-job distributions of a parallel build.
//!
//! A *job* is what make runs for one recipe line: a process forked by a `make` process that
//! does not itself become `make`, together with everything it forks (e.g. `sh -c` -> gcc ->
//! cc1 -> as). A task that execs `make` starts a new make level; its children are jobs. Jobs
//! are classified by what ran in them: `compile` (cc1 ran), `link` (ld or ar ran), `other`.
//! For each kind the profile gives the distribution (mean, p10, p50, p90, max) of processes
//! per job, CPU time, wall time, syscalls, page faults and pages allocated by GFP class, and
//! the syscall mix. Everything is computed in one streaming pass.

use crate::format::{self, Event, GfpClass, Meta, Op};
use kharden::{Error, Result};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(Debug, Clone, Default)]
struct Job {
    root: u32,
    live: u32,
    processes: u64,
    threads: u64,
    cc1: bool,
    link: bool,
    start: u64,
    end: u64,
    cpu_ns: u64,
    syscalls: u64,
    sys_by_nr: HashMap<u32, u64>,
    faults: u64,
    pages: [u64; 3],
    allocs: u64,
    switches: u64,
    tlb_flushes: u64,
}

#[derive(Debug, Clone)]
struct Task {
    make: bool,
    job: Option<usize>,
    running_since: Option<u64>,
}

/// Per-kind samples of finished jobs.
#[derive(Debug, Clone, Default)]
pub struct KindSamples {
    pub processes: Vec<f64>,
    pub cpu_ms: Vec<f64>,
    pub wall_ms: Vec<f64>,
    pub syscalls: Vec<f64>,
    pub page_faults: Vec<f64>,
    pub pages: [Vec<f64>; 3],
    pub context_switches: Vec<f64>,
    pub tlb_flushes: Vec<f64>,
    pub syscall_mix: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Default)]
pub struct Profile {
    pub metas: Vec<Meta>,
    pub kinds: BTreeMap<String, KindSamples>,
    pub make_processes: u64,
    pub make_cpu_ms: f64,
    pub total_wall_ms: f64,
    pub lost_events: u64,
}

struct Deriver {
    tasks: HashMap<u32, Task>,
    jobs: HashMap<usize, Job>,
    next_job: usize,
    prof: Profile,
    sys_names: HashMap<u32, String>,
}

fn base(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

impl Deriver {
    fn add(&mut self, e: &Event) {
        let tid = e.tid;
        match &e.op {
            Op::TaskNew { pid, parent, comm } => {
                let parent_task = parent.and_then(|p| self.tasks.get(&p)).cloned();
                let is_process = *pid == tid;
                let mut job = parent_task.as_ref().and_then(|p| p.job);
                let parent_is_make = parent_task.as_ref().is_some_and(|p| p.make);
                let make = parent_task.is_none() && base(comm) == "make";
                if parent_is_make && is_process {
                    let id = self.next_job;
                    self.next_job += 1;
                    self.jobs.insert(
                        id,
                        Job {
                            root: tid,
                            start: e.time_ns,
                            end: e.time_ns,
                            ..Job::default()
                        },
                    );
                    job = Some(id);
                } else if parent_is_make {
                    // A thread of make itself.
                    job = None;
                }
                if let Some(j) = job.and_then(|j| self.jobs.get_mut(&j)) {
                    j.live += 1;
                    if is_process {
                        j.processes += 1;
                    } else {
                        j.threads += 1;
                    }
                }
                let make = make || (parent_is_make && !is_process);
                self.tasks.insert(
                    tid,
                    Task {
                        make,
                        job,
                        running_since: None,
                    },
                );
            }
            Op::Exec { filename } => {
                let b = base(filename);
                let Some(t) = self.tasks.get_mut(&tid) else {
                    return;
                };
                if b == "make" || b == "gmake" {
                    t.make = true;
                    self.prof.make_processes += 1;
                    if let Some(j) = t.job.take() {
                        // A recipe that is itself a sub-make is not a job: its children are.
                        if self
                            .jobs
                            .get(&j)
                            .is_some_and(|job| job.root == tid && job.live == 1)
                        {
                            self.jobs.remove(&j);
                        } else {
                            self.leave(j, e.time_ns);
                        }
                    }
                } else {
                    t.make = false;
                    if let Some(j) = t.job.and_then(|j| self.jobs.get_mut(&j)) {
                        if b == "cc1" || b == "cc1plus" {
                            j.cc1 = true;
                        }
                        if b == "ld" || b == "ld.bfd" || b == "ld.gold" || b == "ar" {
                            j.link = true;
                        }
                    }
                }
            }
            Op::Exit => {
                if let Some(mut t) = self.tasks.remove(&tid) {
                    self.stop_running(&mut t, e.time_ns);
                    if let Some(j) = t.job {
                        self.leave(j, e.time_ns);
                    }
                }
            }
            Op::SwitchIn { .. } => {
                if let Some(t) = self.tasks.get_mut(&tid) {
                    t.running_since = Some(e.time_ns);
                    if let Some(j) = t.job.and_then(|j| self.jobs.get_mut(&j)) {
                        j.switches += 1;
                    }
                }
            }
            Op::SwitchOut { .. } => {
                if let Some(mut t) = self.tasks.remove(&tid) {
                    self.stop_running(&mut t, e.time_ns);
                    self.tasks.insert(tid, t);
                }
            }
            Op::Lost { count } => self.prof.lost_events += count,
            op => {
                let Some(j) = self
                    .tasks
                    .get(&tid)
                    .and_then(|t| t.job)
                    .and_then(|j| self.jobs.get_mut(&j))
                else {
                    return;
                };
                match op {
                    Op::SysEnter { nr, .. } => {
                        j.syscalls += 1;
                        *j.sys_by_nr.entry(*nr).or_default() += 1;
                    }
                    Op::PageAlloc { order, class, .. } => {
                        j.allocs += 1;
                        j.pages[class.code() as usize] += 1u64 << (*order).min(40);
                    }
                    Op::PageFault { .. } => j.faults += 1,
                    Op::TlbFlush { .. } => j.tlb_flushes += 1,
                    _ => {}
                }
            }
        }
    }

    fn stop_running(&mut self, t: &mut Task, now: u64) {
        if let Some(since) = t.running_since.take() {
            let d = now.saturating_sub(since);
            match t.job.and_then(|j| self.jobs.get_mut(&j)) {
                Some(j) => j.cpu_ns += d,
                None if t.make => self.prof.make_cpu_ms += d as f64 / 1e6,
                None => {}
            }
        }
    }

    fn leave(&mut self, id: usize, now: u64) {
        let Some(j) = self.jobs.get_mut(&id) else {
            return;
        };
        j.live = j.live.saturating_sub(1);
        j.end = j.end.max(now);
        if j.live > 0 {
            return;
        }
        let j = self.jobs.remove(&id).expect("job exists");
        let kind = if j.cc1 {
            "compile"
        } else if j.link {
            "link"
        } else {
            "other"
        };
        let k = self.prof.kinds.entry(kind.to_string()).or_default();
        k.processes.push(j.processes as f64);
        k.cpu_ms.push(j.cpu_ns as f64 / 1e6);
        k.wall_ms.push(j.end.saturating_sub(j.start) as f64 / 1e6);
        k.syscalls.push(j.syscalls as f64);
        k.page_faults.push(j.faults as f64);
        for c in 0..3 {
            k.pages[c].push(j.pages[c] as f64);
        }
        k.context_switches.push(j.switches as f64);
        k.tlb_flushes.push(j.tlb_flushes as f64);
        for (nr, n) in j.sys_by_nr {
            let name = self
                .sys_names
                .get(&nr)
                .cloned()
                .unwrap_or_else(|| format!("nr{nr}"));
            *k.syscall_mix.entry(name).or_default() += n;
        }
    }
}

/// Derives a profile from one or more traces (each read as a stream).
pub fn derive(files: &[PathBuf]) -> Result<Profile> {
    let mut prof = Profile::default();
    for f in files {
        let mut r = format::open(f)?;
        let mut d = Deriver {
            tasks: HashMap::new(),
            jobs: HashMap::new(),
            next_job: 0,
            prof: std::mem::take(&mut prof),
            sys_names: HashMap::new(),
        };
        let mut last = 0;
        while let Some(e) = r.next() {
            let e = e?;
            if let Op::SysEnter { nr, .. } = e.op {
                if let (std::collections::hash_map::Entry::Vacant(v), Some(n)) =
                    (d.sys_names.entry(nr), r.syscall_name(nr))
                {
                    v.insert(n.to_string());
                }
            }
            last = e.time_ns;
            d.add(&e);
        }
        // Jobs still running when the recording ended are finished at its end.
        let mut open: Vec<usize> = d.jobs.keys().copied().collect();
        open.sort_unstable();
        for id in open {
            if let Some(j) = d.jobs.get_mut(&id) {
                j.live = 1;
            }
            d.leave(id, last);
        }
        prof = d.prof;
        prof.total_wall_ms += last as f64 / 1e6;
        prof.metas.push(r.meta().clone());
    }
    if prof.kinds.values().all(|k| k.processes.is_empty()) {
        return Err(Error::new(format!(
            "trace profile: no make jobs found in {} (a job is a process forked by make)",
            files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(prof)
}

/// mean, p10, p50, p90, max of `v` (nearest-rank percentiles).
pub fn summary(v: &[f64]) -> [f64; 5] {
    if v.is_empty() {
        return [0.0; 5];
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| s[(((p / 100.0) * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1];
    [
        s.iter().sum::<f64>() / s.len() as f64,
        pct(10.0),
        pct(50.0),
        pct(90.0),
        s[s.len() - 1],
    ]
}

fn num(x: f64) -> String {
    if x == x.round() && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.3}")
    }
}

impl Profile {
    /// The profile as TOML (numbers only; the commands go in as comments by the caller).
    pub fn to_toml(&self, name: &str, notes: &[String]) -> String {
        let mut o = String::new();
        for n in notes {
            let _ = writeln!(o, "# {n}");
        }
        let _ = writeln!(o, "# Workload profile '{name}', derived by `kharden trace profile` from {} recorded trace(s).", self.metas.len());
        for m in &self.metas {
            let _ = writeln!(
                o,
                "# recorded: `{}` on kernel {}, {} CPUs, perf {}",
                m.command.join(" "),
                m.kernel,
                m.nr_cpus,
                m.perf_version
            );
        }
        let _ = writeln!(
            o,
            "# Distributions are per job: [mean, p10, p50, p90, max] (nearest-rank percentiles)."
        );
        let _ = writeln!(
            o,
            "# pages_* are 4 KiB pages allocated in the job's context, by GFP class (FORMAT.md)."
        );
        let _ = writeln!(o);
        let _ = writeln!(o, "[{name}]");
        let _ = writeln!(o, "wall_ms = {}", num(self.total_wall_ms));
        let _ = writeln!(o, "make_processes = {}", self.make_processes);
        let _ = writeln!(o, "make_cpu_ms = {}", num(self.make_cpu_ms));
        let _ = writeln!(o, "lost_events = {}", self.lost_events);
        let total: usize = self.kinds.values().map(|k| k.processes.len()).sum();
        let _ = writeln!(o, "job_count = {total}");
        for (kind, k) in &self.kinds {
            let _ = writeln!(o);
            let _ = writeln!(o, "[{name}.jobs.{kind}]");
            let _ = writeln!(o, "count = {}", k.processes.len());
            let _ = writeln!(
                o,
                "share = {}",
                num(k.processes.len() as f64 / total.max(1) as f64)
            );
            let rows: [(&str, &[f64]); 11] = [
                ("processes", &k.processes),
                ("cpu_ms", &k.cpu_ms),
                ("wall_ms", &k.wall_ms),
                ("syscalls", &k.syscalls),
                ("page_faults", &k.page_faults),
                (
                    "pages_user_anon",
                    &k.pages[GfpClass::UserAnon.code() as usize],
                ),
                (
                    "pages_page_cache",
                    &k.pages[GfpClass::PageCache.code() as usize],
                ),
                ("pages_kernel", &k.pages[GfpClass::Kernel.code() as usize]),
                ("context_switches", &k.context_switches),
                ("tlb_flushes", &k.tlb_flushes),
                ("", &[]),
            ];
            for (label, v) in rows.iter().filter(|(l, _)| !l.is_empty()) {
                let s = summary(v);
                let _ = writeln!(
                    o,
                    "{label} = [{}]",
                    s.iter().map(|x| num(*x)).collect::<Vec<_>>().join(", ")
                );
            }
            let all: u64 = k.syscall_mix.values().sum();
            if all > 0 {
                let _ = writeln!(o);
                let _ = writeln!(o, "# Fraction of the kind's syscalls, the 15 most frequent; the rest are 'other'.");
                let _ = writeln!(o, "[{name}.jobs.{kind}.syscall_mix]");
                let mut mix: Vec<(&String, &u64)> = k.syscall_mix.iter().collect();
                mix.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
                let mut rest = all;
                for (n, c) in mix.iter().take(15) {
                    let _ = writeln!(o, "{n} = {:.4}", **c as f64 / all as f64);
                    rest -= **c;
                }
                let _ = writeln!(o, "other = {:.4}", rest as f64 / all as f64);
            }
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Meta, TraceWriter};
    use std::sync::Arc;

    #[test]
    fn jobs_are_children_of_make() {
        let s = |x: &str| -> Arc<str> { Arc::from(x) };
        let ev = |t, tid, op| Event {
            time_ns: t,
            tid,
            op,
        };
        let events = vec![
            ev(
                0,
                1,
                Op::TaskNew {
                    pid: 1,
                    parent: None,
                    comm: s("perf-exec"),
                },
            ),
            ev(
                1,
                1,
                Op::Exec {
                    filename: s("/usr/bin/make"),
                },
            ),
            // job 1: sh -> gcc -> cc1
            ev(
                2,
                2,
                Op::TaskNew {
                    pid: 2,
                    parent: Some(1),
                    comm: s("make"),
                },
            ),
            ev(
                3,
                2,
                Op::Exec {
                    filename: s("/bin/sh"),
                },
            ),
            ev(
                4,
                3,
                Op::TaskNew {
                    pid: 3,
                    parent: Some(2),
                    comm: s("sh"),
                },
            ),
            ev(
                5,
                3,
                Op::Exec {
                    filename: s("/usr/lib/gcc/x86_64-linux-gnu/12/cc1"),
                },
            ),
            ev(6, 3, Op::SwitchIn { cpu: 0 }),
            ev(7, 3, Op::sys_enter(0)),
            ev(
                8,
                3,
                Op::PageAlloc {
                    pfn: 1,
                    order: 1,
                    gfp: 0,
                    class: GfpClass::UserAnon,
                },
            ),
            ev(1_000_006, 3, Op::SwitchOut { state: 0x10 }),
            ev(1_000_006, 3, Op::Exit),
            ev(1_000_007, 2, Op::Exit),
            // a sub-make: not a job; its child is
            ev(
                10,
                4,
                Op::TaskNew {
                    pid: 4,
                    parent: Some(1),
                    comm: s("make"),
                },
            ),
            ev(
                11,
                4,
                Op::Exec {
                    filename: s("/usr/bin/make"),
                },
            ),
            ev(
                12,
                5,
                Op::TaskNew {
                    pid: 5,
                    parent: Some(4),
                    comm: s("make"),
                },
            ),
            ev(
                13,
                5,
                Op::Exec {
                    filename: s("/usr/bin/ar"),
                },
            ),
            ev(14, 5, Op::Exit),
            ev(15, 4, Op::Exit),
        ];
        let mut events = events;
        events.sort_by_key(|e| e.time_ns);
        let path =
            std::env::temp_dir().join(format!("kharden-profile-test-{}.trace", std::process::id()));
        let mut w =
            TraceWriter::new(std::fs::File::create(&path).unwrap(), &Meta::default()).unwrap();
        w.set_syscall_name(0, "read");
        for e in &events {
            w.write(e).unwrap();
        }
        w.finish().unwrap();
        let p = derive(std::slice::from_ref(&path)).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(p.make_processes, 2);
        let c = &p.kinds["compile"];
        assert_eq!(c.processes, vec![2.0]);
        assert_eq!(c.syscalls, vec![1.0]);
        assert_eq!(c.pages[0], vec![2.0]);
        assert!((c.cpu_ms[0] - 1.0).abs() < 1e-9);
        assert_eq!(p.kinds["link"].processes, vec![1.0]);
        let toml_text = p.to_toml("kbuild", &[]);
        assert!(toml_text.contains("[kbuild.jobs.compile]"));
        assert!(toml_text.contains("read = 1.0000"));
        let parsed: toml::Value = toml::from_str(&toml_text).unwrap();
        assert_eq!(parsed["kbuild"]["job_count"].as_integer(), Some(2));
    }

    #[test]
    fn summary_uses_nearest_rank() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(summary(&v), [5.5, 1.0, 5.0, 9.0, 10.0]);
        assert_eq!(summary(&[]), [0.0; 5]);
    }
}
