//! `kharden record [-o FILE] [--keep-perf-data] [--] COMMAND...` and
//! `kharden trace {stats|convert|profile|dump} ...`.

use clap::{Args as ClapArgs, Subcommand};
use kharden::{Error, Result};
use kharden_trace::{perf, profile, stats};
use std::path::PathBuf;

#[derive(ClapArgs)]
pub struct RecordArgs {
    /// The trace file to write.
    #[arg(short, long, value_name = "FILE", default_value = "kharden.trace")]
    output: PathBuf,
    /// Replace an existing output (and kept perf.data).
    #[arg(long)]
    force: bool,
    /// Keep perf's intermediate perf.data next to the output (`FILE.perf.data`).
    #[arg(long)]
    keep_perf_data: bool,
    /// perf's ring buffer per CPU, in pages (a power of two).
    #[arg(long, value_name = "N", default_value_t = 1024, value_parser = power_of_two)]
    mmap_pages: u32,
    /// Record syscall, kmem and fault events system-wide instead of in the command's cgroup.
    #[arg(long)]
    no_cgroup: bool,
    /// Skip measuring the recorder's own cost first (a loop of an empty syscall and of page
    /// faults, untraced and traced), which a replay takes out of the intervals.
    #[arg(long)]
    no_calibrate: bool,
    /// Run the command N more times without perf afterwards and keep their times in the
    /// trace (only for a command that does the same work every time: not a make that has
    /// built its targets).
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100))]
    untraced_runs: u32,
    /// The command to record and its arguments (after `--` where they start with a dash).
    #[arg(trailing_var_arg = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

fn power_of_two(v: &str) -> std::result::Result<u32, String> {
    match v.parse::<u32>() {
        Ok(n) if n.is_power_of_two() => Ok(n),
        _ => Err(format!("expected a power of two, got '{v}'")),
    }
}

#[derive(ClapArgs)]
pub struct TraceArgs {
    #[command(subcommand)]
    action: TraceAction,
}

#[derive(Subcommand)]
enum TraceAction {
    /// Counts of a trace's events, syscalls, faults and tasks.
    Stats {
        file: PathBuf,
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Convert a perf.data recorded with kharden's tracepoints into a kharden trace.
    Convert {
        perf_data: PathBuf,
        /// The trace file to write.
        #[arg(short, long, value_name = "FILE", default_value = "kharden.trace")]
        output: PathBuf,
        /// The pid of the perf process itself, whose events are dropped.
        #[arg(long, value_name = "PID")]
        perf_pid: Option<u32>,
    },
    /// Derive a workload profile (the kernel build's job) from recorded make traces.
    Profile {
        #[arg(required = true, value_name = "TRACE")]
        traces: Vec<PathBuf>,
        /// Write the profile here instead of to stdout.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// The profile's name.
        #[arg(long, default_value = "kbuild")]
        name: String,
        /// A note to keep in the profile (repeatable).
        #[arg(long, value_name = "TEXT")]
        note: Vec<String>,
    },
    /// The recorder's calibration loop (record runs it, untraced and traced).
    #[command(hide = true)]
    CalibrateLoop { output: PathBuf },
    /// Print a trace's metadata and its events, one a line.
    Dump {
        file: PathBuf,
        /// Print at most N events.
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
    },
}

/// Prints to stdout; a closed pipe (`| head`) ends the output quietly instead of panicking.
fn out(text: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text.as_bytes()).and_then(|_| o.flush());
}

fn human_bytes(n: u64) -> String {
    if n >= 10 << 20 {
        format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64)
    } else if n >= 10 << 10 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{n} B")
    }
}

pub fn record(args: RecordArgs) -> Result<()> {
    let output = args.output;
    let opts = perf::RecordOptions {
        output: output.clone(),
        command: args.command,
        keep_perf_data: args.keep_perf_data,
        force: args.force,
        mmap_pages: args.mmap_pages,
        cgroup_filter: !args.no_cgroup,
        calibrate: (!args.no_calibrate).then(calibration_command).transpose()?,
        untraced_runs: args.untraced_runs,
        quiet: false,
        nice: None,
    };
    let s = perf::record(&opts)?;
    eprintln!(
        "kharden: recorded {} events of {} tasks into {} ({}; perf.data was {}, {}){}{}",
        s.convert.events,
        s.convert.tasks,
        output.display(),
        human_bytes(s.convert.trace_bytes),
        human_bytes(s.perf_data_bytes),
        if s.cgroup_filtered {
            "syscall/kmem/fault events filtered to the command's cgroup"
        } else {
            "all events system-wide"
        },
        if s.convert.lost > 0 {
            format!(
                "; perf lost {} events ({} missed switch-outs repaired)",
                s.convert.lost, s.convert.repaired
            )
        } else {
            String::new()
        } + &inferred_switch_ins(&s.convert),
        match s.command_status {
            Some(0) | None => String::new(),
            Some(c) => format!("; the command exited with status {c}"),
        }
    );
    if let Some(t) = &s.tracer {
        eprintln!(
            "kharden: the recorder's own cost here: {:.0} ns in each syscall's kernel interval, {:.0} ns in the user time around it (entry and exit code included), {:.0} ns per other event, {:.0} ns per process beyond them (charged to its exec)",
            t.syscall_kernel_ns, t.syscall_user_ns, t.event_ns, t.process_ns
        );
    }
    let f = s.convert.fds;
    if f.opens > 0 {
        eprintln!(
            "kharden: descriptors: {} of {} opens matched to the watch of opens{}; {} of {} descriptor uses of unknown kind",
            f.opens_matched,
            f.opens,
            if f.opens_mismatched > 0 {
                format!(" ({} out of step)", f.opens_mismatched)
            } else {
                String::new()
            },
            f.unknown_uses,
            f.uses
        );
    }
    // Exit as the recorded command did (perf passes its status on), like `time` does.
    match s.command_status {
        Some(0) | None => Ok(()),
        Some(c) => std::process::exit(c),
    }
}

/// The command that runs the calibration loop: this kharden's hidden `trace calibrate-loop`.
pub fn calibration_command() -> Result<Vec<String>> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::new(format!("record: cannot find this kharden binary: {e}")))?;
    Ok(vec![
        exe.display().to_string(),
        "trace".into(),
        "calibrate-loop".into(),
    ])
}

pub fn trace(args: TraceArgs) -> Result<()> {
    match args.action {
        TraceAction::CalibrateLoop { output } => kharden_trace::calibrate::run_loop(&output),
        TraceAction::Stats { file, json } => {
            let r = kharden_trace::open(&file)?;
            let s = stats::compute(r)?;
            if json {
                out(&format!(
                    "{}\n",
                    serde_json::to_string_pretty(&s)
                        .map_err(|e| Error::new(format!("--json: {e}")))?
                ));
            } else {
                let text: String = s.tables().iter().map(|t| format!("{t}\n")).collect();
                out(&text);
            }
            Ok(())
        }
        TraceAction::Convert {
            perf_data,
            output,
            perf_pid,
        } => {
            let s = perf::convert(
                &perf_data,
                &output,
                true,
                perf_pid,
                &[],
                &perf::Beside::default(),
            )?;
            eprintln!(
                "kharden: converted {} perf samples into {} events of {} tasks in {} ({}); perf lost {} events, {} missed switch-outs repaired{}",
                s.perf_samples,
                s.events,
                s.tasks,
                output.display(),
                human_bytes(s.trace_bytes),
                s.lost,
                s.repaired,
                inferred_switch_ins(&s)
            );
            Ok(())
        }
        TraceAction::Profile {
            traces,
            output,
            name,
            note,
        } => {
            let prof = profile::derive(&traces)?;
            let text = prof.to_toml(&name, &note);
            match output {
                Some(path) => {
                    use std::io::Write;
                    let mut o = kharden_trace::scratch::Output::create(&path, true)?;
                    o.file()
                        .write_all(text.as_bytes())
                        .map_err(|e| Error::at(path.display(), format!("cannot write: {e}")))?;
                    o.commit()?
                }
                None => out(&text),
            }
            Ok(())
        }
        TraceAction::Dump { file, limit } => {
            let limit = limit.unwrap_or(u64::MAX);
            let mut r = kharden_trace::open(&file)?;
            use std::io::Write;
            let stdout = std::io::stdout();
            let mut o = std::io::BufWriter::new(stdout.lock());
            let _ = writeln!(o, "{}", serde_json::to_string(r.meta()).unwrap_or_default());
            let mut n = 0;
            while n < limit {
                let Some(e) = r.next() else { break };
                let e = e?;
                if writeln!(o, "{:>14} {:>7} {:?}", e.time_ns, e.tid, e.op).is_err() {
                    return Ok(()); // the reader of our output went away
                }
                n += 1;
            }
            let _ = o.flush();
            Ok(())
        }
    }
}

/// The switch-ins a conversion inferred, as a clause for its summary line (empty if none).
fn inferred_switch_ins(s: &perf::ConvertSummary) -> String {
    match s.inferred_switch_ins {
        0 => String::new(),
        n => format!(
            "; {n} switch-ins the kernel did not trace taken from the tasks' own next events"
        ),
    }
}
