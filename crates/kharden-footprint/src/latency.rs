//! Native latency of each path: the driver's scenario run bare (no perf) several times in one
//! process; each window (at most 1000 operations) gives a path's time per operation, and the
//! low percentile of the windows is kept, since the host is shared with other work that
//! steals the CPU for milliseconds at a time.

use crate::window::Window;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

/// A path's time per operation over its windows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    pub windows: u32,
    pub ns_p10: f64,
    pub ns_median: f64,
    pub ns_p90: f64,
}

/// Windows whose time stands for `path`'s latency: the timer tick's are the user-mode
/// spin's gaps, not the spin itself.
fn latency_window_name(path: &str) -> String {
    match path {
        "timer-tick" => "timer-tick-gap".to_string(),
        p => p.to_string(),
    }
}

/// The nearest-rank percentile `q` (0..=1) of sorted values.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Per path, the latency over its windows; paths with no timed window (a child's exit, an
/// IPI handler on the other CPU) are absent.
pub fn from_windows(paths: &[&str], windows: &[Window]) -> BTreeMap<String, Latency> {
    let mut out = BTreeMap::new();
    for &path in paths {
        let name = latency_window_name(path);
        let mut ns: Vec<f64> = windows
            .iter()
            .filter(|w| {
                w.ops > 0
                    && (w.own.as_deref() == Some(name.as_str())
                        || (w.own.is_none() && w.others.as_deref() == Some(name.as_str())))
            })
            .map(|w| (w.end_ns - w.start_ns) as f64 / w.ops as f64)
            .collect();
        if ns.is_empty() {
            continue;
        }
        ns.sort_by(f64::total_cmp);
        out.insert(
            path.to_string(),
            Latency {
                windows: ns.len() as u32,
                ns_p10: percentile(&ns, 0.1),
                ns_median: percentile(&ns, 0.5),
                ns_p90: percentile(&ns, 0.9),
            },
        );
    }
    out
}

/// Runs the scenario bare `repeats` times at `scale` of the recording's loop counts.
pub fn measure(
    scenario: &crate::driver::Scenario,
    scale: f64,
    repeats: u32,
    work: &Path,
) -> kharden::Result<BTreeMap<String, Latency>> {
    let exe =
        std::env::current_exe().map_err(|e| kharden::Error::new(format!("own executable: {e}")))?;
    let file = work.join(format!("{}.latency", scenario.name));
    let status = Command::new(exe)
        .args(["kernel", "drive", scenario.name, "--scale"])
        .arg(scale.to_string())
        .arg("--repeats")
        .arg(repeats.to_string())
        .arg("--windows")
        .arg(&file)
        .stdout(Stdio::null())
        .status()
        .map_err(|e| kharden::Error::new(format!("latency run of {}: {e}", scenario.name)))?;
    if !status.success() {
        return Err(kharden::Error::new(format!(
            "latency run of scenario {} failed ({status})",
            scenario.name
        )));
    }
    let place = file.display().to_string();
    let text = std::fs::read_to_string(&file)
        .map_err(|e| kharden::Error::at(&place, format!("cannot read: {e}")))?;
    Ok(from_windows(
        scenario.paths,
        &crate::window::read_all(&place, &text)?,
    ))
}

/// The host's core clock in GHz, from /proc/cpuinfo's first "cpu MHz".
pub fn host_ghz() -> kharden::Result<f64> {
    let text = std::fs::read_to_string("/proc/cpuinfo")
        .map_err(|e| kharden::Error::at("/proc/cpuinfo", format!("cannot read: {e}")))?;
    text.lines()
        .find(|l| l.starts_with("cpu MHz"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|mhz| mhz / 1000.0)
        .ok_or_else(|| kharden::Error::at("/proc/cpuinfo", "no 'cpu MHz' line"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_is_time_per_op_per_window_and_percentiles_of_those() {
        let w = |repeat, start, end, ops| Window {
            repeat,
            own: Some("getpid".into()),
            others: None,
            tid: 1,
            start_ns: start,
            end_ns: end,
            ops,
        };
        // 100, 100, 300 and 200 ns/op.
        let ws = [
            w(0, 0, 500, 5),
            w(0, 1000, 1500, 5),
            w(1, 0, 3000, 10),
            w(2, 0, 2000, 10),
        ];
        let l = from_windows(&["getpid", "exit"], &ws);
        let g = l["getpid"];
        assert_eq!(
            (g.windows, g.ns_p10, g.ns_median, g.ns_p90),
            (4, 100.0, 200.0, 300.0)
        );
        assert!(!l.contains_key("exit"));
    }
}
