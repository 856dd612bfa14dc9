//! `--defense refcount:IMPL` prices the kernel paths' refcount_t operations on the simulated
//! machine: fork carries them, and the checked implementations cost more than atomic_t.

use kharden::defense::parse_list_with;

use kharden::kernel::Kernel;
use kharden::machine;
use kharden::sim::{Counter, TimeCategory};
use kharden_refcount::plugin::EXTENSION;

fn fork_refcount_ns(machine_name: &str, defense: &str) -> (f64, u64) {
    let m = machine::load(machine_name).unwrap();
    let d = parse_list_with(defense, Some(&m), &[EXTENSION]).unwrap();
    let mut k = Kernel::boot(m, d);
    let t = k.spawn("parent", None);
    k.switch_to(0, t);
    k.enter_user(0);
    k.fork(0, t, "child").unwrap();
    let s = &k.cpus[0].stats;
    (
        s.time(TimeCategory::Refcount).ns(),
        s.counter(Counter::RefcountOps),
    )
}

#[test]
fn checked_refcounts_cost_more_on_fork_and_atomic_costs_nothing_extra() {
    for m in ["cortex-a57-opteron-a1100", "xeon-platinum-8160"] {
        let (none, ops) = fork_refcount_ns(m, "none");
        assert_eq!(none, 0.0);
        assert_eq!(
            ops,
            (kharden::params::Params::linux().num("kernel.fork_refcount_ops") as u32) as u64,
            "fork counts its refcount_t operations"
        );
        let (full, _) = fork_refcount_ns(m, "refcount:full");
        let (fast, _) = fork_refcount_ns(m, "refcount:fast");
        assert!(full > 0.0, "{m}: REFCOUNT_FULL costs more than atomic_t");
        assert!(full > fast, "{m}: full {full} ns vs fast {fast} ns");
    }
}

#[test]
fn unknown_refcount_variant_is_a_clear_error() {
    let m = machine::load("haswell-i7-4770").unwrap();
    let e = parse_list_with("refcount:paranoid", Some(&m), &[EXTENSION])
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("unknown defense 'refcount:paranoid'") && e.contains("refcount:full"),
        "{e}"
    );
}
