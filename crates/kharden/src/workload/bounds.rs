//! Workload sizes checked before a run starts (issue 18): a run that the simulated memory
//! cannot hold, or whose bookkeeping would grow without bound, is a one-line error instead
//! of a panic deep in the page allocator or gigabytes of host memory.

use crate::arch::x86::physmem::DATA_BYTES_PER_NODE;
use crate::error::{Error, Result};
use crate::machine::MachineProfile;
use crate::workload::kbuild_profile::JobProfile;

/// Loops of the syscall loop at most (each keeps its result, and prints a line).
pub const MAX_LOOPS: u32 = 100_000;
/// Iterations of the syscall loop at most, all loops together (about 10^9 simulated
/// syscalls is already minutes of host time).
pub const MAX_TOTAL_ITERATIONS: u64 = 1_000_000_000;
/// Share of one node's simulated data frames the build's steady state may take: the rest
/// is left for what the window allocates fresh (recycled frames come from one node).
const STEADY_STATE_SHARE: u64 = 2;

/// `--loops` x `--iterations`, computed without overflow.
pub fn syscall_loop(loops: u32, iterations: u64) -> Result<()> {
    if loops == 0 || loops > MAX_LOOPS {
        return Err(Error::at(
            "--loops",
            format!("expected 1..{MAX_LOOPS}, got {loops}"),
        ));
    }
    match iterations.checked_mul(loops as u64) {
        Some(n) if n <= MAX_TOTAL_ITERATIONS && iterations > 0 => Ok(()),
        _ => Err(Error::at(
            "--iterations",
            format!("{iterations} x {loops} loops: expected 1..{MAX_TOTAL_ITERATIONS} iterations in all"),
        )),
    }
}

/// make -j`jobs` of `profile` on `m`: its steady-state memory must fit the simulated node
/// (about 2,250 jobs of the recorded kernel-build job filled a node and panicked).
pub fn kbuild_jobs(m: &MachineProfile, profile: &JobProfile, jobs: u32) -> Result<()> {
    let node_frames = DATA_BYTES_PER_NODE >> 12;
    let limit = node_frames / STEADY_STATE_SHARE;
    let needed = profile.steady_state_frames(jobs);
    if jobs == 0 || needed > limit {
        let per_job = profile.steady_state_frames(1).max(1);
        return Err(Error::at(
            "jobs",
            format!(
                "{jobs} jobs on {}: expected 1..{} (each job keeps {per_job} pages; the simulated node holds {node_frames}, half of them for the build's steady state)",
                m.name,
                limit / per_job
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 18's workload defects: --loops 4294967295 grew to 7.7 GB; loops x iterations
    /// could overflow; about 2,253 jobs panicked in physmem ("ran out of data frames").
    #[test]
    fn oversized_workloads_are_refused_before_they_run() {
        assert!(syscall_loop(u32::MAX, 1)
            .unwrap_err()
            .to_string()
            .contains("--loops"));
        let e = syscall_loop(2, u64::MAX).unwrap_err().to_string();
        assert!(e.contains("--iterations") && !e.contains('\n'), "{e}");
        assert!(syscall_loop(10, 1000).is_ok());
        let m = crate::machine::load("ivybridge-i5-3550").unwrap();
        let p = JobProfile::builtin();
        assert!(kbuild_jobs(&m, &p, 60).is_ok());
        let e = kbuild_jobs(&m, &p, 2253).unwrap_err().to_string();
        assert!(
            e.starts_with("jobs: 2253 jobs on ivybridge-i5-3550: expected 1.."),
            "{e}"
        );
    }
}
