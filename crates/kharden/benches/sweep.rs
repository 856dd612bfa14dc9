//! Simulator speed on the slowest point of the default `kharden sweep`: the 256-CPU AMD
//! family under immediate XPFO, where every direct-map flush is a broadcast invalidation
//! that reaches all 256 simulated TLBs. `cargo bench -p kharden --bench sweep`.

use criterion::{criterion_group, criterion_main, Criterion};
use kharden::experiment::sweep::{jobs_for, scaled};
use kharden::params::Params;
use kharden::workload::kbuild_profile::JobProfile;
use kharden::workload::kbuild_run::{forget_simulations, simulate, Sampling};

fn slowest_point(c: &mut Criterion) {
    let params = Params::linux();
    let profile = JobProfile::builtin();
    let mut g = c.benchmark_group("sweep");
    g.sample_size(10);
    let (family, config) = ("epyc-7763-2s", "pti:linux,xpfo:immediate");
    let m = scaled(&kharden::machine::load(family).unwrap(), 256).unwrap();
    let jobs = jobs_for(256);
    // A shorter window than the sweep's (4 ms of warm-up and 300/160 ms measured), so a
    // sample takes seconds (2.7 s on a 2-core host; 96 s before the work of 2026-11-24).
    let sampling = Sampling {
        warmup_ms: 1.0,
        window_ms: 0.5,
        ..Sampling::default()
    };
    g.bench_function(format!("{family} x256 {config}"), |b| {
        b.iter(|| {
            // simulate() answers a repeated call from its memo: forget it, so every
            // iteration simulates.
            forget_simulations();
            simulate(&m, config, jobs, &profile, sampling, &params).unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, slowest_point);
criterion_main!(benches);
