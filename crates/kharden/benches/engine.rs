//! Simulator speed: simulated syscalls per wall-second of the syscall loop, the MMU
//! translate path, and a whole reproduction. `cargo bench -p kharden --bench engine`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kharden::kernel::Kernel;
use kharden::oracle::OracleMode;
use kharden::workload::SyscallLoop;
use kharden::{defense, experiment, machine};

fn syscall_loop(c: &mut Criterion) {
    let m = machine::load("haswell-i7-4770").unwrap();
    let mut g = c.benchmark_group("syscall-loop");
    const N: u64 = 10_000;
    g.throughput(Throughput::Elements(N));
    for (syscall, defenses) in [("getppid", "none"), ("getppid", "pti:freebsd"), ("getppid", "pti:freebsd,nopcid"), ("mprotect", "pti:linux")] {
        let mut k = Kernel::boot(m.clone(), defense::parse_list(defenses).unwrap());
        k.config.oracle = OracleMode::Off;
        let lp = SyscallLoop::new(syscall, N).unwrap();
        lp.start(&mut k).unwrap();
        g.bench_with_input(BenchmarkId::new(syscall, defenses), &(), |b, _| b.iter(|| lp.measure(&mut k, N).unwrap()));
    }
    g.finish();
}

fn reproduction(c: &mut Criterion) {
    let mut g = c.benchmark_group("reproduce");
    g.sample_size(10);
    g.bench_function("pti-pcid", |b| b.iter(|| experiment::reproduce("pti-pcid").unwrap()));
    g.finish();
}

criterion_group!(benches, syscall_loop, reproduction);
criterion_main!(benches);
