//! The kbuild workload: `make -jN` running compile jobs. A job is a tree of processes as
//! kbuild runs them: make's `sh -c` runs gcc, objtool, fixdep and rm in turn, and gcc's
//! driver runs cc1 and as. Each process execs, does its own share of the job's work (user work,
//! heap faults, headers and sources read through the page cache, output written), then runs
//! its children one after another (fork, wait), then exits. Per-job totals come from a
//! recorded profile (workloads/kbuild-job.toml); this file only spreads them over each
//! process's life at constant rates.

use super::program::{Op, Program};
use crate::kernel::paths::entry::UserL1Lines;
use crate::kernel::paths::process::PageCacheFs;
use crate::kernel::paths::syscall::SyscallSpec;
use crate::sim::Pcg32;
use std::collections::VecDeque;
use std::sync::Arc;

/// User work between two other events of a process: ~20 µs at 3 GHz, short enough that
/// interrupts landing "inside" an operation are placed accurately.
pub const CHUNK_CYCLES: f64 = 60_000.0;

/// One process of a compile job (a `[[process]]` table of workloads/kbuild-job.toml).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessSpec {
    pub name: String,
    /// Share of the job's work this process does itself.
    pub share: f64,
    /// The process that runs it (an index into the job's processes); `None` for the job's
    /// shell, which make starts.
    pub parent: Option<usize>,
}

/// What one compile job does, in totals per job.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// The job's processes in the order they run (a parent before its children, siblings in
    /// turn); the first is the shell.
    pub processes: Vec<ProcessSpec>,
    pub user_cycles: f64,
    pub anon_faults: f64,
    /// Read faults on file mappings (executables, mapped headers) served from the page cache.
    pub file_faults: f64,
    /// Reads of anonymous pages not yet mapped, which map the shared zero page.
    pub zero_page_faults: f64,
    /// Pages copied out by read() and how many of them were page-cache misses.
    pub read_pages: f64,
    pub read_misses: f64,
    pub write_pages: f64,
    /// The other system calls: each with its recorded kernel path, and how many per job.
    pub syscall_mix: Vec<(SyscallSpec, f64)>,
    /// Heap pages touched per chunk of user work.
    pub touches_per_chunk: u32,
    /// L1 lines the user code brings in per cycle of its work (its L1 miss rates).
    pub user_l1_lines_per_cycle: UserL1Lines,
}

impl JobSpec {
    fn children(&self, parent: usize) -> VecDeque<usize> {
        (0..self.processes.len())
            .filter(|&i| self.processes[i].parent == Some(parent))
            .collect()
    }

    /// Whether `process` is `ancestor` or runs below it.
    fn runs_under(&self, mut process: usize, ancestor: usize) -> bool {
        loop {
            if process == ancestor {
                return true;
            }
            match self.processes[process].parent {
                Some(p) => process = p,
                None => return false,
            }
        }
    }
}

impl Program for Make {
    fn next(&mut self, rng: &mut Pcg32) -> Op {
        self.step(rng)
    }
    fn name(&self) -> &str {
        "make"
    }
}

impl Program for Process {
    fn next(&mut self, _rng: &mut Pcg32) -> Op {
        self.step()
    }
    fn name(&self) -> &str {
        &self.spec.processes[self.index].name
    }
}

/// make -jN: keeps N jobs running until `total` have been started.
#[derive(Debug)]
pub struct Make {
    spec: Arc<JobSpec>,
    limit: u32,
    total: u64,
    started: u64,
    running: u32,
    waited: bool,
}

impl Make {
    /// The program of a make -j`jobs` that starts `total` jobs of `spec`.
    pub fn program(spec: JobSpec, jobs: u32, total: u64) -> Box<dyn Program> {
        Box::new(Make {
            spec: Arc::new(spec),
            limit: jobs.max(1),
            total,
            started: 0,
            running: 0,
            waited: false,
        })
    }

    fn step(&mut self, rng: &mut Pcg32) -> Op {
        if std::mem::take(&mut self.waited) {
            self.running -= 1;
        }
        if self.running < self.limit && self.started < self.total {
            // The first N jobs start at random points of their lives, so a measured window
            // sees a steady state rather than N jobs all starting at once; their forks are
            // history (make forked them long before the window).
            let first = self.started < self.limit as u64;
            let phase = if first { rng.unit() } else { 0.0 };
            self.started += 1;
            self.running += 1;
            let start = Op::Vfork(Box::new(Process::job(self.spec.clone(), phase)));
            return if first {
                Op::History(Box::new(start))
            } else {
                start
            };
        }
        if self.running > 0 {
            self.waited = true;
            return Op::WaitChild;
        }
        Op::Exit
    }
}

/// One process of a job: exec, then chunks of user work with its share of the job's
/// kernel events spread evenly between them, then its children in turn, then exit.
#[derive(Debug)]
pub struct Process {
    spec: Arc<JobSpec>,
    index: usize,
    share: f64,
    chunks: u64,
    chunk: u64,
    execed: bool,
    /// Heap pages to fault in at once when starting mid-life (the part already lived).
    prefault: u32,
    /// Fractional events carried from chunk to chunk: anonymous faults, file faults, read
    /// pages, read misses, written pages.
    carry: [f64; 6],
    /// The same for each syscall of the mix.
    mix_carry: Vec<f64>,
    pending: VecDeque<Op>,
    /// Children still to run, in order, and whether the last one forked is still owed a wait.
    children: VecDeque<usize>,
    wait_owed: bool,
    /// For a job started mid-life: the process its life had reached and how far into it.
    resume: Option<(usize, f64)>,
}

impl Process {
    /// The job's shell, started at `phase` (0 to 1) of the job's life: the processes that
    /// ran before that point are over, the ones running it are part-way through.
    fn job(spec: Arc<JobSpec>, phase: f64) -> Process {
        let shares = spec.processes.iter().map(|p| p.share);
        let mut resume = (spec.processes.len() - 1, 1.0);
        let mut acc = 0.0;
        for (i, share) in shares.enumerate() {
            if phase < acc + share {
                resume = (i, ((phase - acc) / share).clamp(0.0, 1.0));
                break;
            }
            acc += share;
        }
        Process::new(spec, 0, Some(resume))
    }

    fn new(spec: Arc<JobSpec>, index: usize, resume: Option<(usize, f64)>) -> Process {
        let share = spec.processes[index].share;
        let mut children = spec.children(index);
        // Starting mid-life: this process's own work is done if the job had got below it,
        // and so are the children before the one the job had reached.
        let (done, resume) = match resume {
            Some((at, done)) if at == index => (done, None),
            Some((at, _)) => {
                while children.front().is_some_and(|&c| !spec.runs_under(at, c)) {
                    children.pop_front();
                }
                (1.0, resume)
            }
            None => (0.0, None),
        };
        let chunks = ((spec.user_cycles * share) / CHUNK_CYCLES).ceil().max(1.0) as u64;
        let chunk = ((done * chunks as f64).floor() as u64).min(chunks);
        let prefault = (spec.anon_faults * share * done).round() as u32;
        let mix_carry = vec![0.0; spec.syscall_mix.len()];
        Process {
            mix_carry,
            spec,
            index,
            share,
            chunks,
            chunk,
            execed: done > 0.0,
            prefault,
            carry: [0.0; 6],
            pending: VecDeque::new(),
            children,
            wait_owed: false,
            resume,
        }
    }

    fn step(&mut self) -> Op {
        if !self.execed {
            self.execed = true;
            return Op::Exec;
        }
        if let Some(op) = self.pending.pop_front() {
            return op;
        }
        if self.prefault > 0 {
            let faults = Op::AnonFaults(std::mem::take(&mut self.prefault));
            return Op::History(Box::new(faults));
        }
        if self.chunk < self.chunks {
            return self.next_chunk();
        }
        if std::mem::take(&mut self.wait_owed) {
            return Op::WaitChild;
        }
        match self.children.pop_front() {
            Some(child) => {
                // Forking the way down to where a mid-life job had got is history too.
                let resume = self.resume.take();
                self.wait_owed = true;
                let start = Op::Vfork(Box::new(Process::new(self.spec.clone(), child, resume)));
                if resume.is_some() {
                    Op::History(Box::new(start))
                } else {
                    start
                }
            }
            None => Op::Exit,
        }
    }

    /// The next chunk of user work, with the kernel events due by then queued behind it.
    fn next_chunk(&mut self) -> Op {
        self.chunk += 1;
        let per_chunk = self.share / self.chunks as f64;
        let s = &self.spec;
        let rates = [
            s.anon_faults,
            s.file_faults,
            s.zero_page_faults,
            s.read_pages,
            s.read_misses,
            s.write_pages,
        ];
        let mut counts = [0u32; 6];
        for i in 0..rates.len() {
            counts[i] = take_whole(&mut self.carry[i], rates[i] * per_chunk);
        }
        let [faults, file_faults, zero_page_faults, reads, misses, writes] = counts;
        if faults > 0 {
            self.pending.push_back(Op::AnonFaults(faults));
        }
        if file_faults > 0 {
            self.pending.push_back(Op::FileFaults(file_faults));
        }
        if zero_page_faults > 0 {
            self.pending.push_back(Op::ZeroPageFaults(zero_page_faults));
        }
        if reads > 0 {
            self.pending.push_back(Op::FileRead {
                fs: PageCacheFs::Disk,
                pages: reads,
                misses: misses.min(reads),
            });
        }
        if writes > 0 {
            self.pending.push_back(Op::FileWrite {
                fs: PageCacheFs::Disk,
                pages: writes,
                new_pages: writes,
            });
        }
        for (i, &(spec, per_job)) in s.syscall_mix.iter().enumerate() {
            let count = take_whole(&mut self.mix_carry[i], per_job * per_chunk);
            if count > 0 {
                self.pending.push_back(Op::Syscall {
                    spec,
                    count,
                    extra_cycles: 0.0,
                    effect: None,
                });
            }
        }
        let cycles = s.user_cycles * per_chunk;
        Op::User {
            cycles,
            touches: s.touches_per_chunk,
            l1_lines: s.user_l1_lines_per_cycle.scaled(cycles),
        }
    }
}

/// Adds `due` to `carry` and takes out the whole events it holds.
fn take_whole(carry: &mut f64, due: f64) -> u32 {
    *carry += due;
    let whole = carry.floor();
    *carry -= whole;
    whole as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::Kernel;
    use crate::sim::{Counter, Time, TimeCategory};
    use crate::workload::run::Runner;
    use crate::{defense, machine};

    pub(crate) fn small_spec() -> JobSpec {
        let process = |name: &str, share: f64, parent: Option<usize>| ProcessSpec {
            name: name.into(),
            share,
            parent,
        };
        JobSpec {
            processes: vec![
                process("sh", 0.05, None),
                process("gcc", 0.05, Some(0)),
                process("cc1", 0.75, Some(1)),
                process("as", 0.15, Some(1)),
            ],
            user_cycles: 3.0e6,
            anon_faults: 60.0,
            file_faults: 6.0,
            zero_page_faults: 4.0,
            read_pages: 20.0,
            read_misses: 2.0,
            write_pages: 4.0,
            syscall_mix: vec![(
                // The tests' kernels boot on the committed recording.
                crate::kernel::paths::syscall::lookup(
                    &crate::kernel::paths::recording::Recording::committed().paths,
                    "lseek",
                )
                .unwrap(),
                30.0,
            )],
            touches_per_chunk: 20,
            user_l1_lines_per_cycle: Default::default(),
        }
    }

    #[test]
    fn a_small_build_runs_every_job_to_completion() {
        let m = machine::load("ivybridge-i5-3550").unwrap();
        let k = Kernel::boot(m, defense::parse_list("none").unwrap());
        let mut r = Runner::new(k, Make::program(small_spec(), 4, 12), 7);
        let w = r.run(Time::ZERO, Time(10_000_000_000_000)).unwrap();
        let s = &w.tasks;
        // make forks 12 shells; each shell's tree forks 3 more processes, except that the
        // first 4 jobs start mid-life and skip the processes already over.
        let forks = s.counter(Counter::Forks);
        assert!((12 + 8 * 3..=12 + 12 * 3).contains(&forks), "{forks}");
        // A job started mid-life has 1 to 3 processes (the shell, gcc, cc1 or as) already
        // running that do not exec again.
        let execs = s.counter(Counter::Execs);
        assert!(
            (forks - 12..=forks - 4).contains(&execs),
            "mid-life processes do not exec again: {execs} of {forks}"
        );
        // 60 anonymous and 6 file faults per job, for at least the 8 jobs run from the start.
        assert!(
            s.counter(Counter::PageFaults) >= 8 * 65,
            "{}",
            s.counter(Counter::PageFaults)
        );
        assert!(s.time(TimeCategory::User).secs() > 0.0 && s.system_time() > Time::ZERO);
        // A busy CPU takes a timer interrupt per 4 ms tick (HZ=250) it passes.
        let busy = s.time(TimeCategory::User) + s.system_time();
        let ticks = s.counter(Counter::TimerTicks) as f64;
        let expected = busy.secs() / 4e-3;
        assert!(
            ticks >= 1.0 && (ticks - expected).abs() <= 4.0 + 0.1 * expected,
            "{ticks} ticks, {expected} expected"
        );
        // The system time is split by operation without loss, file faults included.
        let by_op = &w.kernel_by_op;
        let split = by_op.values().fold(Time::ZERO, |a, &t| a + t);
        assert_eq!(split, s.system_time(), "{by_op:?}");
        for op in [
            "fault-anon",
            "fault-file",
            "execve",
            "fork",
            "exit",
            "lseek",
            "read",
            "write",
        ] {
            assert!(
                by_op.get(op).is_some_and(|&t| t > Time::ZERO),
                "{op}: {by_op:?}"
            );
        }
        let tasks = &r.k.tasks;
        assert!(tasks
            .iter()
            .all(|t| t.state == crate::kernel::sched::scheduler::TaskState::Dead));
        // The tree: make runs the shells, a shell runs gcc, gcc runs cc1 and as.
        let parent_of = |name: &str| -> Vec<&str> {
            let mut p: Vec<&str> = tasks
                .iter()
                .filter(|t| t.name == name)
                .map(|t| tasks[t.parent.unwrap()].name.as_str())
                .collect();
            p.dedup();
            p
        };
        assert_eq!(parent_of("sh"), ["make"]);
        assert_eq!(parent_of("gcc"), ["sh"]);
        assert_eq!(parent_of("cc1"), ["gcc"]);
        assert_eq!(parent_of("as"), ["gcc"]);
    }

    #[test]
    fn user_code_displaces_the_kernel_from_the_l1s_between_entries() {
        let build = |l1: UserL1Lines| {
            let m = machine::load("ivybridge-i5-3550").unwrap();
            let k = Kernel::boot(m, defense::parse_list("none").unwrap());
            let mut spec = small_spec();
            spec.user_l1_lines_per_cycle = l1;
            let mut r = Runner::new(k, Make::program(spec, 2, 4), 7);
            let w = r.run(Time::ZERO, Time(10_000_000_000_000)).unwrap();
            (
                w.tasks.counter(Counter::KernelLineL1Misses),
                w.tasks.system_time(),
            )
        };
        let (quiet_misses, quiet_time) = build(UserL1Lines::default());
        // The shipped job's rates: a chunk brings in more lines than an L1 holds.
        let (misses, time) = build(UserL1Lines {
            instruction: 0.032,
            data: 0.021,
        });
        // (Long paths such as a fault's overflow the L1 anyway: the rise is the lines a
        // short path found still there.)
        assert!(
            misses > quiet_misses + quiet_misses / 10,
            "kernel L1 misses {misses} against {quiet_misses} without user lines"
        );
        assert!(time > quiet_time, "{time:?} <= {quiet_time:?}");
    }

    #[test]
    fn a_job_started_mid_life_resumes_inside_its_tree() {
        let spec = Arc::new(small_spec());
        // 0.05 + 0.05 + 0.75 + 0.075: half-way through as, which gcc runs after cc1.
        let mut sh = Process::job(spec.clone(), 0.925);
        let mut rng = Pcg32::new(1, 1);
        let mut ops = vec![];
        let mut op: Box<dyn Program> = Box::new(std::mem::replace(
            &mut sh,
            Process::new(spec.clone(), 0, None),
        ));
        // The shell has lived its own part (prefault) and forks gcc at once; gcc, too,
        // forks as at once (cc1 is over); as prefaults half its heap and computes. All of
        // that happened before the simulation: it comes as history.
        for _ in 0..2 {
            let mut next = op.next(&mut rng);
            if let Op::History(h) = &next {
                if let Op::AnonFaults(n) = **h {
                    ops.push(format!("prefault {n}"));
                    next = op.next(&mut rng);
                }
            }
            match next {
                Op::History(h) => match *h {
                    Op::Vfork(child) => {
                        ops.push(format!("fork {}", child.name()));
                        op = child;
                    }
                    other => panic!("expected a fork, got {other:?}"),
                },
                other => panic!("expected a fork in history, got {other:?}"),
            }
        }
        match op.next(&mut rng) {
            Op::History(h) => match *h {
                Op::AnonFaults(n) => ops.push(format!("prefault {n}")),
                other => panic!("expected as's prefault, got {other:?}"),
            },
            other => panic!("expected as's prefault, got {other:?}"),
        }
        assert!(matches!(op.next(&mut rng), Op::User { .. }));
        assert_eq!(
            ops,
            [
                "prefault 3",
                "fork gcc",
                "prefault 3",
                "fork as",
                "prefault 5"
            ]
        );
    }
}

#[cfg(test)]
mod xpfo_smoke {
    use super::tests::small_spec;
    use super::*;
    use crate::kernel::Kernel;
    use crate::sim::{Counter, Time};
    use crate::workload::run::Runner;
    use crate::{defense, machine};

    #[test]
    fn xpfo_policies_cost_in_order() {
        for m in ["ivybridge-i5-3550", "xeon-platinum-8160"] {
            let mut sys = vec![];
            for d in ["none", "xpfo:immediate", "xpfo:deferred"] {
                let k = Kernel::boot(machine::load(m).unwrap(), defense::parse_list(d).unwrap());
                let jobs = if m.starts_with("xeon") { 60 } else { 4 };
                let mut r = Runner::new(k, Make::program(small_spec(), jobs, 3 * jobs as u64), 7);
                let w = r.run(Time::ZERO, Time(10_000_000_000_000)).unwrap();
                eprintln!(
                    "{m} {d}: sys {:.6} s user {:.6} s flushes {} ipis {} splits {} violations {}",
                    w.tasks.system_time().secs(),
                    w.tasks.user_time().secs(),
                    w.tasks
                        .owned(crate::defense::registry::counter("xpfo_flushes")),
                    w.tasks.counter(Counter::NrTlbRemoteFlush),
                    w.tasks.counter(Counter::DirectMapSplits),
                    r.k.violations.len()
                );
                assert!(
                    r.k.violations.is_empty(),
                    "{m} {d}: {:?}",
                    r.k.violations.first()
                );
                if d == "xpfo:deferred" {
                    // Children inherit their parent's per-task mask (dup_task_struct copies it)
                    // and start on another CPU: the shell and gcc have faulted by then.
                    assert!(
                        w.tasks
                            .owned(crate::defense::registry::counter("xpfo_pending_executed"))
                            > 0,
                        "{m}"
                    );
                }
                sys.push(w.tasks.system_time());
            }
            assert!(sys[0] < sys[2] && sys[2] < sys[1], "{m}: {sys:?}");
        }
    }
}
