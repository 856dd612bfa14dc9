//! Every parser of user input returns an error on garbage instead of panicking. (The fuzz
//! targets in fuzz/ drive the same entry points with coverage guidance.)

use kharden::kernel::Kernel;
use kharden::workload::SyscallLoop;
use kharden::{defense, experiment, machine};
use proptest::prelude::*;

/// Mutations of a valid file: byte flips, truncations and line deletions find far more of the
/// parser's corners than random bytes do.
fn mutated(valid: &'static str) -> impl Strategy<Value = String> {
    (
        0..valid.len(),
        any::<u8>(),
        0..3u8,
        0..valid.lines().count(),
    )
        .prop_map(move |(at, byte, kind, line)| match kind {
            0 => {
                let mut b = valid.as_bytes().to_vec();
                b[at] = byte;
                String::from_utf8_lossy(&b).into_owned()
            }
            1 => {
                // Truncate at the last char boundary at or before `at`.
                let end = (0..=at)
                    .rev()
                    .find(|&i| valid.is_char_boundary(i))
                    .unwrap_or(0);
                valid[..end].to_string()
            }
            _ => valid
                .lines()
                .enumerate()
                .filter(|&(i, _)| i != line)
                .map(|(_, l)| l)
                .collect::<Vec<_>>()
                .join("\n"),
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn machine_profiles(text in mutated(machine::source_text("haswell-i7-4770").unwrap())) {
        match machine::parse("m.toml", &text) {
            Err(e) => {
                prop_assert!(e.to_string().starts_with("m.toml: "));
                prop_assert!(!e.to_string().contains('\n'));
            }
            // Whatever validates must also boot and run without panicking.
            Ok(m) => {
                let mut k = Kernel::boot(m, vec![]);
                let _ = SyscallLoop::new("getppid", 5).unwrap().run(&mut k);
            }
        }
    }

    #[test]
    fn experiment_files(text in mutated(experiment::source_text("pti-pcid").unwrap())) {
        if let Err(e) = experiment::syscall_table::parse("e.toml", &text) {
            prop_assert!(e.to_string().starts_with("e.toml: "));
            prop_assert!(!e.to_string().contains('\n'));
        }
    }

    #[test]
    fn asi_experiment_files(text in mutated(experiment::source_text("asi").unwrap())) {
        if let Err(e) = experiment::asi_table::parse("e.toml", &text) {
            prop_assert!(e.to_string().starts_with("e.toml: "));
            prop_assert!(!e.to_string().contains('\n'));
        }
    }

    #[test]
    fn cpuid_dumps(text in mutated("CPUID Registers (CPU #1):
CPUID 00000000: 0000000B-756E6547-6C65746E-49656E69
CPUID 00000002: 61B3A001-0000FFC2-00000000-00000000
CPUID 80000000: 80000008-00000000-00000000-00000000
CPUID 80000005: FF40FF40-FF40FF40-20080140-20080140 [L1D: 32 KB / L1I: 32 KB]
CPUID 80000006: 48002200-68004200-02006140-08009140
")) {
        match machine::detect::tlbs_from_cpuid_dump("d.txt", &text) {
            Err(e) => {
                prop_assert!(e.to_string().starts_with("d.txt"));
                prop_assert!(!e.to_string().contains('\n'));
            }
            // What it prints is TOML a profile can take.
            Ok(tlbs) => prop_assert!(toml::from_str::<toml::Table>(&tlbs).is_ok(), "{tlbs}"),
        }
    }

    #[test]
    fn guest_placements(text in mutated(kharden::virt::placement::BUILTIN)) {
        if let Err(e) = kharden::virt::placement::parse("p.toml", &text) {
            prop_assert!(e.to_string().starts_with("p.toml: "));
            prop_assert!(!e.to_string().contains('\n'));
        }
    }

    #[test]
    fn defense_lists(spec in "[a-z:,= -]{0,40}") {
        let _ = defense::parse_list(&spec);
    }

    #[test]
    fn arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = machine::parse("m.toml", &text);
        let _ = experiment::syscall_table::parse("e.toml", &text);
    }
}
