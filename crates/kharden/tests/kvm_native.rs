//! The native CR0.WP toggle guest through /dev/kvm (needs /dev/kvm that runs a minimal
//! guest; run with `cargo test --release -p kharden --test kvm_native -- --ignored kvm_`; scripts/test.sh does where /dev/kvm is usable).

#[cfg(target_os = "linux")]
#[test]
#[ignore = "needs /dev/kvm (root, a host that runs KVM guests)"]
fn kvm_native_guest_toggles_cr0_wp() {
    let r = kharden::virt::native::bench(100, 200).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.toggles, 20_000);
    assert!(r.ns_per_io_exit > 0.0);
    assert!(r.ns_per_toggle.is_finite());
    assert!(r.ns_per_plain_iteration > 0.0);
}
