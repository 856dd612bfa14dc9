//! `kharden replay TRACE --machine M [--defense D] [--scale-jobs N]`: a recorded run's tasks
//! re-executed on a machine model with kharden's scheduler.

use clap::Args as ClapArgs;
use kharden::kernel::Kernel;
use kharden::machine::MachineProfile;
use kharden::sim::Time;
use kharden::{machine, Error, Result};
use kharden_trace::progress::Progress;
use kharden_trace::replay::{self, Recorded, UserTotal};
use kharden_trace::scratch::Scratch;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(ClapArgs)]
pub struct Args {
    /// A kharden trace (from `kharden record`).
    trace: PathBuf,
    /// Machine to replay on (name or profile path).
    #[arg(long)]
    machine: String,
    /// Comma-separated defenses.
    #[arg(long, default_value = "none")]
    defense: String,
    /// Fork this many copies of every job make starts (a make -j2 trace drives a big machine).
    #[arg(long, default_value_t = 1)]
    scale_jobs: u32,
    /// Clock of the recording host in GHz (recorded nanoseconds become cycles at this rate);
    /// default: this host's current clock from /proc/cpuinfo.
    #[arg(long)]
    host_ghz: Option<f64>,
    #[arg(long)]
    json: bool,
}

pub fn this_host_ghz() -> Result<f64> {
    let text =
        std::fs::read_to_string("/proc/cpuinfo").map_err(|e| Error::at("/proc/cpuinfo", e))?;
    text.lines()
        .find_map(|l| {
            l.strip_prefix("cpu MHz")
                .and_then(|r| r.split(':').nth(1))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .map(|mhz| mhz / 1000.0)
        .ok_or_else(|| Error::new("--host-ghz: not given and /proc/cpuinfo has no 'cpu MHz' line"))
}

/// A finished replay: what the recording says, what the model gave.
pub struct Replayed {
    pub recorded: Recorded,
    pub user_s: f64,
    pub system_s: f64,
    pub elapsed_s: f64,
    pub operations: u64,
    /// The model's system time by operation (Op::label).
    pub kernel_by_op: BTreeMap<&'static str, Time>,
    pub stats: kharden::sim::Stats,
}

/// Replays `trace` on `m` with `defenses`; recorded ns become cycles at `host_ghz`.
pub fn replay_trace(
    trace: &Path,
    m: &MachineProfile,
    defense: &str,
    host_ghz: f64,
    scale_jobs: u32,
) -> Result<Replayed> {
    let defenses = super::defenses::parse(defense, m)?;
    // A private scratch directory, removed on return and on Ctrl-C.
    let scratch = Scratch::new("replay")?;
    let k = Kernel::boot(m.clone(), defenses);
    let split = replay::split(trace, scratch.path(), &k.paths)?;
    let program = replay::root_program(&split, k.paths.clone(), host_ghz, scale_jobs);
    let mut progress = Progress::on_terminal();
    let out = replay::drive(k, program, |p| {
        progress.show(&format!(
            "replay: {:.2} s simulated, {} tasks ({} live), {} operations",
            p.simulated.secs(),
            p.tasks_created,
            p.tasks_live,
            p.operations
        ));
        Ok(())
    })?;
    progress.clear();
    let w = out.window;
    Ok(Replayed {
        recorded: split.recorded,
        user_s: w.tasks.user_time().secs(),
        system_s: w.tasks.system_time().secs(),
        elapsed_s: w.elapsed.secs(),
        operations: out.runner.ops,
        kernel_by_op: w.kernel_by_op,
        stats: w.tasks,
    })
}

/// `(a - b) / b` in percent (0 when b is 0).
pub fn error_pct(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        (a - b) / b * 100.0
    } else {
        0.0
    }
}

/// The recorded run's counts, in one line.
pub fn recorded_line(rec: &Recorded) -> String {
    format!(
        "{} tasks, {} forks ({} of them vforks or posix_spawns), {} threads, {} syscalls ({} flushing the address space), page faults: {} anonymous, {} copy-on-write, {} file",
        rec.tasks, rec.forks, rec.vforks, rec.threads, rec.syscalls, rec.flushing_syscalls, rec.anon_faults, rec.cow_faults, rec.file_faults
    )
}

/// The model's system time by operation beside the recorded calls that became it (tracer
/// removed, entry and exit code added), per call; faults have no recorded time (no
/// tracepoint ends one) and show the model's alone.
pub fn by_operation(r: &Replayed) -> Vec<(String, u64, Option<f64>, f64)> {
    let mut rows: Vec<(String, u64, Option<f64>, f64)> = Vec::new();
    let mut labels: Vec<&'static str> = r.kernel_by_op.keys().copied().collect();
    labels.extend(r.recorded.by_label.keys().copied());
    labels.sort_unstable();
    labels.dedup();
    for label in labels {
        let model_ns = r.kernel_by_op.get(label).map_or(0.0, |t| t.secs() * 1e9);
        let rec = r.recorded.by_label.get(label);
        let calls = rec.map_or(0, |c| c.calls);
        rows.push((
            label.to_string(),
            calls,
            rec.map(|c| c.recorded_ns),
            model_ns,
        ));
    }
    rows.sort_by(|a, b| b.3.total_cmp(&a.3));
    rows
}

pub fn run(args: Args) -> Result<()> {
    let m = machine::load(&args.machine)?;
    if args.scale_jobs == 0 || args.scale_jobs > 1024 {
        return Err(Error::new("--scale-jobs: expected 1..1024"));
    }
    let host_ghz = match args.host_ghz {
        Some(g) if g > 0.0 && g < 10.0 => g,
        Some(g) => {
            return Err(Error::new(format!(
                "--host-ghz: expected 0 < GHz < 10, got {g}"
            )))
        }
        None => this_host_ghz()?,
    };
    let r = replay_trace(&args.trace, &m, &args.defense, host_ghz, args.scale_jobs)?;
    let rec = &r.recorded;
    let (est_user, est_sys) = rec.untraced_estimate();
    let untraced = rec.untraced.as_ref().and_then(|u| u.median());
    if args.json {
        let v = serde_json::json!({
            "trace": args.trace, "machine": m.name, "defense": args.defense, "scale_jobs": args.scale_jobs, "host_ghz": host_ghz,
            "recorded": rec,
            "recorded_untraced_estimate": { "user_s": est_user / 1e9, "system_s": est_sys / 1e9 },
            "simulated": { "user_s": r.user_s, "system_s": r.system_s, "elapsed_s": r.elapsed_s, "operations": r.operations },
            "stats": r.stats,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| Error::new(e.to_string()))?
        );
        return Ok(());
    }
    println!(
        "replay of {} on {} with {} (x{} jobs, host {host_ghz:.3} GHz): {} operations",
        args.trace.display(),
        m.name,
        args.defense,
        args.scale_jobs,
        r.operations
    );
    println!("recorded:  {}", recorded_line(rec));
    println!(
        "{:<34} {:>10} {:>10} {:>10}",
        "", "user s", "system s", "elapsed s"
    );
    if let Some(u) = untraced {
        println!(
            "{:<34} {:>10.3} {:>10.3} {:>10.3}",
            format!(
                "untraced (median of {} runs)",
                rec.untraced.as_ref().map_or(0, |u| u.runs.len())
            ),
            u.user_ns as f64 / 1e9,
            u.system_ns as f64 / 1e9,
            u.elapsed_ns as f64 / 1e9
        );
    }
    println!(
        "{:<34} {:>10.3} {:>10.3} {:>10}",
        "as traced",
        rec.traced_user_ns / 1e9,
        rec.traced_system_ns / 1e9,
        "-"
    );
    if rec.tracer.is_some() {
        println!(
            "{:<34} {:>10.3} {:>10.3} {:>10}",
            "recording, its own cost removed",
            est_user / 1e9,
            est_sys / 1e9,
            "-"
        );
        println!(
            "(its user time: {})",
            match rec.user_total {
                UserTotal::UntracedRuns => "the median of the untraced runs the recording made",
                UserTotal::Samples => "the traced run's cpu-clock samples of user mode (no untraced runs: `record --untraced-runs N` gives what the traced run's own slower user work cannot)",
                UserTotal::Events => "the intervals less the recorder's per-event costs (neither samples nor untraced runs)",
            }
        );
        for (what, ns, se) in rec.tracer.iter().flat_map(|t| t.negative()) {
            println!("(the recorder's cost, {what}: measured {ns:.1} ± {se:.1} ns, below zero, taken as none)");
        }
    } else {
        println!("(the trace has no measurement of the recorder's cost: a trace recorded with --no-calibrate or by an older kharden; its intervals are taken as recorded)");
    }
    println!(
        "{:<34} {:>10.3} {:>10.3} {:>10.3}",
        "simulated", r.user_s, r.system_s, r.elapsed_s
    );
    if args.scale_jobs == 1 {
        if let Some(u) = untraced {
            println!(
                "{:<34} {:>9.1}% {:>9.1}% {:>9.1}%",
                "error against untraced",
                error_pct(r.user_s, u.user_ns as f64 / 1e9),
                error_pct(r.system_s, u.system_ns as f64 / 1e9),
                error_pct(r.elapsed_s, u.elapsed_ns as f64 / 1e9)
            );
        }
        println!(
            "{:<34} {:>9.1}% {:>9.1}% {:>10}",
            "error against the recording",
            error_pct(r.user_s, est_user / 1e9),
            error_pct(r.system_s, est_sys / 1e9),
            "-"
        );
    }
    Ok(())
}
