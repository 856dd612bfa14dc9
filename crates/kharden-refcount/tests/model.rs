//! The cost model: seed 001's table within tolerance, fitted parameters counted, and the
//! per-operation costs the simulator will use.

use kharden::machine::{self, Arch, MachineProfile};
use kharden_refcount::model::{self, Class};
use kharden_refcount::{op_cycles, reproduce, Impl, Op, Variant};

fn show(r: &kharden::report::Reproduction) {
    for row in &r.rows {
        println!(
            "{:<52} published {:>16.4e} modelled {:>16.4e} error {:+6.2}%",
            row.label,
            row.published.unwrap(),
            row.simulated,
            row.judged_error().unwrap()
        );
    }
    for b in &r.breakdowns {
        println!("{b}");
    }
    println!("fitted ({}): {:?}", r.fitted_parameters, r.fitted);
}

#[test]
fn seed001_rows_within_tolerance_or_known_misses() {
    let r = reproduce().expect("reproduce");
    show(&r);
    assert_eq!(
        r.rows.len(),
        9,
        "three rows x seconds, cycles, instructions"
    );
    assert_eq!(r.fitted_parameters as usize, r.fitted.len());
    assert_eq!(
        r.fitted_parameters, 2,
        "exclusive_pair of the A57 and the code-generation choice"
    );
    // The same checks as every other reproduction: each fit marks its row, every miss is
    // a known one inside its band.
    r.check_rows().unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn fast_checks_cost_about_nothing_and_full_costs_more() {
    // The qualitative claim of seed 001, from the model alone.
    let cores = model::cores().unwrap();
    let a57 = cores.iter().find(|c| c.name == "cortex-a57").unwrap();
    let m = |imp| {
        model::lkdtm(a57, Variant::Arm64Llsc, imp, 2.0, model::LKDTM_BOUND)
            .unwrap()
            .cycles
    };
    let (atomic, fast, full) = (m(Impl::Atomic), m(Impl::Fast), m(Impl::Full));
    assert!(
        (fast / atomic - 1.0).abs() < 0.1,
        "fast/atomic = {}",
        fast / atomic
    );
    assert!(full / atomic > 1.3, "full/atomic = {}", full / atomic);
}

#[test]
fn traces_cover_every_loop_and_classify() {
    let t = model::traces().unwrap();
    for v in Variant::ALL {
        for imp in Impl::ALL.map(Some).into_iter().chain([None]) {
            for op in [Op::Inc, Op::DecAndTest] {
                assert!(
                    t.iter()
                        .any(|l| l.variant == v && l.imp == imp && l.op == op),
                    "{v:?} {imp:?} {op:?}"
                );
            }
        }
    }
    // every LL/SC refcount loop holds exactly one exclusive pair per iteration
    for l in t
        .iter()
        .filter(|l| l.variant == Variant::Arm64Llsc && l.imp.is_some())
    {
        assert_eq!(l.count(Class::ExclusiveLoad), 1.0, "{:?} {:?}", l.imp, l.op);
        assert_eq!(
            l.count(Class::ExclusiveStore),
            1.0,
            "{:?} {:?}",
            l.imp,
            l.op
        );
    }
    for l in t
        .iter()
        .filter(|l| l.variant == Variant::Arm64Lse && l.imp.is_some())
    {
        assert_eq!(l.count(Class::LseAtomic), 1.0, "{:?} {:?}", l.imp, l.op);
        assert_eq!(l.count(Class::ExclusiveLoad), 0.0);
    }
    for l in t
        .iter()
        .filter(|l| l.variant == Variant::X86_64 && l.imp.is_some())
    {
        assert_eq!(l.count(Class::LockedRmw), 1.0, "{:?} {:?}", l.imp, l.op);
    }
    assert_eq!(model::classify("ldaddl w0, w1, [x19]"), Class::LseAtomic);
    assert_eq!(
        model::classify("lock cmpxchg %ecx,(%rdi)"),
        Class::LockedRmw
    );
    assert_eq!(model::classify("b.ne <f+0x10>"), Class::Branch);
    assert_eq!(model::classify("stp x29, x30, [sp, #-16]!"), Class::Store);
}

/// An arm64 machine built from a library profile (the arm64 profiles are being written).
fn arm64_machine(name: &str, micro: &str, lse: bool) -> MachineProfile {
    let mut m = machine::load(machine::names()[0]).unwrap();
    m.name = name.into();
    m.arch = Arch::Aarch64;
    m.cpu.microarchitecture = micro.into();
    m.cpu.features.lse_atomics = lse;
    m.measured = None;
    m
}

#[test]
fn op_cycles_for_the_simulator() {
    let a57 = arm64_machine("test-a57", "Cortex-A57", false);
    let n1 = arm64_machine("test-n1", "Neoverse N1", true);
    for m in [&a57, &n1] {
        for op in [Op::Inc, Op::DecAndTest] {
            let atomic = op_cycles(m, Impl::Atomic, op).unwrap();
            let full = op_cycles(m, Impl::Full, op).unwrap();
            assert!(
                atomic > 10.0 && full > atomic,
                "{}: {op:?} atomic {atomic} full {full}",
                m.name
            );
        }
    }
    // LSE is cheaper than LL/SC on the N1 (measured 15 vs 22 cycles)
    let n1_llsc = arm64_machine("test-n1", "Neoverse N1", false);
    assert!(
        op_cycles(&n1, Impl::Atomic, Op::Inc).unwrap()
            < op_cycles(&n1_llsc, Impl::Atomic, Op::Inc).unwrap()
    );
    // x86 from the library
    let x86 = machine::load("haswell-i7-4770").unwrap();
    let inc = op_cycles(&x86, Impl::Fast, Op::Inc).unwrap();
    assert!(inc > 10.0 && inc < 40.0, "{inc}");
    // unknown core: an error, not a default
    let odd = arm64_machine("odd", "Cortex-X9000", false);
    assert!(op_cycles(&odd, Impl::Atomic, Op::Inc).is_err());
}

#[test]
fn model_report_renders() {
    let t = model::model_report(None).unwrap();
    println!("{t}");
    assert!(t.rows.len() >= 4 * 4);
}
