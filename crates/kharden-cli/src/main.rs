//! `kharden`: the command line. Each subcommand lives in `cmd/` and returns a
//! `kharden::Result`; errors print as one line on stderr with exit status 2.

mod cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "kharden", version, about = "What a memory-protection hardening mechanism costs on a given machine, and whether it still protects")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the machine library, show one profile, or detect this host.
    #[command(alias = "machine")]
    Machines(cmd::machines::Args),
    /// Record a command's kernel activity (perf tracepoints) into a kharden trace.
    Record(cmd::trace::RecordArgs),
    /// Inspect kharden traces.
    Trace(cmd::trace::TraceArgs),
    /// Refcount implementations: native benchmark (LKDTM style).
    Refcount(cmd::refcount::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Machines(args) => cmd::machines::run(args),
        Command::Refcount(args) => cmd::refcount::run(args),
        Command::Record(args) => cmd::trace::record(args),
        Command::Trace(args) => cmd::trace::trace(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kharden: {e}");
            ExitCode::from(2)
        }
    }
}
