//! Simulator speed: simulated syscalls per wall-second of the syscall loop, the MMU
//! translate path, a steady-state probe, and a whole reproduction.
//! `cargo bench -p kharden --bench engine`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kharden::arch::x86::PageSize;
use kharden::kernel::Kernel;
use kharden::oracle::OracleMode;
use kharden::workload::SyscallLoop;
use kharden::{defense, experiment, machine};

/// Simulated syscalls per wall-second of the syscall loop: every iteration simulated
/// (`exact`), and the loop as `kharden run` runs it, whose iterations after a probed steady
/// state are added at once (kernel/steady.rs), over the 2 million.
fn syscall_loop(c: &mut Criterion) {
    let m = machine::load("haswell-i7-4770").unwrap();
    for (group, n, exact) in [
        ("syscall-loop", 10_000, true),
        ("syscall-loop-steady", 2_000_000, false),
    ] {
        let mut g = c.benchmark_group(group);
        g.throughput(Throughput::Elements(n));
        for (syscall, defenses, guest) in [
            ("getppid", "none", None),
            ("getppid", "pti:freebsd", None),
            ("getppid", "pti:freebsd,nopcid", None),
            ("getppid", "pti:linux", None),
            ("getppid", "pti:linux,nopcid", None),
            ("mprotect", "pti:linux", None),
            // In a KVM guest whose RAM the host backs with 4 KiB pages: 2-D walks.
            ("getppid", "pti:freebsd,nopcid", Some(PageSize::Size4K)),
        ] {
            let params = kharden::params::Params::linux();
            let mut k = Kernel::boot_with(
                m.clone(),
                defense::parse_list(defenses).unwrap(),
                &params,
                OracleMode::Off,
            );
            if let Some(backing) = guest {
                let tdp = kharden::virt::MmuFlavour::Tdp;
                let base = kharden::virt::Variant::Base;
                k.run_in_vm(kharden::virt::KernelVm::new(&m, tdp, base, &params, backing).unwrap());
            }
            let defenses = match guest {
                Some(_) => format!("{defenses} in a guest, 4k EPT"),
                None => defenses.to_string(),
            };
            let mut lp = SyscallLoop::new(syscall, n).unwrap();
            lp.exact = exact;
            lp.start(&mut k).unwrap();
            g.bench_with_input(BenchmarkId::new(syscall, &defenses), &(), |b, _| {
                b.iter(|| lp.measure(&mut k, n).unwrap())
            });
        }
        g.finish();
    }
}

/// Long kernel paths, which overflow the L1I: eight anonymous page faults (fault-anon, ~500
/// text lines each) and an execve (thousands of lines) that frees them, on one CPU.
fn long_paths(c: &mut Criterion) {
    let m = machine::load("haswell-i7-4770").unwrap();
    let mut g = c.benchmark_group("long-paths");
    g.throughput(Throughput::Elements(9));
    for defenses in ["none", "pti:linux"] {
        let mut k = Kernel::boot_with(
            m.clone(),
            defense::parse_list(defenses).unwrap(),
            &kharden::params::Params::linux(),
            OracleMode::Off,
        );
        SyscallLoop::new("getppid", 1)
            .unwrap()
            .start(&mut k)
            .unwrap();
        let task = k.current_task(0);
        g.bench_with_input(
            BenchmarkId::new("8 fault-anon + execve", defenses),
            &(),
            |b, _| {
                b.iter(|| {
                    for _ in 0..8 {
                        k.anon_fault(0).unwrap();
                    }
                    k.exec(0, task).unwrap();
                })
            },
        );
    }
    g.finish();
}

/// A window of make -j60 on the 96-thread Xeon under immediate XPFO: the heaviest case of
/// the xpfo reproduction (every flush IPIs 95 CPUs). Throughput is in simulated IPIs.
fn kbuild_shootdowns(c: &mut Criterion) {
    use kharden::params::Params;
    use kharden::sim::Counter;
    use kharden::workload::kbuild_profile::JobProfile;
    use kharden::workload::kbuild_run::{forget_simulations, simulate, Sampling};
    let m = machine::load("xeon-platinum-8160").unwrap();
    let profile = JobProfile::builtin();
    let sampling = Sampling {
        warmup_ms: 1.0,
        window_ms: 4.0,
        ..Sampling::default()
    };
    // simulate() answers a repeated call from its memo of this process's runs: forget them.
    let run = || {
        forget_simulations();
        simulate(
            &m,
            "pti:linux,xpfo:immediate",
            60,
            &profile,
            sampling,
            &Params::linux(),
        )
        .unwrap()
    };
    // One untimed run counts the IPIs a run sends (the run is deterministic).
    let probe = run();
    let ipis = probe.window.tasks.counter(Counter::IpisSent)
        + probe.window.idle.counter(Counter::IpisSent);
    let mut g = c.benchmark_group("kbuild");
    g.sample_size(10);
    g.throughput(Throughput::Elements(ipis));
    g.bench_function("xeon-8160 -j60 xpfo:immediate, 5 ms simulated", |b| {
        b.iter(run)
    });
    g.finish();
}

/// A steady-state probe of an idle machine (kernel/steady.rs): the canonical state kept
/// before the probed iteration and the one after it compared with it. Per probe, every TLB,
/// cache tag and page table of the machine is written out twice; on the two-socket EPYC
/// (two 256 MiB LLCs, 128 cores) that is most of what a probe costs.
fn probe(c: &mut Criterion) {
    let mut g = c.benchmark_group("probe");
    g.sample_size(10);
    for name in ["haswell-i7-4770", "epyc-7763-2s"] {
        let mut k = Kernel::boot_with(
            machine::load(name).unwrap(),
            defense::parse_list("pti:linux").unwrap(),
            &kharden::params::Params::linux(),
            OracleMode::Off,
        );
        g.bench_function(name, |b| {
            b.iter(|| {
                let p = k.probe();
                assert!(k.period(p).is_some(), "nothing ran: the state is the same");
            })
        });
    }
    g.finish();
}

fn reproduction(c: &mut Criterion) {
    let mut g = c.benchmark_group("reproduce");
    g.sample_size(10);
    g.bench_function("pti-pcid", |b| {
        b.iter(|| experiment::reproduce("pti-pcid", &Default::default()).unwrap())
    });
    g.finish();
}

criterion_group!(
    benches,
    syscall_loop,
    long_paths,
    kbuild_shootdowns,
    probe,
    reproduction
);
criterion_main!(benches);
