//! `kharden refcount bench [--iterations N] [--threads T] [--repeat R] [--json]`
//! `kharden refcount model [--machine M] [--schedule IMPL] [--json]`
//! `kharden refcount selftest [--threads T] [--iterations N]`
use clap::builder::NonEmptyStringValueParser;
use clap::{Args as ClapArgs, Subcommand};
use kharden::Error;
use kharden_refcount::{bench, model, native, Impl};

#[derive(ClapArgs)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand)]
enum Action {
    /// Run LKDTM's ATOMIC_TIMING and REFCOUNT_TIMING loops natively for every refcount
    /// implementation this host can run (time, ns per operation, ratio to atomic_t).
    Bench(BenchArgs),
    /// The arm64/x86-64 cost model (traced instructions on an out-of-order core model):
    /// LKDTM's loops and one operation's cycles, on one machine (--machine M) or on every
    /// core table; --schedule IMPL shows where one implementation's loop time goes.
    Model(ModelArgs),
    /// Run the functional tests of every implementation on this host.
    Selftest(SelftestArgs),
}

#[derive(ClapArgs, Debug, PartialEq)]
struct BenchArgs {
    /// Loop bound (LKDTM uses INT_MAX).
    #[arg(long, value_name = "N", allow_negative_numbers = true, default_value_t = bench::DEFAULT_ITERATIONS, value_parser = integer(2, i32::MAX as u32))]
    iterations: u32,
    /// T threads on one counter.
    #[arg(long, value_name = "T", allow_negative_numbers = true, default_value_t = 1, value_parser = integer(1, 256))]
    threads: u32,
    /// Runs per implementation, fastest kept.
    #[arg(long, value_name = "R", allow_negative_numbers = true, default_value_t = bench::DEFAULT_REPEATS, value_parser = integer(1, 100))]
    repeat: u32,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(ClapArgs, Debug, PartialEq)]
struct ModelArgs {
    /// Machine name from `kharden machines`, or a path to a profile TOML (default: every core table).
    #[arg(long, value_name = "M", value_parser = NonEmptyStringValueParser::new())]
    machine: Option<String>,
    /// Print, instruction by instruction, when each issues and completes in a steady-state
    /// iteration of IMPL's loops (atomic_t, fast, full or fetch_add), on the machine's core
    /// or on seed 001's Cortex-A57.
    #[arg(long, value_name = "IMPL", value_parser = implementation)]
    schedule: Option<Impl>,
    /// Print the table as JSON.
    #[arg(long)]
    json: bool,
}

fn implementation(v: &str) -> Result<Impl, String> {
    Impl::from_name(v).ok_or_else(|| {
        let names: Vec<&str> = Impl::ALL.iter().map(|i| i.name()).collect();
        format!("expected one of {}", names.join(", "))
    })
}

#[derive(ClapArgs, Debug, PartialEq)]
struct SelftestArgs {
    /// Threads on one counter.
    #[arg(long, value_name = "T", allow_negative_numbers = true, default_value_t = 4, value_parser = integer(1, 256))]
    threads: u32,
    /// Increments per thread.
    #[arg(long, value_name = "N", allow_negative_numbers = true, default_value_t = 100_000, value_parser = integer(2, i32::MAX as u32))]
    iterations: u32,
}

/// A value parser for an integer from `lo` to `hi`; '_' may separate digits (1_000_000).
fn integer(
    lo: u32,
    hi: u32,
) -> impl Fn(&str) -> Result<u32, String> + Clone + Send + Sync + 'static {
    move |v: &str| match v.replace('_', "").parse::<u64>() {
        Ok(n) if (lo as u64..=hi as u64).contains(&n) => Ok(n as u32),
        _ => Err(format!("expected an integer from {lo} to {hi}")),
    }
}

/// Writes to stdout; a closed pipe (`| head`) ends the output quietly instead of panicking.
fn out(text: &str) -> kharden::Result<()> {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    match o.write_all(text.as_bytes()).and_then(|_| o.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Error::new(format!("stdout: {e}")))
        }
        _ => Ok(()),
    }
}

fn print_json(text: serde_json::Result<String>) -> kharden::Result<()> {
    out(&(text.map_err(|e| Error::new(format!("json: {e}")))? + "\n"))
}

pub fn run(args: Args) -> kharden::Result<()> {
    match args.action {
        Action::Bench(f) => {
            let results = bench::run_repeated(f.iterations, f.threads, f.repeat);
            if results.is_empty() {
                return Err(Error::new("refcount bench: no refcount implementation runs on this host (x86-64 and arm64 only)"));
            }
            if f.json {
                print_json(serde_json::to_string_pretty(&results))?;
            } else {
                out(&bench::render(&results))?;
            }
            if let Some(r) = results.iter().find(|r| !r.in_sync) {
                return Err(Error::new(format!(
                    "refcount bench: {} {} loop ended out of sync",
                    r.implementation, r.variant
                )));
            }
            Ok(())
        }
        Action::Model(f) => {
            let machine = match &f.machine {
                Some(m) => Some(kharden::machine::load(m).map_err(|e| Error::at("--machine", e))?),
                None => None,
            };
            if let Some(imp) = f.schedule {
                let tables = model::schedule_report(machine.as_ref(), imp)?;
                return if f.json {
                    print_json(serde_json::to_string_pretty(&tables))
                } else {
                    out(&tables.iter().map(|t| format!("{t}\n")).collect::<String>())
                };
            }
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
        Action::Selftest(f) => {
            let failures = native::selftest(f.threads, f.iterations);
            if failures != 0 {
                return Err(Error::new(format!(
                    "refcount selftest: {failures} failure(s)"
                )));
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cli, Command};
    use clap::error::ErrorKind;
    use clap::Parser;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        match Cli::try_parse_from(["kharden", "refcount"].iter().chain(args))?.command {
            Command::Refcount(a) => Ok(a),
            _ => panic!("{args:?}: not parsed as 'refcount'"),
        }
    }

    fn bench_args(flags: &[&str]) -> Result<BenchArgs, clap::Error> {
        match parse(&[&["bench"], flags].concat())?.action {
            Action::Bench(f) => Ok(f),
            _ => unreachable!(),
        }
    }

    #[test]
    fn flags_parse_with_their_defaults() {
        let f = bench_args(&["--iterations", "1000", "--threads=2", "--json"]).unwrap();
        assert_eq!(
            f,
            BenchArgs {
                iterations: 1000,
                threads: 2,
                repeat: bench::DEFAULT_REPEATS,
                json: true
            }
        );
        let f = bench_args(&["--iterations=1_000_000", "--repeat", "100"]).unwrap();
        assert_eq!(
            (f.iterations, f.threads, f.repeat, f.json),
            (1_000_000, 1, 100, false)
        );
        assert_eq!(
            bench_args(&["--iterations", "2147483647"])
                .unwrap()
                .iterations,
            i32::MAX as u32
        );
        assert_eq!(
            bench_args(&[]).unwrap().iterations,
            bench::DEFAULT_ITERATIONS
        );
        match parse(&["selftest"]).unwrap().action {
            Action::Selftest(f) => assert_eq!(
                f,
                SelftestArgs {
                    threads: 4,
                    iterations: 100_000
                }
            ),
            _ => unreachable!(),
        }
        match parse(&["model", "--machine", "x", "--json"])
            .unwrap()
            .action
        {
            Action::Model(f) => assert_eq!(
                f,
                ModelArgs {
                    machine: Some("x".into()),
                    schedule: None,
                    json: true
                }
            ),
            _ => unreachable!(),
        }
        for sub in ["bench", "model", "selftest"] {
            assert_eq!(
                parse(&[sub, "--help"]).err().map(|e| e.kind()),
                Some(ErrorKind::DisplayHelp),
                "{sub}"
            );
        }
    }

    #[test]
    fn bad_flags_are_rejected_naming_the_flag() {
        for (bad, expect) in [
            (vec!["bench", "--iterations"], "'--iterations <N>'"),
            (
                vec!["bench", "--iterations", "x"],
                "for '--iterations <N>': expected an integer from 2 to 2147483647",
            ),
            (
                vec!["bench", "--iterations", "1"],
                "for '--iterations <N>': expected an integer from 2",
            ),
            (
                vec!["bench", "--iterations", "0"],
                "for '--iterations <N>': expected an integer from 2",
            ),
            (
                vec!["bench", "--iterations", "2147483648"],
                "for '--iterations <N>': expected an integer",
            ),
            (
                vec!["bench", "--threads", "0"],
                "for '--threads <T>': expected an integer from 1 to 256",
            ),
            (
                vec!["bench", "--threads", "9999"],
                "for '--threads <T>': expected an integer from 1 to 256",
            ),
            (
                vec!["bench", "--repeat", "101"],
                "for '--repeat <R>': expected an integer from 1 to 100",
            ),
            (vec!["bench", "--frobnicate"], "'--frobnicate'"),
            (vec!["bench", "--json=yes"], "'--json'"),
            (vec!["bench", "--machine", "x"], "'--machine'"),
            (vec!["model", "--threads", "2"], "'--threads'"),
            (vec!["model", "--machine="], "'--machine <M>'"),
            (
                vec!["model", "--schedule", "paranoid"],
                "for '--schedule <IMPL>': expected one of atomic_t, fast, full, fetch_add",
            ),
            (vec!["selftest", "--json"], "'--json'"),
            (
                vec!["selftest", "--threads", "-1"],
                "for '--threads <T>': expected an integer from 1 to 256",
            ),
            (
                vec!["bench", "--iterations", "--json"],
                "'--iterations <N>'",
            ),
        ] {
            let e = parse(&bad)
                .err()
                .unwrap_or_else(|| panic!("{bad:?} accepted"))
                .to_string();
            let first = e.lines().next().unwrap_or_default();
            assert!(first.contains(expect), "{bad:?}: {first}");
        }
    }

    #[test]
    fn bench_command_with_a_tiny_bound() {
        run(parse(&["bench", "--iterations", "1000", "--repeat", "1"]).unwrap()).unwrap();
        run(parse(&["bench", "--iterations", "1000", "--threads", "2", "--json"]).unwrap())
            .unwrap();
    }

    #[test]
    fn model_command() {
        run(parse(&["model"]).unwrap()).unwrap();
        run(parse(&["model", "--machine", "cortex-a57-opteron-a1100"]).unwrap()).unwrap();
        run(parse(&["model", "--schedule", "fast"]).unwrap()).unwrap();
        run(parse(&[
            "model",
            "--schedule",
            "full",
            "--machine",
            "haswell-i7-4770",
            "--json",
        ])
        .unwrap())
        .unwrap();
        let e = run(parse(&["model", "--machine", "no-such-machine"]).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--machine") && !e.contains('\n'), "{e}");
    }
}
