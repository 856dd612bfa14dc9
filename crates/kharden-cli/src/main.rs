//! `kharden`: the command line. Each subcommand lives in `cmd/` and returns a
//! `kharden::Result`; errors print as one line on stderr with exit status 2.

mod cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "kharden",
    version,
    about = "What a memory-protection hardening mechanism costs on a given machine, and whether it still protects"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run every reproduction (or one): published vs simulated, with the breakdown.
    Reproduce(cmd::reproduce::Args),
    /// One simulation with a perf-stat-like summary.
    Run(cmd::run::Args),
    /// Run the security oracle on a defense at every return to user mode.
    Check(cmd::check::Args),
    /// List the defense plug-ins and their variants.
    Defenses,
    /// The resolved parameter tree (values, units, provenance); `--set` changes any of them.
    Params(cmd::params::Args),
    /// A sweep file's points to Parquet (kharden sweep FILE), or XPFO's cost against CPUs.
    Sweep(cmd::sweep::Args),
    /// List the machine library, show one profile, or detect this host.
    #[command(alias = "machine")]
    Machines(cmd::machines::Args),
    /// Record a command's kernel activity (perf tracepoints) into a kharden trace.
    Record(cmd::trace::RecordArgs),
    /// Inspect kharden traces.
    Trace(cmd::trace::TraceArgs),
    /// Replay a recorded trace on a machine model.
    Replay(cmd::replay::Args),
    /// How far a replay of a command can be trusted here: the command untraced, recorded and
    /// replayed on a profile of this host, side by side.
    Validate(cmd::validate::Args),
    /// Refcount implementations: native benchmark (LKDTM style).
    Refcount(cmd::refcount::Args),
    /// KVM: a native CR0.WP toggle benchmark through /dev/kvm beside the model.
    Kvm(cmd::kvm::Args),
    /// Kernel path footprints: record them on this host, show the committed ones.
    Kernel(cmd::kernel::Args),
}

fn main() -> ExitCode {
    // Output piped into `head` and the like: end quietly when the reader goes, as Unix
    // tools do, instead of failing on the write (Rust ignores SIGPIPE by default).
    #[cfg(unix)]
    // SAFETY: restores the default disposition before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp
                    | clap::error::ErrorKind::DisplayVersion
                    | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) =>
        {
            e.exit()
        }
        Err(e) => {
            eprintln!(
                "kharden: {} (see 'kharden --help')",
                one_line(&e.to_string())
            );
            return ExitCode::from(2);
        }
    };
    // Host threads change how fast, never what: a bad count is still an error.
    if let Err(e) = kharden::sim::parallel::env_threads() {
        eprintln!("kharden: {e}");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Reproduce(args) => cmd::reproduce::run(args),
        Command::Run(args) => cmd::run::run(args),
        Command::Check(args) => cmd::check::run(args),
        Command::Defenses => cmd::defenses::run(),
        Command::Params(args) => cmd::params::run(args),
        Command::Sweep(args) => cmd::sweep::run(args),
        Command::Machines(args) => cmd::machines::run(args),
        Command::Refcount(args) => cmd::refcount::run(args),
        Command::Record(args) => cmd::trace::record(args),
        Command::Trace(args) => cmd::trace::trace(args),
        Command::Replay(args) => cmd::replay::run(args),
        Command::Validate(args) => cmd::validate::run(args),
        Command::Kvm(args) => cmd::kvm::run(args),
        Command::Kernel(args) => cmd::kernel::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // An error caused by an interrupt (its scratch vanished under it) is the
            // interrupt: the signal handler is cleaning up and exits with 130.
            kharden_trace::scratch::wait_if_interrupted();
            eprintln!("kharden: {e}");
            ExitCode::from(2)
        }
    }
}

/// clap explains over several lines: the line that names the problem; where it ends in a
/// colon (missing arguments), the indented lines that list what it names; and its tips
/// (`to pass 'make' as a value, use '-- make'`, `a similar argument exists: '--json'`).
fn one_line(text: &str) -> String {
    let mut lines = text.lines().skip_while(|l| l.trim().is_empty());
    let first = lines
        .next()
        .unwrap_or("invalid arguments")
        .trim_start_matches("error: ");
    let mut out = first.to_string();
    let rest: Vec<&str> = lines.collect();
    if first.ends_with(':') {
        let listed: Vec<&str> = rest
            .iter()
            .take_while(|l| l.starts_with(' '))
            .map(|l| l.trim())
            .collect();
        out = format!("{first} {}", listed.join(", "));
    }
    for tip in rest.iter().filter_map(|l| l.trim().strip_prefix("tip: ")) {
        out = format!("{out}; {tip}");
    }
    out
}
