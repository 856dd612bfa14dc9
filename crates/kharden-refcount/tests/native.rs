//! The real implementations on this host: the C functional tests, the same properties
//! checked again from Rust through the safe interface, and the bench with a tiny bound.

use kharden_refcount::native::{self, Counter, Warning};
use kharden_refcount::{bench, Impl, Variant};

#[test]
fn c_functional_tests_pass_natively() {
    assert_eq!(
        native::selftest(4, 20_000),
        0,
        "see the FAIL lines on stderr"
    );
}

#[test]
fn every_host_implementation_is_available() {
    let names: Vec<_> = native::available()
        .iter()
        .map(|n| (n.imp, n.variant))
        .collect();
    for imp in Impl::ALL {
        #[cfg(target_arch = "x86_64")]
        assert!(names.contains(&(imp, Variant::X86_64)), "{imp:?}");
        #[cfg(target_arch = "aarch64")]
        assert!(names.contains(&(imp, Variant::Arm64Llsc)), "{imp:?}");
    }
}

#[test]
fn overflow_saturates_and_stays_saturated() {
    for n in native::available()
        .into_iter()
        .filter(|n| n.imp != Impl::Atomic)
    {
        let sat = n.saturated().unwrap();
        let top = if n.imp == Impl::Full { -2 } else { i32::MAX }; // FULL: UINT_MAX - 1
        let c = Counter::new(0);
        n.set(&c, top);
        native::reset_warnings();
        n.inc(&c);
        assert_eq!(n.read(&c), sat, "{} {}", n.name(), n.variant.name());
        assert_eq!(native::warnings(Warning::Overflow), 1);
        for _ in 0..1000 {
            n.inc(&c);
            assert!(!n.dec_and_test(&c));
            n.add(3, &c);
        }
        assert_eq!(n.read(&c), sat, "{} moved off saturation", n.name());
    }
}

#[test]
fn dec_and_test_reports_zero_exactly_once() {
    for n in native::available() {
        let c = Counter::new(0);
        n.set(&c, 5);
        let zeros = (0..5).filter(|_| n.dec_and_test(&c)).count();
        assert_eq!(zeros, 1, "{}", n.name());
        assert!(!n.dec_and_test(&c), "{}: zero reported twice", n.name());
    }
}

#[test]
fn increment_from_zero_is_caught_where_the_kernel_catches_it() {
    for n in native::available() {
        let c = Counter::new(0);
        native::reset_warnings();
        n.inc(&c);
        // atomic_t has no checks; x86's fast refcount (like the kernel's) does not test for 0
        let caught =
            !(n.imp == Impl::Atomic || (n.imp == Impl::Fast && n.variant == Variant::X86_64));
        assert_eq!(
            native::warnings(Warning::IncrementOnZero) == 1,
            caught,
            "{} {}",
            n.name(),
            n.variant.name()
        );
        assert_eq!(n.read(&c) != 1, caught);
        n.set(&c, 0);
        assert!(!n.inc_not_zero(&c));
    }
}

#[test]
fn concurrent_increments_lose_nothing() {
    for n in native::available() {
        let c = Counter::new(1);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| (0..50_000).for_each(|_| n.inc(&c)));
            }
        });
        assert_eq!(c.value(), 1 + 4 * 50_000, "{}", n.name());
        let zeros: u64 = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| s.spawn(|| n.contended(&c, 10_000)))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!((zeros, c.value()), (0, 1 + 4 * 50_000), "{}", n.name());
    }
}

#[test]
fn bench_runs_with_a_tiny_bound() {
    let r = bench::run(1000, 1);
    assert!(!r.is_empty());
    assert!(r
        .iter()
        .all(|x| x.in_sync && x.ops == 1999 && x.ns_per_op > 0.0));
    let atomic = r.iter().find(|x| x.implementation == "atomic_t").unwrap();
    assert!((atomic.ratio_to_atomic - 1.0).abs() < 1e-9);
    let text = bench::render(&r);
    assert!(
        text.contains("ATOMIC_TIMING")
            && text.contains("REFCOUNT_TIMING")
            && text.contains("ns per op")
    );
    let c = bench::run(1000, 3);
    assert!(c
        .iter()
        .all(|x| x.in_sync && x.threads == 3 && x.ops == 6000));
}
