//! Kernel path footprints measured on the host: `kharden kernel record-footprint`.
//!
//! A driver runs each kernel path in a tight loop inside windows that name the path
//! (`driver`); `perf record -e cpu-clock:k` samples kernel instruction pointers meanwhile and
//! the recorder maps them through /proc/kallsyms to functions, 64-byte lines and 4 KiB pages
//! of the kernel text (`record`), adds the code that runs with interrupts off from the
//! source (`irqs_off`), and times each path bare (`latency`). `emit` writes the data file.

pub mod data;
pub mod driver;
pub mod emit;
pub mod irqs_off;
pub mod kallsyms;
pub mod latency;
pub mod marker;
pub mod record;
pub mod shared;
pub mod window;

use std::collections::BTreeMap;
use std::path::Path;

/// What `record_all` is asked to do.
pub struct Options<'a> {
    /// Scenarios to record (all if empty).
    pub scenarios: Vec<String>,
    /// Loop counts of the recording (1.0: about a second of work per path, bare).
    pub scale: f64,
    /// Loop counts of the latency runs, as a fraction of the recording's.
    pub latency_scale: f64,
    pub latency_repeats: u32,
    /// The command line that asked for this, for the file's record.
    pub invocation: String,
    /// This host's machine profile as the file names it (`kernel.host_machine`).
    pub host_machine: String,
    pub work: &'a Path,
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|t| t.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string())
}

/// Records every scenario and returns the data file's text.
pub fn record_all(opts: &Options, mut progress: impl FnMut(&str)) -> kharden::Result<String> {
    let k = kallsyms::Kallsyms::read()?;
    let scenarios: Vec<&driver::Scenario> = if opts.scenarios.is_empty() {
        driver::SCENARIOS.iter().collect()
    } else {
        opts.scenarios
            .iter()
            .map(|s| driver::scenario(s))
            .collect::<kharden::Result<_>>()?
    };
    let mut paths = Vec::new();
    let mut latencies = BTreeMap::new();
    for s in &scenarios {
        progress(&format!(
            "recording scenario {} ({})",
            s.name,
            s.paths.join(", ")
        ));
        paths.extend(record::record(s, &k, opts.scale, opts.work)?);
        progress(&format!(
            "timing scenario {} bare, {} repeats",
            s.name, opts.latency_repeats
        ));
        latencies.extend(latency::measure(
            s,
            opts.latency_scale,
            opts.latency_repeats,
            opts.work,
        )?);
    }
    let example = record::perf_record_command(
        Path::new("kharden"),
        "SCENARIO",
        false,
        opts.scale,
        Path::new("WORK/SCENARIO.data"),
        Path::new("WORK/SCENARIO.windows"),
    );
    let perf_line = std::iter::once(example.get_program().to_string_lossy().into_owned())
        .chain(example.get_args().map(|a| a.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(" ");
    let names: Vec<&str> = scenarios.iter().map(|s| s.name).collect();
    let header = emit::Header {
        release: read_trimmed("/proc/sys/kernel/osrelease"),
        version: read_trimmed("/proc/sys/kernel/version"),
        host_ghz: latency::host_ghz()?,
        host_machine: opts.host_machine.clone(),
        commands: vec![
            opts.invocation.clone(),
            format!("for SCENARIO in {}: {perf_line}", names.join(" ")),
            format!(
                "with -a (every CPU) for SCENARIO in {}, keeping the samples of the driver's command name (its children's exits run after their own perf events close)",
                scenarios
                    .iter()
                    .filter(|s| s.system_wide())
                    .map(|s| s.name)
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            "perf script -F comm,pid,tid,time,ip --ns -i WORK/SCENARIO.data".to_string(),
            format!(
                "kharden kernel drive SCENARIO --scale {} --repeats {} --windows WORK/SCENARIO.latency (bare, no perf)",
                opts.latency_scale, opts.latency_repeats
            ),
        ],
        meltdown: read_trimmed("/sys/devices/system/cpu/vulnerabilities/meltdown"),
        record_scale: opts.scale,
        latency_scale: opts.latency_scale,
    };
    Ok(emit::write(&header, &k, &paths, &latencies))
}
