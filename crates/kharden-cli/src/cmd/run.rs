//! `kharden run --machine M --workload W --defense D`: one simulation, perf-stat-like summary.

use clap::Args as ClapArgs;
use kharden::kernel::Kernel;
use kharden::oracle::OracleMode;
use kharden::params::{Overrides, Params};
use kharden::sim::{Counter, FlushReason, Stats, TimeCategory};
use kharden::virt::kernel_guest::{backing_name, KernelVm};
use kharden::workload::{self, SyscallLoop};
use kharden::{machine, Error, Result};

#[derive(ClapArgs)]
pub struct Args {
    /// Machine name from `kharden machines`, or a path to a profile TOML.
    #[arg(long)]
    pub(crate) machine: String,
    /// Workload: syscall-loop (FreeBSD syscall_timing style), kbuild (make -jN of compile
    /// jobs from the recorded profile), kernel-op (seed 002's timed kernel operations) or
    /// ssdd (rt-tests' ssdd in a KVM guest, with --virt kvm).
    #[arg(long)]
    workload: String,
    /// Comma-separated defenses, e.g. "pti:linux", "pti:freebsd,nopcid", "none".
    #[arg(long, default_value = "none")]
    defense: String,
    /// syscall-loop: the syscall (getppid, getpid, lseek, read-1, read-8k, write-1, getrusage, open-close, mmap, munmap, mprotect) [default: getppid]
    #[arg(long)]
    syscall: Option<String>,
    /// syscall-loop: iterations per loop [default: 100000]
    #[arg(long)]
    iterations: Option<u64>,
    /// syscall-loop: loops, printed like FreeBSD's syscall_timing [default: 1]
    #[arg(long)]
    loops: Option<u32>,
    /// syscall-loop, kernel-op: simulate every iteration, also once an iteration has been shown to leave
    /// the machine's state as it found it (otherwise the rest are added at once, with the
    /// same result: kernel/steady.rs).
    #[arg(long)]
    exact: bool,
    /// kbuild: parallel jobs (make -jN); default: one per hardware thread. fio-randread:
    /// fio jobs (numjobs) [default: 1]
    #[arg(long)]
    jobs: Option<u32>,
    /// kbuild, fio-randread: simulated warm-up before measuring, milliseconds [default: 4, fio-randread 1]
    #[arg(long)]
    warmup_ms: Option<f64>,
    /// kbuild, fio-randread: simulated measurement window, milliseconds [default: 24, fio-randread 4]
    #[arg(long)]
    window_ms: Option<f64>,
    #[command(flatten)]
    set: super::params::SetArgs,
    /// Seed of the run's random choices (same seed, same output).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// kernel-op: the operation (fork-1, fork-1024, mmap-munmap, mmap-lock, open-close, kill, mount) [default: fork-1]
    #[arg(long)]
    op: Option<String>,
    /// kernel-op: hot, cold (emptied before the timed part) or cold-each (before every loop iteration) [default: hot]
    #[arg(long)]
    caches: Option<String>,
    /// kernel-op: the NUMA node whose first CPU runs it [default: 0]
    #[arg(long)]
    node: Option<u32>,
    #[command(flatten)]
    pub(crate) guest: super::kvm::GuestArgs,
}

impl Args {
    pub(crate) fn syscall(&self) -> &str {
        self.syscall.as_deref().unwrap_or("getppid")
    }
    fn iterations(&self) -> u64 {
        self.iterations.unwrap_or(100_000)
    }
    fn loops(&self) -> u32 {
        self.loops.unwrap_or(1)
    }
    fn warmup_ms(&self) -> f64 {
        self.warmup_ms.unwrap_or(4.0)
    }
    fn window_ms(&self) -> f64 {
        self.window_ms.unwrap_or(24.0)
    }

    /// Refuses a workload's option given to another workload (it would be ignored), so a
    /// run is never taken for one it is not: `--mmu legacy` without `--virt kvm` runs no
    /// guest, `--node 1` means nothing to a syscall loop.
    fn check_options_apply(&self) -> Result<()> {
        let w = self.workload.as_str();
        let guest_loop = w == "syscall-loop" && self.guest.virt.is_some();
        // The first of `flags` given, if any.
        let first = |flags: &[(&'static str, bool)]| flags.iter().find(|f| f.1).map(|f| f.0);
        // (whether the group applies to this run, whom it applies to, the first flag given)
        let groups = [
            (
                w == "syscall-loop",
                "syscall-loop",
                first(&[
                    ("--syscall", self.syscall.is_some()),
                    ("--iterations", self.iterations.is_some()),
                    ("--loops", self.loops.is_some()),
                ]),
            ),
            (
                w == "syscall-loop" || w == "kernel-op",
                "syscall-loop and kernel-op",
                first(&[("--exact", self.exact)]),
            ),
            (
                w == "kbuild" || w == "fio-randread",
                "kbuild and fio-randread",
                first(&[
                    ("--jobs", self.jobs.is_some()),
                    ("--warmup-ms", self.warmup_ms.is_some()),
                    ("--window-ms", self.window_ms.is_some()),
                ]),
            ),
            (
                w == "kernel-op",
                "kernel-op",
                first(&[
                    ("--op", self.op.is_some()),
                    ("--caches", self.caches.is_some()),
                    ("--node", self.node.is_some()),
                ]),
            ),
            (
                w == "ssdd" || guest_loop,
                "ssdd and syscall-loop under --virt kvm",
                first(&[
                    ("--mmu", self.guest.mmu.is_some()),
                    ("--kvm-variant", self.guest.kvm_variant.is_some()),
                    ("--ept-page", self.guest.ept_page.is_some()),
                ]),
            ),
            (
                w == "ssdd",
                "ssdd",
                first(&[
                    ("--guest-model", self.guest.guest_model.is_some()),
                    ("--vcpus", self.guest.vcpus.is_some()),
                ]),
            ),
        ];
        for (applies, to, given) in groups {
            if let (false, Some(flag)) = (applies, given) {
                let bare = if w == "syscall-loop" && !guest_loop {
                    " without --virt kvm"
                } else {
                    ""
                };
                return Err(Error::new(format!(
                    "{flag}: applies to {to}, not to --workload {w}{bare}"
                )));
            }
        }
        Ok(())
    }
}

pub fn run(args: Args) -> Result<()> {
    let overrides = args.set.resolve()?;
    workload::check_name(&args.workload)?;
    args.check_options_apply()?;
    if args.workload == "ssdd" {
        return super::kvm::run_ssdd(&args.machine, &args.guest, &overrides);
    }
    let m = overrides.apply_machine(&machine::load(&args.machine)?)?;
    let mut params = Params::linux();
    overrides.apply(&mut params)?;
    if args.guest.virt.is_some() && args.workload != "syscall-loop" {
        return Err(Error::new(format!(
            "--virt: the {} workload does not run in a guest (ssdd and syscall-loop do): the guest's exits on IPIs and timer writes are not modelled",
            args.workload
        )));
    }
    if args.workload == "kbuild" {
        return run_kbuild(&args, &m, &params, &overrides);
    }
    if args.workload == "kernel-op" {
        return run_kernel_op(&args, &m, &params, &overrides);
    }
    if args.workload == "fio-randread" {
        return run_fio(&args, &m, &params, &overrides);
    }
    kharden::workload::bounds::syscall_loop(args.loops(), args.iterations())?;
    let _ = args.seed; // the syscall loop makes no random choices
    let vm = args.guest.vm(&m, &params)?;
    let mut k = Kernel::boot_with(
        m.clone(),
        super::defenses::parse(&args.defense, &m)?,
        &params,
        OracleMode::default(),
    );
    if let Some(vm) = vm {
        k.run_in_vm(vm);
    }
    let mut lp = SyscallLoop::new(args.syscall(), args.iterations())?;
    lp.exact = args.exact;
    lp.start(&mut k)?;
    for _ in 0..lp.warmup {
        lp.measure(&mut k, 1)?;
    }
    let mut loops = vec![];
    for _ in 0..args.loops() {
        loops.push(lp.measure(&mut k, args.iterations())?);
    }
    let mut total = loops[0].stats.clone();
    for l in &loops[1..] {
        total.merge(&l.stats);
    }
    let elapsed: f64 = loops.iter().map(|l| l.elapsed.secs()).sum();
    let iters = args.iterations() * args.loops() as u64;
    let repeated: u64 = loops.iter().map(|l| l.repeated).sum();
    if args.json {
        let v = serde_json::json!({
            "machine": k.machine.name, "workload": args.workload, "syscall": args.syscall(),
            "defense": k.defense_names(), "iterations": iters, "seconds": elapsed,
            "guest": k.vm_as::<KernelVm>().map(|vm| serde_json::json!({
                "virt": "kvm", "mmu": vm.mmu.flavour.name(), "ept_page": backing_name(vm.backing),
            })),
            "ns_per_iteration": elapsed * 1e9 / iters as f64,
            "repeated_iterations": repeated,
            "violations": k.violations, "stats": total,
            "footprints": params.recording().place,
            "set": overrides.to_json(), "params": params.to_json(),
        });
        return print_json(&v);
    }
    println!("Clock resolution: 0.000000001");
    println!("test loop time iterations periteration");
    for (i, l) in loops.iter().enumerate() {
        println!(
            "{} {i} {:.9} {} {:.9}",
            args.syscall(),
            l.elapsed.secs(),
            l.iterations,
            l.elapsed.secs() / l.iterations as f64
        );
    }
    let defenses = if k.defense_names().is_empty() {
        "none".to_string()
    } else {
        k.defense_names().join(",")
    };
    let guest = match k.vm_as::<KernelVm>() {
        Some(vm) => format!(
            " in a KVM guest ({} MMU, {} EPT pages)",
            vm.mmu.flavour.name(),
            backing_name(vm.backing)
        ),
        None => String::new(),
    };
    println!(
        "\n Simulation stats for '{} on {} with {}{guest}':\n",
        args.workload, k.machine.name, defenses
    );
    print_stats(&total, elapsed, iters as f64, "iter");
    println!(
        "\n{:>16.9} seconds simulated, {} iterations, {:.1} ns/iter",
        elapsed,
        iters,
        elapsed * 1e9 / iters as f64
    );
    print_repeated(repeated);
    if k.violations.is_empty() {
        println!("security oracle: no violation (sampled at returns to user mode)");
    } else {
        println!(
            "security oracle: {} VIOLATIONS, first: {}",
            k.violations.len(),
            k.violations[0].what
        );
    }
    Ok(())
}

/// perf-stat-like lines: time by category, then counters (the kernel's, then those the
/// defenses own), then flush reasons; `per` names the unit the per-unit column divides by.
fn print_stats(total: &Stats, elapsed: f64, units: f64, per: &str) {
    for &c in TimeCategory::ALL {
        let t = total.time(c).secs();
        if t > 0.0 {
            println!(
                "{:>16.9} s  {:<18} # {:5.1}% {:10.1} ns/{per}",
                t,
                c.name(),
                100.0 * t / elapsed,
                t * 1e9 / units
            );
        }
    }
    println!();
    for &c in Counter::ALL {
        if total.counter(c) > 0 {
            println!(
                "{:>16}    {:<28} # {:10.3} /{per}",
                total.counter(c),
                c.name(),
                total.counter(c) as f64 / units
            );
        }
    }
    // Counters the plugged-in defenses own (XPFO's flushes, ...).
    for name in kharden::defense::registry::counter_names() {
        let n = total.owned(kharden::defense::registry::counter(name));
        if n > 0 {
            println!("{n:>16}    {name:<28} # {:10.3} /{per}", n as f64 / units);
        }
    }
    for &r in FlushReason::ALL {
        if total.flushes(r) > 0 {
            println!(
                "{:>16}    tlb:tlb_flush reason={}",
                total.flushes(r),
                r.name()
            );
        }
    }
}

/// `--workload kbuild`: a window of make -jN's steady state; the job's kernel paths are the
/// recorded footprints with their measured work (nothing calibrated).
fn run_kbuild(
    args: &Args,
    m: &kharden::machine::MachineProfile,
    params: &Params,
    overrides: &Overrides,
) -> Result<()> {
    use kharden::workload::kbuild_profile::JobProfile;
    use kharden::workload::kbuild_run::{kernel_share_note, kernel_split, simulate_with, Sampling};
    super::defenses::parse(&args.defense, m)?;
    let jobs = args.jobs.unwrap_or(m.threads());
    if jobs == 0 || jobs > 4096 {
        return Err(Error::new("--jobs: expected 1..4096"));
    }
    if !(args.warmup_ms() >= 0.0
        && args.window_ms() > 0.0
        && args.warmup_ms() + args.window_ms() <= 10_000.0)
    {
        return Err(Error::new(
            "--warmup-ms/--window-ms: expected 0 <= warm-up, 0 < window, total at most 10000 ms",
        ));
    }
    let profile = JobProfile::builtin();
    let sampling = Sampling {
        warmup_ms: args.warmup_ms(),
        window_ms: args.window_ms(),
        seed: args.seed,
        ..Sampling::default()
    };
    let mut progress = kharden_trace::progress::Progress::on_terminal();
    progress.show_now(&format!("run: make -j{jobs} on {}: simulating...", m.name));
    let r = simulate_with(
        m,
        &args.defense,
        super::defenses::EXTENSIONS,
        jobs,
        &profile,
        sampling,
        params,
    )?;
    let note = kernel_share_note(&r, &profile, &args.defense);
    let split = kernel_split(&r, &profile);
    let w = &r.window;
    let user_s = w.tasks.user_time().secs();
    let sys_s = w.tasks.system_time().secs();
    let compile_jobs = r.user_work_cycles / profile.user_cycles();
    if args.json {
        let v = serde_json::json!({
            "machine": m.name, "workload": "kbuild", "jobs": jobs, "defense": args.defense,
            "window_s": w.elapsed.secs(), "user_s": user_s, "system_s": sys_s,
            "system_per_user_cycle": r.system_per_user_cycle(), "compile_jobs_of_work": compile_jobs,
            "calibration": note, "kernel_by_op": split, "stats": w.tasks, "idle_stats": w.idle,
            "set": overrides.to_json(), "params": params.to_json(),
        });
        return print_json(&v);
    }
    println!(
        " Simulation stats for 'make -j{jobs}' (kbuild) on {} with {}, {:.1} ms window:\n",
        m.name,
        args.defense,
        w.elapsed.secs() * 1e3
    );
    print_stats(
        &w.tasks,
        w.elapsed.secs() * jobs as f64,
        compile_jobs,
        "job",
    );
    println!("\n{user_s:>16.6} s user, {sys_s:.6} s system ({:.3} system/user), {compile_jobs:.2} compile jobs of work", sys_s / user_s);
    println!(
        "{:>16.6} s of IPI handling on idle CPUs (charged to idle, not to the build)",
        w.idle.system_time().secs()
    );
    println!("calibration: {note}");
    println!("\n kernel time per compile job by operation, ms at the recording host's clock ({:.3} GHz):\n", profile.host_ghz);
    println!(
        "  {:<16} {:>9} {:>9} {:>8}",
        "operation", "model", "recorded", "ratio"
    );
    for row in &split {
        let (rec, ratio) = match row.recorded_ms {
            Some(r) if r > 0.0 => (format!("{r:.2}"), format!("{:.2}", row.model_ms / r)),
            Some(r) => (format!("{r:.2}"), "-".into()),
            None => ("-".into(), "-".into()),
        };
        println!(
            "  {:<16} {:>9.2} {:>9} {:>8}",
            row.op, row.model_ms, rec, ratio
        );
    }
    let total: f64 = split.iter().map(|r| r.model_ms).sum();
    println!(
        "  {:<16} {:>9.2} {:>9.2} {:>8.2}",
        "total",
        total,
        profile.system_seconds * 1e3,
        total / (profile.system_seconds * 1e3)
    );
    println!("  (the recording puts a context switch in the operation that blocked, the model in context-switch)");
    Ok(())
}

/// `--workload fio-randread`: fio's 4 KiB random reads of a tmpfs file, one process per job.
fn run_fio(
    args: &Args,
    m: &kharden::machine::MachineProfile,
    params: &Params,
    overrides: &Overrides,
) -> Result<()> {
    let jobs = args.jobs.unwrap_or(1);
    let (warmup_ms, window_ms) = (args.warmup_ms.unwrap_or(1.0), args.window_ms.unwrap_or(4.0));
    let r = kharden::workload::fio::simulate(
        m,
        &args.defense,
        super::defenses::EXTENSIONS,
        jobs,
        warmup_ms,
        window_ms,
        params,
    )?;
    let w = &r.window;
    if args.json {
        let v = serde_json::json!({
            "machine": m.name, "workload": "fio-randread", "jobs": jobs, "defense": args.defense,
            "window_s": w.elapsed.secs(), "ios": r.ios, "iops": r.iops,
            "user_s": w.tasks.user_time().secs(), "system_s": w.tasks.system_time().secs(),
            "stats": w.tasks, "set": overrides.to_json(), "params": params.to_json(),
        });
        return print_json(&v);
    }
    println!(
        " Simulation stats for fio-randread ({jobs} job{}) on {} with {}, {:.1} ms window:\n",
        if jobs == 1 { "" } else { "s" },
        m.name,
        args.defense,
        w.elapsed.secs() * 1e3
    );
    print_stats(&w.tasks, w.elapsed.secs() * jobs as f64, r.ios as f64, "io");
    println!(
        "\n{:>16} reads in {:.6} s: {:.0} IOPS ({:.1} ns per read per job)",
        r.ios,
        w.elapsed.secs(),
        r.iops,
        w.elapsed.secs() * 1e9 * jobs as f64 / r.ios as f64
    );
    Ok(())
}

/// `--workload kernel-op`: one of seed 002's operations on the first CPU of `--node`.
fn run_kernel_op(
    args: &Args,
    m: &kharden::machine::MachineProfile,
    params: &Params,
    overrides: &kharden::params::Overrides,
) -> Result<()> {
    use kharden::workload::kernel_ops::{self, Choice};
    let flag = |o: &str| format!("--{o}");
    let Choice { op, caches, node } = Choice::parse(
        args.op.as_deref(),
        args.caches.as_deref(),
        args.node,
        m,
        flag,
    )?;
    let mut k = Kernel::boot_with(
        m.clone(),
        super::defenses::parse(&args.defense, m)?,
        params,
        OracleMode::default(),
    );
    let r = kernel_ops::run(&mut k, op, caches, node, args.exact)?;
    let elapsed = r.elapsed.secs();
    if args.json {
        let v = serde_json::json!({
            "machine": k.machine.name, "workload": "kernel-op", "op": op.name(),
            "caches": caches.name(), "node": node, "defense": k.defense_names(),
            "iterations": op.iterations(), "seconds": elapsed, "violations": k.violations,
            "repeated_iterations": r.repeated, "stats": r.stats,
            "footprints": params.recording().place,
            "set": overrides.to_json(), "params": params.to_json(),
        });
        return print_json(&v);
    }
    println!(
        "{} ({} caches) on node {} of {}: {:.3} us, {} iteration(s)",
        op.name(),
        caches.name(),
        node,
        k.machine.name,
        elapsed * 1e6,
        op.iterations()
    );
    print_stats(&r.stats, elapsed, op.iterations() as f64, "op");
    println!();
    print_repeated(r.repeated);
    Ok(())
}

/// A run's summary as pretty JSON on stdout.
fn print_json(v: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(v).map_err(|e| Error::new(e.to_string()))?;
    println!("{text}");
    Ok(())
}

/// Says how many loop iterations repeated a probed steady state instead of being simulated.
fn print_repeated(repeated: u64) {
    if repeated > 0 {
        println!(
            "steady state: {repeated} iterations repeat a probed one that left the machine as it found it (kernel/steady.rs; --exact simulates each)"
        );
    }
}
