//! `kharden check --defense D [--machine M]`: runs every syscall of the table under the
//! defense with the security oracle checking at every return to user mode.

use clap::Args as ClapArgs;
use kharden::kernel::{syscall, Kernel};
use kharden::oracle::OracleMode;
use kharden::workload::SyscallLoop;
use kharden::{machine, Error, Result};

#[derive(ClapArgs)]
pub struct Args {
    /// Comma-separated defenses, e.g. "pti:linux".
    #[arg(long)]
    defense: String,
    /// Machines to check on (repeatable); default: one with PCID+INVPCID, one with PCID only, one without PCID.
    #[arg(long)]
    machine: Vec<String>,
}

pub fn run(args: Args) -> Result<()> {
    let machines = if args.machine.is_empty() {
        ["haswell-i7-4770", "sandybridge-i7-2600", "nehalem-i7-920"].iter().filter(|n| machine::names().contains(n)).map(|s| s.to_string()).collect()
    } else {
        args.machine.clone()
    };
    let mut violations = 0;
    for m in &machines {
        let profile = machine::load(m)?;
        for name in syscall::names() {
            let mut k = Kernel::boot(profile.clone(), super::defenses::parse(&args.defense, &profile)?);
            k.config.oracle = OracleMode::Every;
            SyscallLoop::new(name, 50)?.run(&mut k)?;
            let verdict = match k.violations.first() {
                None => "ok".to_string(),
                Some(v) => {
                    violations += 1;
                    format!("VIOLATION ({} times): {}", k.violations.len(), v.what)
                }
            };
            println!("{:<22} {:<12} {verdict}", m, name);
        }
    }
    if violations > 0 {
        return Err(Error::new(format!("check: {} violated its security property in {violations} runs", args.defense)));
    }
    println!("{}: security property held in every run", args.defense);
    if args.defense.contains("xpfo") {
        println!("note: these runs are single-task syscall loops; XPFO's deferred-flush holes need a page used on two CPUs and a migration, which the tests in defense/xpfo.rs stage");
    }
    Ok(())
}
