//! `kharden refcount bench [--iterations N] [--threads T] [--json]`
//! `kharden refcount model [--machine M] [--json]`
//! `kharden refcount selftest [--threads T] [--iterations N]`
//!
//! Flags are parsed by hand so every mistake is one line naming the flag.
use clap::{Args as ClapArgs, Subcommand};
use kharden::Error;
use kharden_refcount::{bench, model, native};

#[derive(ClapArgs)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand)]
enum Action {
    /// Run LKDTM's ATOMIC_TIMING and REFCOUNT_TIMING loops natively for every refcount
    /// implementation this host can run (time, ns per operation, ratio to atomic_t).
    /// Flags: --iterations N (loop bound, LKDTM uses INT_MAX), --threads T (T threads on one
    /// counter), --repeat R (runs per implementation, fastest kept; default 3), --json.
    #[command(disable_help_flag = true)]
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        flags: Vec<String>,
    },
    /// The arm64/x86-64 per-instruction cost model: LKDTM's loops and one operation's cycles,
    /// on one machine (--machine M) or on every core table. Flags: --machine M, --json.
    #[command(disable_help_flag = true)]
    Model {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        flags: Vec<String>,
    },
    /// Run the functional tests of every implementation on this host.
    /// Flags: --threads T, --iterations N (increments per thread).
    #[command(disable_help_flag = true)]
    Selftest {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        flags: Vec<String>,
    },
}

const BENCH_USAGE: &str = "usage: kharden refcount bench [--iterations N] [--threads T] [--repeat R] [--json]";
const MODEL_USAGE: &str = "usage: kharden refcount model [--machine M] [--json]";
const SELFTEST_USAGE: &str = "usage: kharden refcount selftest [--threads T] [--iterations N]";

#[derive(Debug, Default, PartialEq)]
struct Flags {
    iterations: Option<u32>,
    threads: Option<u32>,
    repeat: Option<u32>,
    machine: Option<String>,
    json: bool,
    help: bool,
}

/// Parses `args`, accepting only the flags in `allowed`.
fn parse_flags(args: &[String], allowed: &[&str]) -> kharden::Result<Flags> {
    let mut f = Flags::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        if !allowed.contains(&flag) && flag != "--help" && flag != "-h" {
            return Err(Error::at(flag, format!("unknown flag, expected one of {}", allowed.join(", "))));
        }
        let mut value = |what: &str| -> kharden::Result<String> {
            let v = match &inline {
                Some(v) => v.clone(),
                None => it.next().cloned().ok_or_else(|| Error::at(flag, format!("expected {what} after it")))?,
            };
            if v.is_empty() || v.starts_with("--") {
                return Err(Error::at(flag, format!("expected {what}, got '{v}'")));
            }
            Ok(v)
        };
        let number = |v: String, lo: u64, hi: u64| -> kharden::Result<u32> {
            match v.replace('_', "").parse::<u64>() {
                Ok(n) if (lo..=hi).contains(&n) => Ok(n as u32),
                _ => Err(Error::at(flag, format!("expected an integer from {lo} to {hi}, got '{v}'"))),
            }
        };
        match flag {
            "--iterations" => f.iterations = Some(number(value("a number")?, 2, i32::MAX as u64)?),
            "--threads" => f.threads = Some(number(value("a number")?, 1, 256)?),
            "--repeat" => f.repeat = Some(number(value("a number")?, 1, 100)?),
            "--machine" => f.machine = Some(value("a machine name or profile path")?),
            "--json" => {
                if inline.is_some() {
                    return Err(Error::at(flag, "takes no value"));
                }
                f.json = true
            }
            _ => f.help = true,
        }
    }
    Ok(f)
}

/// Writes to stdout; a closed pipe (`| head`) ends the output quietly instead of panicking.
fn out(text: &str) -> kharden::Result<()> {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    match o.write_all(text.as_bytes()).and_then(|_| o.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Error::new(format!("stdout: {e}"))),
        _ => Ok(()),
    }
}

fn print_json(text: serde_json::Result<String>) -> kharden::Result<()> {
    out(&(text.map_err(|e| Error::new(format!("json: {e}")))? + "\n"))
}

pub fn run(args: Args) -> kharden::Result<()> {
    match args.action {
        Action::Bench { flags } => {
            let f = parse_flags(&flags, &["--iterations", "--threads", "--repeat", "--json"])?;
            if f.help {
                return out(&format!("{BENCH_USAGE}\n"));
            }
            let results = bench::run_repeated(
                f.iterations.unwrap_or(bench::DEFAULT_ITERATIONS),
                f.threads.unwrap_or(1),
                f.repeat.unwrap_or(bench::DEFAULT_REPEATS),
            );
            if results.is_empty() {
                return Err(Error::new("refcount bench: no refcount implementation runs on this host (x86-64 and arm64 only)"));
            }
            if f.json {
                print_json(serde_json::to_string_pretty(&results))?;
            } else {
                out(&bench::render(&results))?;
            }
            if let Some(r) = results.iter().find(|r| !r.in_sync) {
                return Err(Error::new(format!("refcount bench: {} {} loop ended out of sync", r.implementation, r.variant)));
            }
            Ok(())
        }
        Action::Model { flags } => {
            let f = parse_flags(&flags, &["--machine", "--json"])?;
            if f.help {
                return out(&format!("{MODEL_USAGE}\n"));
            }
            let machine = match &f.machine {
                Some(m) => Some(kharden::machine::load(m).map_err(|e| Error::at("--machine", e))?),
                None => None,
            };
            let t = model::model_report(machine.as_ref())?;
            if f.json {
                print_json(serde_json::to_string_pretty(&t))
            } else {
                let mut text = format!("{t}(inc/dec cycles: one operation, loop control subtracted; seconds at the core's clock)\n");
                for line in model::fitted_parameters()? {
                    text += &format!("fitted: {line}\n");
                }
                out(&text)
            }
        }
        Action::Selftest { flags } => {
            let f = parse_flags(&flags, &["--threads", "--iterations"])?;
            if f.help {
                return out(&format!("{SELFTEST_USAGE}\n"));
            }
            let failures = native::selftest(f.threads.unwrap_or(4), f.iterations.unwrap_or(100_000));
            if failures != 0 {
                return Err(Error::new(format!("refcount selftest: {failures} failure(s)")));
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn flags_parse_and_reject_with_one_line() {
        let all = ["--iterations", "--threads", "--json"];
        let f = parse_flags(&s(&["--iterations", "1000", "--threads=2", "--json"]), &all).unwrap();
        assert_eq!((f.iterations, f.threads, f.json), (Some(1000), Some(2), true));
        for bad in [
            vec!["--iterations"],
            vec!["--iterations", "x"],
            vec!["--iterations", "1"],
            vec!["--threads", "0"],
            vec!["--threads", "9999"],
            vec!["--frobnicate"],
            vec!["--json=yes"],
        ] {
            let e = parse_flags(&s(&bad), &all).unwrap_err().to_string();
            assert!(!e.contains('\n') && e.starts_with("--"), "{bad:?}: {e}");
        }
        assert!(parse_flags(&s(&["--machine", "x"]), &all).is_err());
    }

    #[test]
    fn bench_command_with_a_tiny_bound() {
        let bench = |flags: &[&str]| run(Args { action: Action::Bench { flags: s(flags) } });
        bench(&["--iterations", "1000", "--repeat", "1"]).unwrap();
        bench(&["--iterations", "1000", "--threads", "2", "--json"]).unwrap();
        let e = bench(&["--iterations", "0"]).unwrap_err().to_string();
        assert!(e.starts_with("--iterations") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn model_command() {
        let model = |flags: &[&str]| run(Args { action: Action::Model { flags: s(flags) } });
        model(&[]).unwrap();
        model(&["--machine", "cortex-a57-opteron-a1100"]).unwrap();
        let e = model(&["--machine", "no-such-machine"]).unwrap_err().to_string();
        assert!(e.starts_with("--machine") && !e.contains('\n'), "{e}");
    }
}
