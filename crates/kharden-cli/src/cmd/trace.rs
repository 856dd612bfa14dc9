//! `kharden record [-o FILE] [--keep-perf-data] -- COMMAND...` and
//! `kharden trace {stats|convert|profile|dump} ...`.
//!
//! Flags are parsed by hand so that every mistake is one line naming the flag.
use clap::Args as ClapArgs;
use kharden::{Error, Result};
use kharden_trace::{perf, profile, stats};
use std::path::PathBuf;

#[derive(ClapArgs)]
#[command(disable_help_flag = true)]
pub struct RecordArgs {
    /// [-o FILE] [--keep-perf-data] [--mmap-pages N] -- COMMAND...
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<String>,
}

#[derive(ClapArgs)]
#[command(disable_help_flag = true)]
pub struct TraceArgs {
    /// stats FILE [--json] | convert PERF_DATA [-o FILE] | profile TRACE... -o FILE | dump FILE [--limit N]
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<String>,
}

const RECORD_USAGE: &str = "usage: kharden record [-o FILE] [--force] [--keep-perf-data] [--mmap-pages N] [--no-cgroup] [--no-calibrate] [--untraced-runs N] -- COMMAND...";
const TRACE_USAGE: &str =
    "usage: kharden trace stats FILE [--json] | convert PERF_DATA [-o FILE] | profile TRACE... [-o FILE] [--name NAME] [--note TEXT]... | dump FILE [--limit N]";

/// Splits `args` into flags with values, boolean flags and positionals; unknown flags are errors.
struct Parsed {
    values: Vec<(String, String)>,
    bools: Vec<String>,
    positional: Vec<String>,
    rest: Vec<String>,
}

fn parse(args: &[String], with_value: &[&str], boolean: &[&str], usage: &str) -> Result<Parsed> {
    let mut p = Parsed {
        values: vec![],
        bools: vec![],
        positional: vec![],
        rest: vec![],
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--" {
            p.rest = it.cloned().collect();
            break;
        }
        if a.starts_with('-') && a.len() > 1 {
            let (flag, inline) = match a.split_once('=') {
                Some((k, v)) if k.starts_with("--") => (k, Some(v.to_string())),
                _ => (a.as_str(), None),
            };
            if with_value.contains(&flag) {
                let v = match inline {
                    Some(v) => v,
                    None => it
                        .next()
                        .cloned()
                        .ok_or_else(|| Error::at(flag, "expected a value after it"))?,
                };
                if v.is_empty() || (v.starts_with('-') && v != "-") {
                    return Err(Error::at(flag, format!("expected a value, got '{v}'")));
                }
                p.values.push((flag.to_string(), v));
            } else if boolean.contains(&flag) && inline.is_none() {
                p.bools.push(flag.to_string());
            } else {
                return Err(Error::at(a, format!("unknown flag; {usage}")));
            }
        } else {
            p.positional.push(a.clone());
        }
    }
    Ok(p)
}

impl Parsed {
    fn value(&self, names: &[&str]) -> Option<&str> {
        self.values
            .iter()
            .rev()
            .find(|(k, _)| names.contains(&k.as_str()))
            .map(|(_, v)| v.as_str())
    }
    fn has(&self, name: &str) -> bool {
        self.bools.iter().any(|b| b == name)
    }
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
    // clap drops a "--" that comes first (`kharden record -- CMD`); put it back.
    let mut raw = args.args.clone();
    if std::env::args()
        .skip_while(|a| a != "record")
        .nth(1)
        .as_deref()
        == Some("--")
    {
        raw.insert(0, "--".into());
    }
    let p = parse(
        &raw,
        &["-o", "--output", "--mmap-pages", "--untraced-runs"],
        &[
            "--keep-perf-data",
            "--no-cgroup",
            "--no-calibrate",
            "--force",
            "-h",
            "--help",
        ],
        RECORD_USAGE,
    )?;
    if p.has("-h") || p.has("--help") {
        println!("Record COMMAND's process tree with perf (system-wide tracepoints) into a kharden trace.\nFirst the recorder's own cost is measured on this host (a loop of an empty syscall and of page faults, untraced and traced; --no-calibrate skips it), so that a replay can take it out of the intervals; --untraced-runs N runs the command N more times without perf afterwards and keeps their times in the trace (only for a command that does the same work every time: not a make that has built its targets).\n{RECORD_USAGE}");
        return Ok(());
    }
    if let Some(x) = p.positional.first() {
        return Err(Error::at(
            x,
            format!("unexpected argument (put the command after '--'); {RECORD_USAGE}"),
        ));
    }
    if p.rest.is_empty() {
        return Err(Error::new(format!(
            "record: no command given; {RECORD_USAGE}"
        )));
    }
    let mmap_pages = match p.value(&["--mmap-pages"]) {
        None => 1024,
        Some(v) => match v.parse::<u32>() {
            Ok(n) if n.is_power_of_two() => n,
            _ => {
                return Err(Error::at(
                    "--mmap-pages",
                    format!("expected a power of two, got '{v}'"),
                ))
            }
        },
    };
    let untraced_runs = match p.value(&["--untraced-runs"]) {
        None => 0,
        Some(v) => match v.parse::<u32>() {
            Ok(n) if n <= 100 => n,
            _ => {
                return Err(Error::at(
                    "--untraced-runs",
                    format!("expected a count from 0 to 100, got '{v}'"),
                ))
            }
        },
    };
    let output = PathBuf::from(p.value(&["-o", "--output"]).unwrap_or("kharden.trace"));
    let opts = perf::RecordOptions {
        output: output.clone(),
        command: p.rest.clone(),
        keep_perf_data: p.has("--keep-perf-data"),
        force: p.has("--force"),
        mmap_pages,
        cgroup_filter: !p.has("--no-cgroup"),
        calibrate: (!p.has("--no-calibrate"))
            .then(calibration_command)
            .transpose()?,
        untraced_runs,
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
        },
        match s.command_status {
            Some(0) | None => String::new(),
            Some(c) => format!("; the command exited with status {c}"),
        }
    );
    if let Some(t) = &s.tracer {
        eprintln!(
            "kharden: the recorder's own cost here: {:.0} ns in each syscall's kernel interval, {:.0} ns in the user time around it (entry and exit code included), {:.0} ns per other event",
            t.syscall_kernel_ns, t.syscall_user_ns, t.event_ns
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
    let Some((sub, rest)) = args.args.split_first() else {
        return Err(Error::new(format!(
            "trace: expected a subcommand; {TRACE_USAGE}"
        )));
    };
    match sub.as_str() {
        "-h" | "--help" | "help" => {
            out(&format!("Inspect kharden traces.\n{TRACE_USAGE}\n"));
            Ok(())
        }
        // The recorder's calibration loop (record runs it, untraced and traced).
        "calibrate-loop" => match rest {
            [out] => kharden_trace::calibrate::run_loop(std::path::Path::new(out)),
            _ => Err(Error::new("trace calibrate-loop: expected one output file")),
        },
        "stats" => {
            let p = parse(rest, &[], &["--json"], TRACE_USAGE)?;
            let file = one_file(&p, "trace stats")?;
            let r = kharden_trace::open(&file)?;
            let s = stats::compute(r)?;
            if p.has("--json") {
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
        "convert" => {
            let p = parse(rest, &["-o", "--output", "--perf-pid"], &[], TRACE_USAGE)?;
            let file = one_file(&p, "trace convert")?;
            let out = PathBuf::from(p.value(&["-o", "--output"]).unwrap_or("kharden.trace"));
            let perf_pid = match p.value(&["--perf-pid"]) {
                None => None,
                Some(v) => Some(v.parse::<u32>().map_err(|_| {
                    Error::at("--perf-pid", format!("expected a process id, got '{v}'"))
                })?),
            };
            let s = perf::convert(&file, &out, true, perf_pid, &[], &perf::Beside::default())?;
            eprintln!(
                "kharden: converted {} perf samples into {} events of {} tasks in {} ({}); perf lost {} events, {} missed switch-outs repaired",
                s.perf_samples,
                s.events,
                s.tasks,
                out.display(),
                human_bytes(s.trace_bytes),
                s.lost,
                s.repaired
            );
            Ok(())
        }
        "profile" => {
            let p = parse(
                rest,
                &["-o", "--output", "--name", "--note"],
                &[],
                TRACE_USAGE,
            )?;
            if p.positional.is_empty() {
                return Err(Error::new(format!(
                    "trace profile: expected one or more trace files; {TRACE_USAGE}"
                )));
            }
            let files: Vec<PathBuf> = p.positional.iter().map(PathBuf::from).collect();
            let prof = profile::derive(&files)?;
            let notes: Vec<String> = p
                .values
                .iter()
                .filter(|(k, _)| k == "--note")
                .map(|(_, v)| v.clone())
                .collect();
            let text = prof.to_toml(p.value(&["--name"]).unwrap_or("kbuild"), &notes);
            match p.value(&["-o", "--output"]) {
                Some(out) => {
                    use std::io::Write;
                    let mut o = kharden_trace::scratch::Output::create(out.as_ref(), true)?;
                    o.file()
                        .write_all(text.as_bytes())
                        .map_err(|e| Error::at(out, format!("cannot write: {e}")))?;
                    o.commit()?
                }
                None => out(&text),
            }
            Ok(())
        }
        "dump" => {
            let p = parse(rest, &["--limit"], &[], TRACE_USAGE)?;
            let file = one_file(&p, "trace dump")?;
            let limit = match p.value(&["--limit"]) {
                None => u64::MAX,
                Some(v) => v
                    .parse::<u64>()
                    .map_err(|_| Error::at("--limit", format!("expected a number, got '{v}'")))?,
            };
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
        other => Err(Error::at(
            other,
            format!("unknown trace subcommand; {TRACE_USAGE}"),
        )),
    }
}

fn one_file(p: &Parsed, what: &str) -> Result<PathBuf> {
    match p.positional.as_slice() {
        [f] => Ok(PathBuf::from(f)),
        [] => Err(Error::new(format!(
            "{what}: expected a file; {TRACE_USAGE}"
        ))),
        [_, extra, ..] => Err(Error::at(
            extra,
            format!("unexpected argument; {TRACE_USAGE}"),
        )),
    }
}
