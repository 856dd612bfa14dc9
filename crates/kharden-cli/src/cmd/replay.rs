//! `kharden replay TRACE --machine M [--defense D] [--scale-jobs N]`: a recorded run's tasks
//! re-executed on a machine model with kharden's scheduler.

use clap::Args as ClapArgs;
use kharden::kernel::Kernel;
use kharden::{machine, Error, Result};
use kharden_trace::progress::Progress;
use kharden_trace::replay;
use kharden_trace::scratch::Scratch;
use std::path::PathBuf;

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

fn this_host_ghz() -> Result<f64> {
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

pub fn run(args: Args) -> Result<()> {
    let m = machine::load(&args.machine)?;
    let defenses = super::defenses::parse(&args.defense, &m)?;
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
    // A private scratch directory, removed on return and on Ctrl-C.
    let scratch = Scratch::new("replay")?;
    let split = replay::split(&args.trace, scratch.path())?;
    let program = replay::root_program(&split, host_ghz, args.scale_jobs);
    let mut progress = Progress::on_terminal();
    let out = replay::drive(Kernel::boot(m.clone(), defenses), program, |p| {
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
    drop(scratch);
    let (rec, w, ops) = (split.recorded, out.window, out.runner.ops);
    let (user, sys) = (w.tasks.user_time().secs(), w.tasks.system_time().secs());
    let (ru, rs) = (rec.user_ns as f64 / 1e9, rec.system_ns as f64 / 1e9);
    let err = |sim: f64, recd: f64| {
        if recd > 0.0 {
            (sim - recd) / recd * 100.0
        } else {
            0.0
        }
    };
    if args.json {
        let v = serde_json::json!({
            "trace": args.trace, "machine": m.name, "defense": args.defense, "scale_jobs": args.scale_jobs, "host_ghz": host_ghz,
            "recorded": rec, "simulated": { "user_s": user, "system_s": sys, "elapsed_s": w.elapsed.secs(), "operations": ops },
            "stats": w.tasks,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| Error::new(e.to_string()))?
        );
        return Ok(());
    }
    println!(
        "replay of {} on {} with {} (x{} jobs, host {host_ghz:.3} GHz): {ops} operations",
        args.trace.display(),
        m.name,
        args.defense,
        args.scale_jobs
    );
    println!(
        "recorded:  {} tasks, {} forks ({} of them vforks or posix_spawns), {} threads, {} syscalls ({} flushing the address space), {} anonymous faults",
        rec.tasks, rec.forks, rec.vforks, rec.threads, rec.syscalls, rec.flushing_syscalls, rec.anon_faults
    );
    println!("{:<10} {:>12} {:>12}", "", "user s", "system s");
    println!("{:<10} {ru:>12.3} {rs:>12.3}", "recorded");
    println!("{:<10} {user:>12.3} {sys:>12.3}", "simulated");
    if args.scale_jobs == 1 {
        println!(
            "{:<10} {:>11.1}% {:>11.1}%",
            "error",
            err(user, ru),
            err(sys, rs)
        );
    }
    println!("simulated elapsed {:.3} s", w.elapsed.secs());
    Ok(())
}
