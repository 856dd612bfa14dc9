//! `kharden check --defense D [--machine M]`: runs every syscall of the table under the
//! defense, then the staged scenarios (oracle/scenario.rs: a page handed between CPUs, a
//! page given to one thread while its sibling runs elsewhere), with the security oracle
//! checking at every return to user mode.

use clap::Args as ClapArgs;
use kharden::kernel::{syscall, Kernel};
use kharden::oracle::{scenario, OracleMode, Violation};
use kharden::workload::SyscallLoop;
use kharden::{machine, Error, Result};

#[derive(ClapArgs)]
pub struct Args {
    /// Comma-separated defenses, e.g. "pti:linux".
    #[arg(long)]
    defense: String,
    /// Machines to check on (repeatable); default: one with PCID+INVPCID, one with PCID only, one without PCID (for text-repl: two 2-socket machines and a 1-node one).
    #[arg(long)]
    machine: Vec<String>,
    #[command(flatten)]
    set: super::params::SetArgs,
}

pub fn run(args: Args) -> Result<()> {
    let overrides = args.set.resolve()?;
    if let Some(variant) = args.defense.strip_prefix("kvm-cr0wp:") {
        return super::kvm::check(variant, &args.machine, &overrides);
    }
    let mut params = kharden::params::Params::linux();
    overrides.apply(&mut params)?;
    // Text replication acts across NUMA nodes: its defaults have two.
    let defaults = if kharden::defense::registry::families_in(&args.defense).contains(&"text-repl")
    {
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
                super::defenses::parse(&args.defense, &profile)?,
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
                    super::defenses::parse(&args.defense, &profile)?,
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
            "check: {} violated its security property in {violations} runs",
            args.defense
        )));
    }
    println!("{}: security property held in every run", args.defense);
    Ok(())
}
