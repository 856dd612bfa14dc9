//! Host threads change how fast a run goes, never what it gives: a reproduction and a
//! pooled kbuild run on 1 and on 4 threads are byte for byte the same. One test in its own
//! binary, since the thread count is the process's.

use kharden::experiment;
use kharden::params::Params;
use kharden::sim::parallel::set_default_threads;
use kharden::workload::kbuild_profile::JobProfile;
use kharden::workload::kbuild_run::{forget_simulations, simulate, Sampling};

/// The evict-fault reproduction as JSON, and a four-window XPFO kbuild run's stats, on
/// `threads` host threads.
fn outputs(threads: usize) -> (String, String) {
    set_default_threads(threads);
    forget_simulations();
    let rep = experiment::reproduce("evict-fault", &Default::default()).unwrap();
    let json = serde_json::to_string_pretty(&rep).unwrap();
    let m = kharden::machine::load("xeon-platinum-8160").unwrap();
    let sampling = Sampling {
        warmup_ms: 0.5,
        window_ms: 1.0,
        seed: 1,
        samples: 4,
    };
    let run = simulate(
        &m,
        "pti:linux,xpfo:immediate",
        60,
        &JobProfile::builtin(),
        sampling,
        &Params::linux(),
    )
    .unwrap();
    let kbuild = format!(
        "{:?} {:?} {:?}",
        run.window, run.per_sample, run.user_work_cycles
    );
    (json, kbuild)
}

#[test]
fn one_and_four_host_threads_give_identical_output() {
    let (one, four) = (outputs(1), outputs(4));
    set_default_threads(0);
    assert!(one.0 == four.0, "evict-fault differs on 1 and 4 threads");
    assert!(one.1 == four.1, "the kbuild run differs on 1 and 4 threads");
}
