//! The committed recording (kernels/linux-6.18.44-fc-v445.toml) against the driver: every
//! path a scenario names was recorded, and compiles into a path the kernel model can run.

use kharden::kernel::footprint::Footprints;
use kharden::kernel::path::KernelPaths;
use kharden_footprint::driver::SCENARIOS;

#[test]
fn every_scenario_path_is_recorded_and_compiles() {
    let f = Footprints::builtin();
    let compiled = KernelPaths::builtin();
    for s in SCENARIOS {
        for &name in s.paths {
            let p = f
                .path(name)
                .unwrap_or_else(|| panic!("scenario {}: path {name} is not recorded", s.name));
            assert_eq!(p.scenario, s.name, "{name}");
            let id = compiled
                .id(name)
                .unwrap_or_else(|| panic!("path {name} did not compile"));
            assert!(compiled.get(id).text_lines() > 0, "{name} has no text");
        }
    }
}

#[test]
fn seed_002_paths_carry_their_latency_and_work() {
    let compiled = KernelPaths::builtin();
    for name in [
        "kill",
        "signal-deliver",
        "rt_sigreturn",
        "mount-proc",
        "umount",
        "mmap-locked",
    ] {
        let p = compiled.get(compiled.id(name).expect(name));
        assert!(p.native_cycles.is_some_and(|c| c > 0.0), "{name}");
        assert!(p.work_cycles.is_some(), "{name}");
        assert!(!p.data.is_empty(), "{name} touches no object");
    }
}
