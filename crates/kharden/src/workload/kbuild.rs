//! The kbuild workload: `make -jN` running compile jobs. A job is a shell that runs its
//! processes one after another (gcc driver, cc1, as, ...), each of which execs, computes,
//! faults in its heap, reads headers and sources through the page cache, writes its output
//! and exits. Per-job totals come from a recorded profile (workloads/kbuild.toml); this file
//! only spreads them over each process's life at constant rates.

use super::program::Op;
use crate::kernel::syscall::{self, SyscallSpec};
use crate::sim::Pcg32;
use std::collections::VecDeque;
use std::sync::Arc;

/// User work between two other events of a process: ~20 µs at 3 GHz, short enough that
/// interrupts landing "inside" an operation are placed accurately.
pub const CHUNK_CYCLES: f64 = 60_000.0;

/// What one compile job does, in totals per job.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// Share of the job's work done by each of its processes, in order.
    pub process_shares: Vec<f64>,
    pub user_cycles: f64,
    pub anon_faults: f64,
    /// Pages copied out by read() and how many of them were page-cache misses.
    pub read_pages: f64,
    pub read_misses: f64,
    pub write_pages: f64,
    /// System calls not modelled by the paths above, and the kernel work each carries beyond
    /// the table's lseek path (calibrated, see kbuild_profile.rs).
    pub other_syscalls: f64,
    pub other_syscall_extra_cycles: f64,
    /// Heap pages touched per chunk of user work.
    pub touches_per_chunk: u32,
}

/// A task's program.
pub enum Program {
    Make(Make),
    Job(Job),
    Process(Process),
    /// Operations streamed from a source (trace replay).
    Stream(Box<dyn super::program::OpSource>),
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Program::Stream(s) => write!(f, "Stream({})", s.name()),
            Program::Make(m) => m.fmt(f),
            Program::Job(j) => j.fmt(f),
            Program::Process(p) => p.fmt(f),
        }
    }
}

impl Program {
    pub fn name(&self) -> &str {
        match self {
            Program::Make(_) => "make",
            Program::Job(_) => "sh",
            Program::Process(_) => "cc",
            Program::Stream(s) => s.name(),
        }
    }

    pub fn next(&mut self, rng: &mut Pcg32) -> Op {
        match self {
            Program::Make(m) => m.next(rng),
            Program::Job(j) => j.next(),
            Program::Process(p) => p.next(),
            Program::Stream(s) => s.next(),
        }
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
    pub fn program(spec: JobSpec, jobs: u32, total: u64) -> Program {
        Program::Make(Make {
            spec: Arc::new(spec),
            limit: jobs.max(1),
            total,
            started: 0,
            running: 0,
            waited: false,
        })
    }

    fn next(&mut self, rng: &mut Pcg32) -> Op {
        if std::mem::take(&mut self.waited) {
            self.running -= 1;
        }
        if self.running < self.limit && self.started < self.total {
            // The first N jobs start at random points of their lives, so a measured window
            // sees a steady state rather than N jobs all starting at once.
            let phase = if self.started < self.limit as u64 {
                rng.unit()
            } else {
                0.0
            };
            self.started += 1;
            self.running += 1;
            return Op::Fork(Box::new(Program::Job(Job::new(self.spec.clone(), phase))));
        }
        if self.running > 0 {
            self.waited = true;
            return Op::WaitChild;
        }
        Op::Exit
    }
}

/// The shell of one job: runs the job's processes in turn.
#[derive(Debug)]
pub struct Job {
    spec: Arc<JobSpec>,
    next_process: usize,
    /// Fraction of the first process already done (non-zero for jobs started mid-life).
    first_done: f64,
    step: JobStep,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JobStep {
    Exec,
    Fork,
    Wait,
}

impl Job {
    fn new(spec: Arc<JobSpec>, phase: f64) -> Job {
        // Find the process the phase falls in, and how far into it.
        let shares = &spec.process_shares;
        let mut acc = 0.0;
        let (mut next_process, mut first_done) = (shares.len() - 1, 0.0);
        for (i, &share) in shares.iter().enumerate() {
            if phase < acc + share {
                next_process = i;
                first_done = ((phase - acc) / share).clamp(0.0, 1.0);
                break;
            }
            acc += share;
        }
        let step = if phase > 0.0 {
            JobStep::Fork
        } else {
            JobStep::Exec
        };
        Job {
            spec,
            next_process,
            first_done,
            step,
        }
    }

    fn next(&mut self) -> Op {
        match self.step {
            JobStep::Exec => {
                self.step = JobStep::Fork;
                Op::Exec
            }
            JobStep::Fork if self.next_process < self.spec.process_shares.len() => {
                let done = std::mem::take(&mut self.first_done);
                self.step = JobStep::Wait;
                Op::Fork(Box::new(Program::Process(Process::new(
                    self.spec.clone(),
                    self.next_process,
                    done,
                ))))
            }
            JobStep::Fork => Op::Exit,
            JobStep::Wait => {
                self.next_process += 1;
                self.step = JobStep::Fork;
                Op::WaitChild
            }
        }
    }
}

/// One process of a job: exec, then chunks of user work with its share of the job's
/// kernel events spread evenly between them, then exit.
#[derive(Debug)]
pub struct Process {
    spec: Arc<JobSpec>,
    share: f64,
    chunks: u64,
    chunk: u64,
    execed: bool,
    /// Heap pages to fault in at once when starting mid-life (the part already lived).
    prefault: u32,
    /// Fractional events carried from chunk to chunk: faults, read pages, read misses,
    /// written pages, other syscalls.
    carry: [f64; 5],
    pending: VecDeque<Op>,
}

/// The syscall that stands for the "other" syscalls of a build (stat/open/close-like
/// file-system calls); lseek is the cheapest such path in the table.
fn other_syscall() -> &'static SyscallSpec {
    syscall::lookup("lseek").expect("lseek is in the syscall table")
}

impl Process {
    fn new(spec: Arc<JobSpec>, index: usize, done: f64) -> Process {
        let share = spec.process_shares[index];
        let chunks = ((spec.user_cycles * share) / CHUNK_CYCLES).ceil().max(1.0) as u64;
        let chunk = ((done * chunks as f64).floor() as u64).min(chunks);
        let prefault = (spec.anon_faults * share * done).round() as u32;
        Process {
            spec,
            share,
            chunks,
            chunk,
            execed: done > 0.0,
            prefault,
            carry: [0.0; 5],
            pending: VecDeque::new(),
        }
    }

    fn next(&mut self) -> Op {
        if !self.execed {
            self.execed = true;
            return Op::Exec;
        }
        if let Some(op) = self.pending.pop_front() {
            return op;
        }
        if self.prefault > 0 {
            return Op::Prefault(std::mem::take(&mut self.prefault));
        }
        if self.chunk >= self.chunks {
            return Op::Exit;
        }
        self.chunk += 1;
        let per_chunk = self.share / self.chunks as f64;
        let s = &self.spec;
        let rates = [
            s.anon_faults,
            s.read_pages,
            s.read_misses,
            s.write_pages,
            s.other_syscalls,
        ];
        let mut counts = [0u32; 5];
        for i in 0..5 {
            self.carry[i] += rates[i] * per_chunk;
            counts[i] = self.carry[i].floor() as u32;
            self.carry[i] -= counts[i] as f64;
        }
        let [faults, reads, misses, writes, syscalls] = counts;
        if faults > 0 {
            self.pending.push_back(Op::AnonFaults(faults));
        }
        if reads > 0 {
            self.pending.push_back(Op::FileRead {
                pages: reads,
                misses: misses.min(reads),
            });
        }
        if writes > 0 {
            self.pending.push_back(Op::FileWrite { pages: writes });
        }
        if syscalls > 0 {
            self.pending.push_back(Op::Syscall {
                spec: other_syscall(),
                count: syscalls,
                extra_cycles: s.other_syscall_extra_cycles,
                effect: None,
            });
        }
        Op::User {
            cycles: s.user_cycles * per_chunk,
            touches: s.touches_per_chunk,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::Kernel;
    use crate::sim::{Counter, Time, TimeCategory};
    use crate::workload::run::Runner;
    use crate::{defense, machine};

    pub(crate) fn small_spec() -> JobSpec {
        JobSpec {
            process_shares: vec![0.05, 0.8, 0.15],
            user_cycles: 3.0e6,
            anon_faults: 60.0,
            read_pages: 20.0,
            read_misses: 2.0,
            write_pages: 4.0,
            other_syscalls: 30.0,
            other_syscall_extra_cycles: 0.0,
            touches_per_chunk: 20,
        }
    }

    #[test]
    fn a_small_build_runs_every_job_to_completion() {
        let m = machine::load("ivybridge-i5-3550").unwrap();
        let k = Kernel::boot(m, defense::parse_list("none").unwrap());
        let mut r = Runner::new(k, Make::program(small_spec(), 4, 12), 7);
        let w = r.run(Time::ZERO, Time(10_000_000_000_000)).unwrap();
        let s = &w.tasks;
        // make forks 12 shells; each shell forks its 3 processes, except that the first 4
        // jobs start mid-life and skip the processes already done.
        let forks = s.counter(Counter::Forks);
        assert!((12 + 8 * 3 + 4..=12 + 12 * 3).contains(&forks), "{forks}");
        let execs = s.counter(Counter::Execs);
        assert!(
            (forks - 8..=forks - 4).contains(&execs),
            "mid-life shells and processes do not exec again: {execs} of {forks}"
        );
        assert!(
            s.counter(Counter::PageFaults) >= 8 * 59,
            "{}",
            s.counter(Counter::PageFaults)
        );
        assert!(s.time(TimeCategory::User).secs() > 0.0 && s.system_time() > Time::ZERO);
        assert!(r
            .k
            .tasks
            .iter()
            .all(|t| t.state == crate::kernel::sched::TaskState::Dead));
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
                    w.tasks.counter(Counter::XpfoFlushes),
                    w.tasks.counter(Counter::NrTlbRemoteFlush),
                    w.tasks.counter(Counter::DirectMapSplits),
                    r.k.violations.len()
                );
                assert!(
                    r.k.violations.is_empty(),
                    "{m} {d}: {:?}",
                    r.k.violations.first()
                );
                sys.push(w.tasks.system_time());
            }
            assert!(sys[0] < sys[2] && sys[2] < sys[1], "{m}: {sys:?}");
        }
    }
}
