//! How a command's CPU time divides between user and kernel mode, by sampling: `perf record
//! -e cpu-clock` of the command and its children every 50 us, each sample counted by the mode
//! it interrupted. The kernel's own split (rusage) is the timer tick's sample of the same,
//! at 250 Hz here, and a process that took no tick in kernel mode has all its time charged
//! as user (kernel/sched/cputime.c, cputime_adjust()): a loop of short processes (a shell
//! running /bin/true) shows almost no system time in rusage that it spends mostly there.

use kharden::{Error, Result};
use linux_perf_data::linux_perf_event_reader::{CpuMode, EventRecord};
use linux_perf_data::{PerfFileReader, PerfFileRecord};
use std::path::Path;
use std::process::{Command, Stdio};

/// Sampling period of the split, in ns of CPU time.
pub const SPLIT_PERIOD_NS: u64 = 50_000;

/// Samples of a command by the mode they interrupted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModeSamples {
    pub user: u64,
    pub kernel: u64,
}

impl ModeSamples {
    /// The kernel's share of the samples and its standard error (binomial).
    pub fn kernel_share(&self) -> (f64, f64) {
        let n = (self.user + self.kernel) as f64;
        if n == 0.0 {
            return (0.0, 0.0);
        }
        let p = self.kernel as f64 / n;
        (p, (p * (1.0 - p) / n).sqrt())
    }
}

/// Runs `command` (output to /dev/null, at `nice`) under a cpu-clock sampling perf into
/// `data`, and counts its samples by mode. Fails if the command or perf fails.
pub fn sample_modes(command: &[String], data: &Path, nice: Option<i32>) -> Result<ModeSamples> {
    let mut cmd = Command::new("perf");
    super::with_nice(&mut cmd, nice);
    let status = cmd
        .args(["record", "-q", "-e", "cpu-clock", "-c"])
        .arg(SPLIT_PERIOD_NS.to_string())
        .arg("-o")
        .arg(data)
        .arg("--")
        .args(command)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| Error::new(format!("cannot run perf: {e}")))?;
    if !status.success() {
        return Err(Error::new(format!(
            "perf record -e cpu-clock -- {} exited with {status}",
            command.join(" ")
        )));
    }
    count_modes(data)
}

/// Samples of a cpu-clock perf.data by the mode they interrupted.
pub fn count_modes(data: &Path) -> Result<ModeSamples> {
    let name = data.display().to_string();
    let perr = |e: &dyn std::fmt::Display| Error::at(&name, format!("cannot parse perf.data: {e}"));
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = super::open_perf_data(data)?;
    let mut m = ModeSamples::default();
    while let Some(rec) = record_iter
        .next_record(&mut perf_file)
        .map_err(|e| perr(&e))?
    {
        let PerfFileRecord::EventRecord { record, .. } = rec else {
            continue;
        };
        if let Ok(EventRecord::Sample(s)) = record.parse() {
            match s.cpu_mode {
                CpuMode::User => m.user += 1,
                CpuMode::Kernel => m.kernel += 1,
                _ => {}
            }
        }
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_share_comes_with_its_binomial_error() {
        let m = ModeSamples {
            user: 300,
            kernel: 100,
        };
        let (p, se) = m.kernel_share();
        assert_eq!(p, 0.25);
        assert!((se - (0.25f64 * 0.75 / 400.0).sqrt()).abs() < 1e-12);
        assert_eq!(ModeSamples::default().kernel_share(), (0.0, 0.0));
    }
}
