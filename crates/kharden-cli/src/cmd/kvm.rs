//! KVM commands: `kharden check --defense kvm-cr0wp:VARIANT` (the CR0.WP oracle on every
//! MMU) and `kharden run --workload ssdd --virt kvm --mmu M` (one guest run's counters).

use kharden::virt::{self, MmuFlavour, SsddConfig, Variant};
use kharden::{machine, Error, Result};

pub fn check(variant: &str, machines: &[String]) -> Result<()> {
    let variant = Variant::parse(variant)?;
    let names = if machines.is_empty() {
        vec!["skylake-i7-6700k".to_string()]
    } else {
        machines.to_vec()
    };
    let mut violations = 0;
    for name in &names {
        let m = machine::load(name)?;
        for (flavour, found) in virt::oracle::check_variant(&m, variant)? {
            let verdict = match found.first() {
                None => "ok".to_string(),
                Some(v) => {
                    violations += 1;
                    format!("VIOLATION ({} times): {v}", found.len())
                }
            };
            println!("{name:<22} {:<14} {verdict}", flavour.name());
        }
    }
    println!("property: after every CR0 write, guest supervisor writes to read-only pages fault iff CR0.WP=1 (hardware and KVM-emulated)");
    if violations > 0 {
        return Err(Error::new(format!(
            "check: kvm-cr0wp:{} violated its security property on {violations} MMUs",
            variant.name()
        )));
    }
    println!(
        "kvm-cr0wp:{}: security property held in every run",
        variant.name()
    );
    Ok(())
}

/// `run --workload ssdd`: prints run time and the VM's counters per ssdd step.
pub fn run_ssdd(
    machine_name: &str,
    virt: Option<&str>,
    mmu: &str,
    variant: &str,
    vcpus: u64,
) -> Result<()> {
    match virt {
        Some("kvm") => {}
        Some(other) => return Err(Error::new(format!("--virt: expected kvm, got \"{other}\""))),
        None => {
            return Err(Error::new(
                "--workload ssdd runs in a guest: add --virt kvm",
            ))
        }
    }
    let m = machine::load(machine_name)?;
    let mut cfg = SsddConfig::new(MmuFlavour::parse(mmu)?, Variant::parse(variant)?);
    cfg.vcpus = vcpus;
    let r = virt::run_ssdd(&m, &cfg)?;
    println!(
        "ssdd (10 pairs x 10000 steps) in a KERNEXEC guest, {} MMU, {}, {} vCPU(s) on {}: {:.3} s (guest work per step not fitted here: see `reproduce kvm-cr0wp`)",
        mmu, variant, vcpus, m.name, r.seconds
    );
    let n = r.measured_steps as f64;
    for (i, reason) in virt::vmx::ExitReason::ALL.iter().enumerate() {
        println!(
            "{:>12.2}  exits {} per step",
            r.counts.exits[i] as f64 / n,
            reason.name()
        );
    }
    for (v, what) in [
        (r.counts.cr0_writes, "CR0 writes"),
        (r.mmu.resets, "kvm_mmu_reset_context"),
        (r.mmu.roots_freed, "roots put"),
        (r.mmu.roots_built, "roots built"),
        (r.mmu.roots_zapped, "roots zapped"),
        (r.counts.ept_violations, "EPT violations"),
        (r.counts.shadow_pf, "shadow #PF exits"),
        (r.counts.walks, "TLB-miss walks"),
        (r.counts.flushes, "INVEPT/INVVPID"),
    ] {
        println!("{:>12.2}  {what} per step", v as f64 / n);
    }
    for (name, c) in r.per_step.named() {
        println!(
            "{:>12.3}  us per step {name}",
            c / m.cpu.frequency_ghz / 1e3
        );
    }
    Ok(())
}
