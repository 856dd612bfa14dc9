//! `kharden check --defense D [--machine M]`: runs every syscall of the table under the
//! defense, then the staged scenarios (oracle/scenario.rs: a page handed between CPUs, a
//! page given to one thread while its sibling runs elsewhere, ...), with the security oracle
//! checking at every return to user mode. `kharden check --all-historical`: the bugs real
//! reviews and fixes found (oracle/historical.rs), each before and after its fix.

use clap::Args as ClapArgs;
use kharden::kernel::paths::syscall;
use kharden::kernel::Kernel;
use kharden::oracle::{historical, scenario, OracleMode, Violation};
use kharden::workload::SyscallLoop;
use kharden::{machine, Error, Result};

#[derive(ClapArgs)]
pub struct Args {
    /// Comma-separated defenses, e.g. "pti:linux".
    #[arg(long, required_unless_present = "all_historical")]
    defense: Option<String>,
    /// Instead of --defense: every historical bug (the code before its real fix) with the
    /// scenario that exposes it, and the fixed code beside it.
    #[arg(long, conflicts_with_all = ["defense", "machine"])]
    all_historical: bool,
    /// Machines to check on (repeatable); default: one with PCID+INVPCID, one with PCID only, one without PCID (for text-repl: two 2-socket machines and a 1-node one).
    #[arg(long)]
    machine: Vec<String>,
    #[command(flatten)]
    set: super::params::SetArgs,
}

pub fn run(args: Args) -> Result<()> {
    let overrides = args.set.resolve()?;
    let mut params = kharden::params::Params::linux();
    let Some(defense) = args.defense else {
        overrides.apply(&mut params)?;
        return historical(&params);
    };
    if let Some(variant) = defense.strip_prefix("kvm-cr0wp:") {
        return super::kvm::check(variant, &args.machine, &overrides);
    }
    overrides.apply(&mut params)?;
    // Text replication acts across NUMA nodes: its defaults have two.
    let defaults = if kharden::defense::registry::families_in(&defense).contains(&"text-repl") {
        ["xeon-e5-2690v3-2s", "epyc-7763-2s", "haswell-i7-4770"]
    } else {
        ["haswell-i7-4770", "sandybridge-i7-2600", "nehalem-i7-920"]
    };
    let machines = if args.machine.is_empty() {
        defaults
            .iter()
            .filter(|n| machine::names().contains(n))
            .map(|s| s.to_string())
            .collect()
    } else {
        args.machine.clone()
    };
    let mut violations = 0;
    let mut report = |m: &str, run: &str, found: &[Violation]| {
        let verdict = match found.first() {
            None => "ok".to_string(),
            Some(v) => {
                violations += 1;
                format!("VIOLATION ({} times): {}", found.len(), v.what)
            }
        };
        println!("{m:<22} {run:<14} {verdict}");
    };
    for m in &machines {
        let profile = overrides.apply_machine(&machine::load(m)?)?;
        for name in syscall::names() {
            let mut k = Kernel::boot_with(
                profile.clone(),
                super::defenses::parse(&defense, &profile)?,
                &params,
                OracleMode::Every,
            );
            SyscallLoop::new(name, 50)?.run(&mut k)?;
            report(m, name, &k.violations);
        }
        if profile.threads() >= 2 {
            for s in scenario::ALL {
                let found = (s.run)(
                    &profile,
                    super::defenses::parse(&defense, &profile)?,
                    &params,
                )?;
                report(m, s.name, &found);
            }
        }
    }
    for s in scenario::ALL {
        println!("{}: {}", s.name, s.what);
    }
    if violations > 0 {
        return Err(Error::new(format!(
            "check: {defense} violated its security property in {violations} runs"
        )));
    }
    println!("{defense}: security property held in every run");
    Ok(())
}

/// Every historical bug: the fix it stands for, the scenario, and whether the oracle caught
/// the code before the fix while the code after it held.
fn historical(params: &kharden::params::Params) -> Result<()> {
    let mut missed = vec![];
    for case in historical::ALL {
        let out = case.run(params)?;
        let verdict = |found: &[String]| match found.first() {
            None => "holds".to_string(),
            Some(v) => format!("VIOLATION ({} times): {v}", found.len()),
        };
        println!("{} -- {}", case.mechanism, case.fix);
        println!("  fix:       {}", case.reference);
        println!("  scenario:  {} [{}]", case.scenario, case.machine);
        println!("  seen by:   {}", case.exposure.name());
        println!("  before:    {:<40} {}", case.broken, verdict(&out.broken));
        println!("  after:     {:<40} {}", case.fixed, verdict(&out.fixed));
        let caught = out.caught();
        println!("  caught:    {}", if caught { "yes" } else { "NO" });
        if !caught {
            missed.push(case.broken);
        }
    }
    if !missed.is_empty() {
        return Err(Error::new(format!(
            "check --all-historical: not caught (or the fix violated too): {}",
            missed.join(", ")
        )));
    }
    println!(
        "all {} historical bugs caught; their fixes hold",
        historical::ALL.len()
    );
    Ok(())
}
