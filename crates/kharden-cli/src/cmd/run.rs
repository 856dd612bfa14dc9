//! `kharden run --machine M --workload W --defense D`: one simulation, perf-stat-like summary.

use clap::Args as ClapArgs;
use kharden::kernel::Kernel;
use kharden::oracle::OracleMode;
use kharden::sim::{Counter, FlushReason, TimeCategory};
use kharden::workload::{self, SyscallLoop};
use kharden::{defense, machine, Error, Result};

#[derive(ClapArgs)]
pub struct Args {
    /// Machine name from `kharden machines`, or a path to a profile TOML.
    #[arg(long)]
    machine: String,
    /// Workload (see --help of each): syscall-loop.
    #[arg(long)]
    workload: String,
    /// Comma-separated defenses, e.g. "pti:linux", "pti:freebsd,nopcid", "none".
    #[arg(long, default_value = "none")]
    defense: String,
    /// syscall-loop: the syscall (getppid, getpid, lseek, read-1, read-8k, write-1, getrusage, open-close, mmap, munmap, mprotect).
    #[arg(long, default_value = "getppid")]
    syscall: String,
    /// syscall-loop: iterations per loop.
    #[arg(long, default_value_t = 100_000)]
    iterations: u64,
    /// syscall-loop: loops, printed like FreeBSD's syscall_timing.
    #[arg(long, default_value_t = 1)]
    loops: u32,
    /// Seed of the run's random choices (same seed, same output).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<()> {
    let m = machine::load(&args.machine)?;
    workload::check_name(&args.workload)?;
    if args.loops == 0 {
        return Err(Error::new("--loops: expected a positive number"));
    }
    let _ = args.seed; // the syscall loop makes no random choices
    let mut k = Kernel::boot(m, defense::parse_list(&args.defense)?);
    k.config.oracle = OracleMode::Sampled(1024);
    let lp = SyscallLoop::new(&args.syscall, args.iterations)?;
    lp.start(&mut k)?;
    for _ in 0..lp.warmup {
        lp.measure(&mut k, 1)?;
    }
    let mut loops = vec![];
    for _ in 0..args.loops {
        loops.push(lp.measure(&mut k, args.iterations)?);
    }
    let mut total = loops[0].stats.clone();
    for l in &loops[1..] {
        total.merge(&l.stats);
    }
    let elapsed: f64 = loops.iter().map(|l| l.elapsed.secs()).sum();
    let iters = args.iterations * args.loops as u64;
    if args.json {
        let v = serde_json::json!({
            "machine": k.machine.name, "workload": args.workload, "syscall": args.syscall,
            "defense": k.defense_names(), "iterations": iters, "seconds": elapsed,
            "ns_per_iteration": elapsed * 1e9 / iters as f64,
            "violations": k.violations, "stats": total,
        });
        println!("{}", serde_json::to_string_pretty(&v).map_err(|e| Error::new(e.to_string()))?);
        return Ok(());
    }
    println!("Clock resolution: 0.000000001");
    println!("test loop time iterations periteration");
    for (i, l) in loops.iter().enumerate() {
        println!("{} {i} {:.9} {} {:.9}", args.syscall, l.elapsed.secs(), l.iterations, l.elapsed.secs() / l.iterations as f64);
    }
    let defenses = if k.defense_names().is_empty() { "none".to_string() } else { k.defense_names().join(",") };
    println!("\n Simulation stats for '{} on {} with {}':\n", args.workload, k.machine.name, defenses);
    let per = |c: Counter| total.counter(c) as f64 / iters as f64;
    for &c in TimeCategory::ALL {
        let t = total.time(c).secs();
        if t > 0.0 {
            println!("{:>16.9} s  {:<18} # {:5.1}% {:8.1} ns/iter", t, c.name(), 100.0 * t / elapsed, t * 1e9 / iters as f64);
        }
    }
    println!();
    for &c in Counter::ALL {
        if total.counter(c) > 0 {
            println!("{:>16}    {:<28} # {:8.3} /iter", total.counter(c), c.name(), per(c));
        }
    }
    for &r in FlushReason::ALL {
        if total.flushes(r) > 0 {
            println!("{:>16}    tlb:tlb_flush reason={}", total.flushes(r), r.name());
        }
    }
    println!("\n{:>16.9} seconds simulated, {} iterations, {:.1} ns/iter", elapsed, iters, elapsed * 1e9 / iters as f64);
    if k.violations.is_empty() {
        println!("security oracle: no violation (sampled at returns to user mode)");
    } else {
        println!("security oracle: {} VIOLATIONS, first: {}", k.violations.len(), k.violations[0].what);
    }
    Ok(())
}
