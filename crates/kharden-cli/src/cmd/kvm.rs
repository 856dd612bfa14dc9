//! KVM commands: `kharden check --defense kvm-cr0wp:VARIANT` (the CR0.WP oracle on every
//! MMU) and `kharden run --workload ssdd --virt kvm --mmu M` (one guest run's counters).

use clap::Args as ClapArgs;
use kharden::params::{Overrides, Params};
use kharden::virt::params::{GuestParams, KvmCosts};
use kharden::virt::{self, MmuFlavour, SsddOptions, SsddOutcome, SsddWords, Variant};
use kharden::{machine, Error, Result};

pub fn check(variant: &str, machines: &[String], overrides: &Overrides) -> Result<()> {
    let variant = Variant::parse(variant).map_err(|e| Error::at("kvm-cr0wp variant", e))?;
    let names = if machines.is_empty() {
        vec!["skylake-i7-6700k".to_string()]
    } else {
        machines.to_vec()
    };
    let mut violations = 0;
    for name in &names {
        let m = overrides.apply_machine(&machine::load(name)?)?;
        for (flavour, found) in virt::ssdd::check_variant(&m, variant, &Params::linux())? {
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

/// `run`'s options for a guest under KVM: ssdd's, and a syscall loop's under `--virt kvm`.
#[derive(ClapArgs)]
pub struct GuestArgs {
    /// ssdd, syscall-loop: the hypervisor the guest runs under (kvm).
    #[arg(long)]
    pub(crate) virt: Option<String>,
    /// syscall-loop under --virt kvm, ssdd's kernel-model guest: the host page size backing
    /// guest RAM, the EPT's leaf size (4k, 2m: transparent huge pages, 1g: hugetlbfs) [default: 2m]
    #[arg(long)]
    pub(crate) ept_page: Option<String>,
    /// ssdd, syscall-loop under --virt kvm: KVM's MMU: legacy, tdp or shadow (shadow: ssdd's
    /// path model only) [default: tdp]
    #[arg(long)]
    pub(crate) mmu: Option<String>,
    /// ssdd, syscall-loop under --virt kvm: KVM's CR0 handling: base, keep-roots,
    /// guest-owned-wp, broken-keep-roots [default: base]
    #[arg(long)]
    pub(crate) kvm_variant: Option<String>,
    /// ssdd: the guest, `path` (the ssdd path model of virt/guest.rs) or `kernel` (the
    /// kernel model itself with KERNEXEC, one vCPU; tdp or legacy MMU) [default: path]
    #[arg(long)]
    pub(crate) guest_model: Option<String>,
    /// ssdd: guest vCPUs [default: 1]
    #[arg(long)]
    pub(crate) vcpus: Option<u64>,
}

impl GuestArgs {
    /// The VM a syscall loop runs in under `--virt kvm`.
    pub(crate) fn vm(
        &self,
        m: &machine::MachineProfile,
        params: &Params,
    ) -> Result<Option<virt::KernelVm>> {
        match self.virt.as_deref() {
            None => Ok(None),
            Some("kvm") => {
                let vm = virt::kernel_guest::GuestVmOptions::parse(
                    self.mmu.as_deref(),
                    self.kvm_variant.as_deref(),
                    self.ept_page.as_deref(),
                    |o| format!("--{}", o.replace('_', "-")),
                )?;
                vm.vm(m, params).map(Some)
            }
            Some(other) => Err(Error::new(format!("--virt: expected kvm, got \"{other}\""))),
        }
    }
}

/// `run --workload ssdd`: prints run time and the VM's counters per ssdd step. The two
/// quantities `reproduce kvm-cr0wp` fits are parameters: `--set
/// guest.guest_work_cycles_per_step=N --set kvm.unload_cycles=N` (it prints their values).
pub fn run_ssdd(machine_name: &str, args: &GuestArgs, overrides: &Overrides) -> Result<()> {
    match args.virt.as_deref() {
        Some("kvm") => {}
        Some(other) => return Err(Error::new(format!("--virt: expected kvm, got \"{other}\""))),
        None => {
            return Err(Error::new(
                "--workload ssdd runs in a guest: add --virt kvm",
            ))
        }
    }
    let words = SsddWords {
        mmu: args.mmu.as_deref(),
        kvm_variant: args.kvm_variant.as_deref(),
        guest_model: args.guest_model.as_deref(),
        vcpus: args.vcpus,
        ept_page: args.ept_page.as_deref(),
    };
    let opts = SsddOptions::parse(&words, |o| format!("--{}", o.replace('_', "-")))?;
    let m = overrides.apply_machine(&machine::load(machine_name)?)?;
    let mut params = Params::linux();
    overrides.apply(&mut params)?;
    let guest = GuestParams::from(&params);
    let (mmu, variant) = (opts.flavour.name(), opts.variant.name());
    match opts.run(&m, &params)? {
        SsddOutcome::Path(r) => {
            println!(
                "ssdd (10 pairs x 10000 steps) in a KERNEXEC guest, {} MMU, {}, {} vCPU(s) on {}: {:.3} s (guest.guest_work_cycles_per_step={:.0}, kvm.unload_cycles={:.0}: `reproduce kvm-cr0wp` fits both and prints them; pass them with --set)",
                mmu, variant, opts.vcpus, m.name, r.seconds, guest.guest_work_cycles_per_step, KvmCosts::from(&params).unload_cycles
            );
            let n = r.measured_steps as f64;
            print_per_step(&r.counts.exits, n, r.counts.cr0_writes, &r.mmu);
            print_counts(
                n,
                &[
                    (r.counts.ept_violations, "EPT violations"),
                    (r.counts.shadow_pf, "shadow #PF exits"),
                    (r.counts.pt_write_faults, "guest page-table writes emulated"),
                    (
                        r.counts.sw_walks,
                        "guest page-table walks by KVM in software",
                    ),
                    (r.counts.walks, "TLB-miss walks"),
                    (r.counts.flushes, "INVEPT/INVVPID"),
                ],
            );
            for (name, c) in r.per_step.named() {
                println!(
                    "{:>12.3}  us per step {name}",
                    c / m.cpu.frequency_ghz / 1e3
                );
            }
        }
        SsddOutcome::Kernel(r) => print_kernel_ssdd(&opts, &m, &guest, &r),
    }
    Ok(())
}

/// `run --workload ssdd --guest-model kernel`: the kernel model itself as the guest, with
/// KERNEXEC, on one vCPU (virt/kernel_guest.rs). Its guest work per step is
/// `--set guest.guest_work_cycles_per_step`, as for the path model.
fn print_kernel_ssdd(
    opts: &SsddOptions,
    m: &machine::MachineProfile,
    guest: &GuestParams,
    r: &virt::kernel_ssdd::KernelSsdd,
) {
    println!(
        "ssdd ({} pairs x {} steps) on the kernel model with KERNEXEC, one vCPU, {} MMU, {}, {} EPT pages, on {}: {:.3} s (guest.guest_work_cycles_per_step={:.0})",
        guest.pairs, guest.steps_per_pair, opts.flavour.name(), opts.variant.name(), virt::kernel_guest::backing_name(opts.backing), m.name, r.seconds,
        guest.guest_work_cycles_per_step
    );
    let n = r.per_step.steps as f64;
    print_per_step(&r.counts.exits, n, r.counts.cr0_writes, &r.mmu);
    print_counts(n, &[(r.counts.flushes, "INVEPT")]);
    use kharden::sim::{Counter, TimeCategory};
    for c in [
        Counter::PageWalks,
        Counter::EptWalks,
        Counter::EptViolations,
        Counter::ContextSwitches,
    ] {
        println!(
            "{:>12.2}  {} per step",
            r.per_step.stats.counter(c) as f64 / n,
            c.name()
        );
    }
    for &c in TimeCategory::ALL {
        let t = r.per_step.stats.time(c).secs();
        if t > 0.0 {
            println!("{:>12.3}  us per step {}", t * 1e6 / n, c.name());
        }
    }
}

/// Exits by reason, CR0 writes and what KVM's MMU did, each per ssdd step of `n`.
fn print_per_step(exits: &[u64; 3], n: f64, cr0_writes: u64, mmu: &virt::kvm_mmu::MmuStats) {
    for (i, reason) in virt::vmx::ExitReason::ALL.iter().enumerate() {
        println!(
            "{:>12.2}  exits {} per step",
            exits[i] as f64 / n,
            reason.name()
        );
    }
    print_counts(
        n,
        &[
            (cr0_writes, "CR0 writes"),
            (mmu.resets, "kvm_mmu_reset_context"),
            (mmu.roots_freed, "roots put"),
            (mmu.roots_built, "roots built"),
            (mmu.roots_zapped, "roots zapped"),
        ],
    );
}

fn print_counts(n: f64, counts: &[(u64, &str)]) {
    for &(v, what) in counts {
        println!("{:>12.2}  {what} per step", v as f64 / n);
    }
}

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: KvmCommand,
}

#[derive(clap::Subcommand)]
enum KvmCommand {
    /// A minimal guest through /dev/kvm toggling CR0.WP, timed natively, beside the model.
    Bench {
        /// CR0 writes per KVM_RUN round trip.
        #[arg(long, default_value_t = 1000)]
        toggles: u32,
        /// KVM_RUN round trips timed.
        #[arg(long, default_value_t = 2000)]
        exits: u64,
        /// Machine profile the model's figures are computed for.
        #[arg(long, default_value = "skylake-i7-6700k")]
        machine: String,
    },
}

pub fn run(args: Args) -> Result<()> {
    match args.command {
        KvmCommand::Bench {
            toggles,
            exits,
            machine: name,
        } => bench(toggles, exits, &name),
    }
}

fn bench(toggles: u32, exits: u64, name: &str) -> Result<()> {
    let m = machine::load(name)?;
    println!("model, {name}: one CR0.WP write per MMU and KVM variant (exit, handler, MMU work; refills excluded):");
    let hw = m
        .virt
        .clone()
        .ok_or_else(|| Error::new(format!("machines/{name}.toml: no [virt] section")))?;
    let c = KvmCosts::from(&Params::linux());
    let exit = hw.vmexit_cycles + hw.vmentry_cycles + c.exit_software_cycles;
    let ns = |cycles: f64| cycles / m.cpu.frequency_ghz;
    for v in Variant::ALL {
        for f in MmuFlavour::ALL {
            let mut mmu = kharden::virt::kvm_mmu::KvmMmu::new(
                f,
                v,
                0,
                kharden::virt::vmx::CR0_PG | kharden::virt::vmx::CR0_WP,
            );
            let root = kharden::arch::x86::Pfn(1);
            mmu.load(root, &c);
            let owned = v.guest_owns_wp(f, hw.flavour);
            let mut cycles = if owned {
                0.0
            } else {
                exit + c.cr0_handler_cycles
            };
            if !owned {
                cycles += mmu.post_set_cr0(
                    kharden::virt::vmx::CR0_PG | kharden::virt::vmx::CR0_WP,
                    kharden::virt::vmx::CR0_PG,
                    &c,
                );
                if mmu.current_root().is_none() {
                    let (l, _) = mmu.load(root, &c);
                    cycles += l.handler + l.root_alloc + hw.invept_cycles;
                }
            }
            println!("  {:<18} {:<7} {:>8.0} ns", v.name(), f.name(), ns(cycles));
        }
    }
    #[cfg(target_os = "linux")]
    {
        let r = virt::native::bench(toggles, exits)?;
        println!(
            "native, this host (/dev/kvm): {:.1} ns per CR0.WP write beyond the loop without it ({} writes), {:.1} ns per iteration of that loop (5 instructions), {:.0} ns per KVM_RUN round trip with an I/O exit",
            r.ns_per_toggle, r.toggles, r.ns_per_plain_iteration, r.ns_per_io_exit
        );
        // Five register instructions take a few ns on a CPU running the guest directly.
        if r.ns_per_plain_iteration > 50.0 {
            println!("  this host emulates the guest's every instruction (a real-mode guest without unrestricted-guest support, or a software flavour of /dev/kvm): the figures measure its emulator, not a CR0.WP exit, and are not comparable with the model's");
        } else {
            println!("  (a toggle far below one round trip means the host kernel does not exit on CR0.WP writes: guest-owned WP on VMX with EPT since 6.4; on SVM, KVM's selective CR0 write intercept makes every toggle exit)");
        }
    }
    Ok(())
}
