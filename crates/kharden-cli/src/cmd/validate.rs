//! `kharden validate [--runs N] [--timeout S] [--machine M] -- CMD...`: how far a replay of
//! CMD can be trusted on this host. CMD runs untraced (its time, rusage and, by cpu-clock
//! sampling, how its CPU time divides between user and kernel mode), is recorded, and the
//! recording is replayed with no defense on a profile of this host (`machines detect`,
//! measured now); the three are printed side by side with their errors, and where the
//! replay misses by more than the bound, what the recording and the model say about why.

use super::replay::{
    by_operation, error_pct, recorded_line, replay_trace, this_host_ghz, Replayed,
};
use clap::Args as ClapArgs;
use kharden::{machine, Error, Result};
use kharden_trace::format::UntracedRun;
use kharden_trace::perf::{self, sampled, Bounded};
use kharden_trace::replay::UserTotal;
use kharden_trace::scratch::Scratch;
use std::path::PathBuf;
use std::time::Duration;

/// A replay within this fraction of the untraced run is within bounds (issue 57's bound).
const BOUND: f64 = 0.25;

/// The command's runs (untraced, sampled, recorded) run at this priority: this host is
/// shared, and other tenants' work (nice 0 to 19) would otherwise keep them waiting for a
/// CPU, which their elapsed time would count and a model of an idle machine cannot.
const NICE: Option<i32> = Some(-20);

#[derive(ClapArgs)]
pub struct Args {
    /// Untraced runs of the command (after one that warms the caches, not counted).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
    /// Runs under cpu-clock sampling for the split between user and kernel time.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    sampled_runs: u32,
    /// Untraced runs the recording makes of its own (`record --untraced-runs`): the replay
    /// keeps their median user time, what the trace replays to on every machine; 0 leaves
    /// the traced run's sampled user time instead. They are apart from `--runs`, which
    /// stay the reference the replay is judged against.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=100))]
    recorded_untraced_runs: u32,
    /// The longest one untraced run may take, in seconds; the command is refused past it.
    #[arg(long, default_value_t = 60.0)]
    timeout: f64,
    /// Replay on this machine profile instead of a profile of this host measured now.
    #[arg(long)]
    machine: Option<String>,
    /// Keep the recording here.
    #[arg(long, value_name = "FILE")]
    keep: Option<PathBuf>,
    /// The command, after `--`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    command: Vec<String>,
}

/// Median, min and max of `v`.
fn spread(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    (s[s.len() / 2], s[0], s[s.len() - 1])
}

/// The untraced reference: from the plain runs, the wall-clock time less the time the run
/// waited for a CPU (the model's machine is idle but for the command), and the CPU time
/// (the scheduler's exact runtime); from the sampled runs, the kernel's share of it.
struct Reference {
    runs: Vec<UntracedRun>,
    elapsed: (f64, f64, f64),
    /// Wall-clock time as measured, and the wait for a CPU in it (medians).
    wall: f64,
    wait: Option<f64>,
    cpu: (f64, f64, f64),
    kernel_share: (f64, f64),
    samples: u64,
}

impl Reference {
    fn user(&self) -> f64 {
        self.cpu.0 * (1.0 - self.kernel_share.0)
    }

    fn system(&self) -> f64 {
        self.cpu.0 * self.kernel_share.0
    }

    /// Relative error of the user and system figures: the CPU time's spread over the runs
    /// and the share's sampling error.
    fn rel_errors(&self) -> (f64, f64) {
        let cpu = (self.cpu.2 - self.cpu.1) / 2.0 / self.cpu.0.max(1e-12);
        let (p, se) = self.kernel_share;
        let user = (cpu.powi(2) + (se / (1.0 - p).max(1e-9)).powi(2)).sqrt();
        let system = (cpu.powi(2) + (se / p.max(1e-9)).powi(2)).sqrt();
        (user, system)
    }
}

fn refuse(command: &[String], why: String) -> Error {
    Error::new(format!("validate: '{}' {why}", command.join(" ")))
}

/// The plain untraced runs (one uncounted run first), refusing a command that fails or runs
/// past the bound.
fn untraced(args: &Args) -> Result<Vec<UntracedRun>> {
    let bound = Duration::from_secs_f64(args.timeout);
    let mut runs = Vec::new();
    for i in 0..=args.runs {
        let opts = perf::RunOptions {
            quiet: true,
            nice: NICE,
            bound: Some(bound),
            measure_wait: true,
        };
        match perf::run_bounded(&args.command, &opts)? {
            Bounded::TimedOut => {
                return Err(refuse(
                    &args.command,
                    format!(
                        "ran past {} s (--timeout) in untraced run {i}: refused",
                        args.timeout
                    ),
                ))
            }
            Bounded::Finished(_, status) if !status.success() => {
                return Err(refuse(
                    &args.command,
                    format!(
                    "failed ({status}) in untraced run {i}: validate needs a command that succeeds"
                ),
                ))
            }
            Bounded::Finished(run, _) if i > 0 => runs.push(run),
            Bounded::Finished(..) => {}
        }
    }
    Ok(runs)
}

fn reference(args: &Args, scratch: &std::path::Path) -> Result<Reference> {
    // A failing or unbounded command is refused first: that needs no perf.
    let runs = untraced(args)?;
    perf::perf_available()?;
    let mut modes = sampled::ModeSamples::default();
    for i in 0..args.sampled_runs {
        let m = sampled::sample_modes(
            &args.command,
            &scratch.join(format!("sampled{i}.data")),
            NICE,
        )?;
        modes.user += m.user;
        modes.kernel += m.kernel;
    }
    let s = |f: fn(&UntracedRun) -> u64| -> Vec<f64> {
        runs.iter().map(|r| f(r) as f64 / 1e9).collect()
    };
    let waits: Vec<f64> = runs
        .iter()
        .filter_map(|r| r.cpu_wait_ns.map(|w| w as f64 / 1e9))
        .collect();
    let wait = (waits.len() == runs.len()).then(|| spread(&waits).0);
    Ok(Reference {
        elapsed: spread(&s(|r| r.elapsed_ns - r.cpu_wait_ns.unwrap_or(0))),
        wall: spread(&s(|r| r.elapsed_ns)).0,
        wait,
        cpu: spread(&s(|r| r.user_ns + r.system_ns)),
        kernel_share: modes.kernel_share(),
        samples: modes.user + modes.kernel,
        runs,
    })
}

pub fn run(args: Args) -> Result<()> {
    if !(args.timeout > 0.0 && args.timeout <= 86400.0) {
        return Err(Error::new(format!(
            "--timeout: expected seconds in (0, 86400], got {}",
            args.timeout
        )));
    }
    let scratch = Scratch::new("validate")?;
    let r = reference(&args, scratch.path())?;
    let trace = args
        .keep
        .clone()
        .unwrap_or_else(|| scratch.path().join("validate.trace"));
    eprintln!("kharden: validate: recording the command");
    let rec = perf::record(&perf::RecordOptions {
        output: trace.clone(),
        command: args.command.clone(),
        keep_perf_data: false,
        force: true,
        mmap_pages: 1024,
        cgroup_filter: true,
        calibrate: Some(super::trace::calibration_command()?),
        untraced_runs: args.recorded_untraced_runs,
        quiet: true,
        nice: NICE,
    })?;
    if rec.command_status != Some(0) {
        return Err(refuse(
            &args.command,
            format!("failed under perf ({:?}): refused", rec.command_status),
        ));
    }
    let (m, how) = match &args.machine {
        Some(name) => (machine::load(name)?, format!("profile {name}")),
        None => {
            let d = machine::detect::detect(&machine::detect::DetectOptions {
                name: Some("this-host".into()),
                ..Default::default()
            })?;
            (
                d.profile,
                "machines detect of this host, measured now".to_string(),
            )
        }
    };
    let ghz = this_host_ghz()?;
    let rep = replay_trace(&trace, &m, "none", ghz, 1)?;
    print_report(&args, &r, &rec, &rep, &how, ghz);
    Ok(())
}

fn print_report(
    args: &Args,
    r: &Reference,
    rec: &perf::RecordSummary,
    rep: &Replayed,
    how: &str,
    ghz: f64,
) {
    let recd = &rep.recorded;
    let (est_user, est_sys) = recd.untraced_estimate();
    println!("validate: {}", args.command.join(" "));
    println!(
        "untraced: {} runs at nice {} (after one uncounted): elapsed {:.3} s, of which {} waiting for a CPU on this shared host: {:.3} s ({:.3}-{:.3}) without; CPU {:.3} s ({:.3}-{:.3}); user/system split from {} cpu-clock samples in {} sampled runs: {:.1}% ± {:.1}% system (rusage's tick-sampled split, which charges a process with no kernel-mode tick all to user: {:.1}% system)",
        r.runs.len(),
        NICE.unwrap_or(0),
        r.wall,
        r.wait.map_or("(not measured)".to_string(), |w| format!("{w:.3} s")),
        r.elapsed.0,
        r.elapsed.1,
        r.elapsed.2,
        r.cpu.0,
        r.cpu.1,
        r.cpu.2,
        r.samples,
        args.sampled_runs,
        r.kernel_share.0 * 100.0,
        r.kernel_share.1 * 100.0,
        {
            let (u, s): (u64, u64) = r.runs.iter().fold((0, 0), |a, x| (a.0 + x.user_ns, a.1 + x.system_ns));
            s as f64 / (u + s).max(1) as f64 * 100.0
        }
    );
    println!("recorded: {}", recorded_line(recd));
    println!(
        "replayed on {} ({how}), no defense, recorded ns at {ghz:.3} GHz",
        rep_machine_name(how)
    );
    let (eu, es) = r.rel_errors();
    let ee = (r.elapsed.2 - r.elapsed.1) / 2.0 / r.elapsed.0.max(1e-12);
    println!();
    println!(
        "{:<30} {:>16} {:>16} {:>16}",
        "", "elapsed s", "user s", "system s"
    );
    println!(
        "{:<30} {:>16} {:>16} {:>16}",
        "untraced",
        format!("{:.3} ±{:.0}%", r.elapsed.0, ee * 100.0),
        format!("{:.3} ±{:.0}%", r.user(), eu * 100.0),
        format!("{:.3} ±{:.0}%", r.system(), es * 100.0)
    );
    println!(
        "{:<30} {:>16} {:>16} {:>16}",
        "as traced",
        "-",
        format!("{:.3}", recd.traced_user_ns / 1e9),
        format!("{:.3}", recd.traced_system_ns / 1e9)
    );
    println!(
        "{:<30} {:>16} {:>16} {:>16}",
        "recording, its cost removed",
        "-",
        format!("{:.3}", est_user / 1e9),
        format!("{:.3}", est_sys / 1e9)
    );
    println!(
        "{:<30} {:>16} {:>16} {:>16}",
        "replay",
        format!("{:.3}", rep.elapsed_s),
        format!("{:.3}", rep.user_s),
        format!("{:.3}", rep.system_s)
    );
    let errs = [
        error_pct(rep.elapsed_s, r.elapsed.0),
        error_pct(rep.user_s, r.user()),
        error_pct(rep.system_s, r.system()),
    ];
    println!(
        "{:<30} {:>15.1}% {:>15.1}% {:>15.1}%",
        "replay against untraced", errs[0], errs[1], errs[2]
    );
    let outside: Vec<&str> = ["elapsed", "user", "system"]
        .iter()
        .zip(errs)
        .filter(|(_, e)| e.abs() > BOUND * 100.0)
        .map(|(n, _)| *n)
        .collect();
    println!();
    if outside.is_empty() {
        println!(
            "verdict: within {:.0}% on elapsed, user and system",
            BOUND * 100.0
        );
    } else {
        println!(
            "verdict: outside {:.0}% on {}; why:",
            BOUND * 100.0,
            outside.join(", ")
        );
        for w in why(r, rec, rep, &outside) {
            println!("  - {w}");
        }
    }
    println!();
    println!("kernel time by operation (recorded: the calls' kernel intervals, the recorder's cost removed, with the entry and exit code; faults are not delimited in a trace: model only)");
    println!(
        "{:<18} {:>9} {:>14} {:>14} {:>12}",
        "operation", "calls", "recorded ns", "model ns", "model ms"
    );
    for (label, calls, recorded, model) in by_operation(rep) {
        let per = |ns: f64| {
            if calls > 0 {
                format!("{:.0}", ns / calls as f64)
            } else {
                "-".into()
            }
        };
        println!(
            "{:<18} {:>9} {:>14} {:>14} {:>12.2}",
            label,
            calls,
            recorded.map_or("-".into(), per),
            per(model),
            model / 1e6
        );
    }
}

fn rep_machine_name(how: &str) -> &str {
    if how.starts_with("machines detect") {
        "this-host"
    } else {
        "the given profile"
    }
}

/// What the recording and the model say about each figure outside the bound.
fn why(r: &Reference, rec: &perf::RecordSummary, rep: &Replayed, outside: &[&str]) -> Vec<String> {
    let recd = &rep.recorded;
    let mut out = Vec::new();
    let (eu, es) = r.rel_errors();
    if outside.contains(&"elapsed") {
        let off = r.elapsed.0 - r.cpu.0;
        let rep_off = rep.elapsed_s - rep.user_s - rep.system_s;
        out.push(format!(
            "elapsed: untraced, {:.3} s of it is CPU time and {:.3} s neither CPU nor a wait for one (I/O, sleeps, or CPU time the kernel did not count; runs took {:.3}-{:.3} s without their waits); the replay's {:.3} s is {:.3} s of CPU time and {:.3} s else",
            r.cpu.0, off, r.elapsed.1, r.elapsed.2, rep.elapsed_s, rep.user_s + rep.system_s, rep_off
        ));
    }
    if outside.contains(&"user") {
        match (&rec.tracer, recd.sampled_user_ns) {
            (Some(t), sampled) => {
                let events = (rec.convert.events as f64 - 2.0 * recd.syscalls as f64).max(0.0);
                out.push(format!(
                    "user: the recording's user intervals held {:.3} s; the recorder's loop puts its own cost there at {:.0} ns a syscall ({} of them) and {:.0} ns an event{} ({:.0} events), the faults' native latencies at {:.3} s: {:.3} s in all{}",
                    recd.traced_user_ns / 1e9,
                    t.syscall_user_ns,
                    recd.syscalls,
                    t.event_ns,
                    if t.event_ns < 0.0 { " (taken as 0)" } else { "" },
                    events,
                    recd.fault_ns / 1e9,
                    recd.user_due_ns / 1e9,
                    match (recd.user_total, sampled) {
                        (UserTotal::UntracedRuns, _) => format!(
                            "; the replay keeps what the recording's {} untraced runs spent in user mode, {:.3} s (their median CPU time split as one more, sampled, run split it), {:+.0}% from the reference runs' user time{}",
                            recd.untraced.as_ref().map_or(0, |u| u.runs.len()),
                            recd.user_ns / 1e9,
                            error_pct(recd.user_ns / 1e9, r.user()),
                            sampled.map_or(String::new(), |(u, _)| format!(
                                "; the traced run's own user work, by its samples, was {:.3} s ({:+.0}%)",
                                u / 1e9,
                                error_pct(u / 1e9, r.user())
                            ))
                        ),
                        (_, Some((u, se))) => format!(
                            "; the traced run's cpu-clock samples put its user time at {:.3} ± {:.3} s, so those costs were taken out times {:.2}, leaving {:.3} s, {:+.0}% from the untraced user time: by the samples, the command's own user work ran that much slower under the recording, beyond the per-event cost the loop measured (the tracepoints' cache and TLB pollution, the sampling interrupts: not told apart here), and nothing takes that out",
                            u / 1e9,
                            se / 1e9,
                            recd.user_scale,
                            recd.user_ns / 1e9,
                            error_pct(recd.user_ns / 1e9, r.user())
                        ),
                        (_, None) => " (not sampled: taken out as measured)".to_string(),
                    }
                ));
            }
            (None, _) => out.push("user: the recording did not measure the recorder's cost".into()),
        }
    }
    if outside.contains(&"user") && eu > BOUND / 2.0 {
        out.push(format!(
            "user: the untraced user time itself is known to ±{:.0}% (CPU time's spread over the runs, the sampled split's error)",
            eu * 100.0
        ));
    }
    if outside.contains(&"system") {
        if es > BOUND / 2.0 {
            out.push(format!(
                "system: the untraced system time itself is known to ±{:.0}%",
                es * 100.0
            ));
        }
        // The operations whose model differs most from their recorded time.
        let mut rows: Vec<(String, u64, f64, f64)> = by_operation(rep)
            .into_iter()
            .filter_map(|(l, c, rec_ns, model)| rec_ns.map(|x| (l, c, x, model)))
            .collect();
        rows.sort_by(|a, b| (b.3 - b.2).abs().total_cmp(&(a.3 - a.2).abs()));
        for (label, calls, recd_ns, model) in rows.into_iter().take(3) {
            out.push(format!(
                "system: {label}: {calls} calls, {:.0} ns each recorded, {:.0} in the model ({:+.3} s)",
                recd_ns / calls.max(1) as f64,
                model / calls.max(1) as f64,
                (model - recd_ns) / 1e9
            ));
        }
        let faults = recd.anon_faults + recd.cow_faults + recd.file_faults;
        if faults > 0 {
            let model_faults: f64 = ["fault-anon", "fault-cow", "fault-file"]
                .iter()
                .filter_map(|l| rep.kernel_by_op.get(l))
                .map(|t| t.secs())
                .sum();
            out.push(format!(
                "system: {faults} page faults cost {:.3} s in the model (the recording loops' latencies: {:.3} s); a fault's own time in this run is not recorded (no tracepoint ends one)",
                model_faults,
                recd.fault_ns / 1e9
            ));
        }
        out.push(model_system(rep));
        let (_, est_sys) = recd.untraced_estimate();
        out.push(format!(
            "system: the recording, its cost removed, puts {:.3} s in the kernel ({:+.0}% from untraced), the model {:.3} s",
            est_sys / 1e9,
            error_pct(est_sys / 1e9, r.system()),
            rep.system_s
        ));
    }
    out
}

/// Where the model's system time went, by the engine's time categories, with its kernel
/// entries and what their lines and walks missed.
fn model_system(rep: &Replayed) -> String {
    use kharden::sim::{Counter, TimeCategory};
    let st = &rep.stats;
    let mut parts: Vec<(f64, &str)> = TimeCategory::ALL
        .iter()
        .filter(|c| c.is_system())
        .map(|&c| (st.time(c).secs(), c.name()))
        .filter(|(t, _)| *t > 0.0)
        .collect();
    parts.sort_by(|a, b| b.0.total_cmp(&a.0));
    let entries = st.counter(Counter::KernelEntries).max(1) as f64;
    let per = |c: Counter| st.counter(c) as f64 / entries;
    format!(
        "system: the model's {:.3} s is {}; per kernel entry ({}) it fetched {:.0} kernel lines, {:.1} of them missing L1 and {:.2} from memory, and walked the page tables {:.2} times",
        rep.system_s,
        parts
            .iter()
            .map(|(t, n)| format!("{n} {t:.3} s"))
            .collect::<Vec<_>>()
            .join(", "),
        st.counter(Counter::KernelEntries),
        per(Counter::KernelTextLines) + per(Counter::KernelDataLines),
        per(Counter::KernelLineL1Misses),
        per(Counter::KernelLinesFromMemory),
        per(Counter::PageWalks),
    )
}
