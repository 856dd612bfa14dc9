//! fio-randread: `fio --rw=randread --bs=4K --size=S` on a tmpfs file, the benchmark of the
//! ASI postings (github.com/bjackman/nixos-flake src/run-benchmark.sh: `--name=randread_tmpfs
//! --rw=randread --size=1G --blocksize=4K --directory=/tmp`, /tmp a tmpfs, fio's default
//! psync engine and one job). fio's main process forks one process per job; each job reads
//! 4 KiB at a random page of a file of its own (fio names a job's file after the job and
//! its number) with pread(), in a loop: fio's own user work, then the kernel's pread path
//! (the recorded pread64 footprint) and the copy of the page-cache page to the job's buffer.
//! Every page of the file is in the page cache (tmpfs); a page first read in the window
//! comes in as history, cold in the caches, as a page of a file far larger than the LLC
//! would be.

use super::program::{Op, Program};
use super::run::{Runner, Window};
use crate::defense::{self, Extension};
use crate::error::{Error, Result};
use crate::kernel::paths::entry::UserL1Lines;
use crate::kernel::{Kernel, OracleMode};
use crate::machine::MachineProfile;
use crate::params::{Decl, Params, Unit};
use crate::sim::{Counter, Pcg32, Time};

pub const PARAMS: &[Decl] = &[
    Decl::num(
        "workload.fio.user_cycles_per_io",
        Unit::Cycles,
        (0.0, 1e7),
        "fio's own user-mode work per 4 KiB read (offset, issue, completion and latency accounting)",
    ),
    Decl::num(
        "workload.fio.file_pages",
        Unit::Count,
        (1.0, 1e9),
        "4 KiB pages of each job's file (fio --size)",
    ),
];

/// One job: reads forever.
struct Job {
    name: String,
    file: u32,
    pages: u32,
    user_cycles: f64,
    /// The next operation is the read (else fio's own work).
    read_next: bool,
}

impl Program for Job {
    fn next(&mut self, rng: &mut Pcg32) -> Op {
        self.read_next = !self.read_next;
        if self.read_next {
            Op::Pread {
                file: self.file,
                page: rng.below(self.pages),
            }
        } else {
            Op::User {
                cycles: self.user_cycles,
                touches: 0,
                l1_lines: UserL1Lines::default(),
            }
        }
    }
    fn name(&self) -> &str {
        &self.name
    }
}

/// fio's main process: forks the jobs, then waits for them.
struct Main {
    jobs: Vec<Job>,
}

impl Program for Main {
    fn next(&mut self, _rng: &mut Pcg32) -> Op {
        match self.jobs.pop() {
            Some(job) => Op::Fork(Box::new(job)),
            None => Op::WaitChild,
        }
    }
    fn name(&self) -> &str {
        "fio"
    }
}

/// What a run measured.
#[derive(Clone)]
pub struct Measured {
    pub window: Window,
    /// Reads completed in the window, over every job.
    pub ios: u64,
    /// Reads per second, over every job.
    pub iops: f64,
}

/// `jobs` can run at once on `m`: fio's jobs are CPU bound, one per hardware thread at most.
pub fn check_jobs(m: &MachineProfile, jobs: u32) -> Result<()> {
    if jobs == 0 || jobs > m.threads() {
        return Err(Error::new(format!(
            "fio-randread: jobs: expected 1..{} (one per hardware thread of {}), got {jobs}",
            m.threads(),
            m.name
        )));
    }
    Ok(())
}

/// Simulates `jobs` fio jobs on `m` under `defenses`: a warm-up, then a measured window.
pub fn simulate(
    m: &MachineProfile,
    defenses: &str,
    extensions: &[Extension],
    jobs: u32,
    warmup_ms: f64,
    window_ms: f64,
    params: &Params,
) -> Result<Measured> {
    check_jobs(m, jobs)?;
    if !(warmup_ms >= 0.0 && window_ms > 0.0 && warmup_ms + window_ms <= 10_000.0) {
        return Err(Error::new(
            "fio-randread: expected 0 <= warmup_ms, 0 < window_ms, total at most 10000 ms",
        ));
    }
    let pages = params.num(PARAMS[1].path);
    let user_cycles = params.num(PARAMS[0].path);
    let jobs: Vec<Job> = (0..jobs)
        .rev()
        .map(|j| Job {
            name: format!("randread_tmpfs.{j}"),
            file: j,
            pages: pages.min(u32::MAX as f64) as u32,
            user_cycles,
            read_next: false,
        })
        .collect();
    let k = Kernel::boot_with(
        m.clone(),
        defense::parse_list_with(defenses, Some(m), extensions)?,
        params,
        OracleMode::default(),
    );
    let mut r = Runner::new(k, Box::new(Main { jobs }), 1);
    let ms = |v: f64| Time((v * 1e9) as u64);
    let window = r.run(ms(warmup_ms), ms(window_ms))?;
    if let Some(v) = r.k.violations.first() {
        return Err(Error::new(format!(
            "{defenses} on {}: security oracle violation: {}",
            m.name, v.what
        )));
    }
    let ios = window.tasks.counter(Counter::Syscalls);
    if ios == 0 {
        return Err(Error::new(format!(
            "fio-randread on {}: no read completed in the window; lengthen window_ms",
            m.name
        )));
    }
    let iops = ios as f64 / window.elapsed.secs();
    Ok(Measured { window, ios, iops })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defense::registry;

    fn run(defenses: &str, jobs: u32) -> Measured {
        let m = crate::machine::load("haswell-i7-4770").unwrap();
        simulate(&m, defenses, &[], jobs, 0.5, 1.0, &Params::linux()).unwrap()
    }

    /// Each read is one pread of a page-cache page of the job's own file: one syscall,
    /// one page copied, and the jobs, each on a CPU of its own, add up.
    #[test]
    fn jobs_read_their_own_files_in_parallel() {
        let one = run("none", 1);
        let two = run("none", 2);
        assert!(one.ios > 100, "{} reads", one.ios);
        let ratio = two.iops / one.iops;
        assert!((1.8..2.2).contains(&ratio), "two jobs read {ratio:.2}x one");
        let m = crate::machine::load("haswell-i7-4770").unwrap();
        let e = simulate(&m, "none", &[], 9, 0.5, 1.0, &Params::linux())
            .err()
            .unwrap();
        assert!(e.to_string().contains("expected 1..8"), "{e}");
    }

    /// Without the ephmap every read leaves ASI's restricted tables at the copy; with it
    /// none does.
    #[test]
    fn every_read_exits_without_the_ephmap_and_none_with_it() {
        let count = |m: &Measured, c: &str| m.window.tasks.owned(registry::counter(c));
        let rfc = run("asi:rfcv2", 1);
        let exits = count(&rfc, "asi_exits_page_cache");
        assert!(
            exits.abs_diff(rfc.ios) <= 1,
            "{exits} exits, {} reads",
            rfc.ios
        );
        let proto = run("asi:prototype", 1);
        assert_eq!(count(&proto, "asi_exits_page_cache"), 0);
        assert!(count(&proto, "asi_ephmap_copies").abs_diff(proto.ios) <= 1);
        assert!(proto.iops > rfc.iops && run("none", 1).iops > proto.iops);
    }
}
