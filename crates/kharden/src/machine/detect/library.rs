//! The library profile that fills what detection cannot see: the same microarchitecture, else
//! the same core family, else a per-vendor default.

use super::facts::HostFacts;
use super::profile::{Arch, MachineProfile};
use super::Vendor;

/// Library profile used for what cannot be detected: same microarchitecture if the library has
/// one, else the same family (e.g. Skylake for Skylake-SP), else a per-vendor default.
pub(crate) fn closest_profile(f: &HostFacts) -> (MachineProfile, String) {
    let lib: Vec<MachineProfile> = crate::machine::names()
        .into_iter()
        .filter_map(|n| crate::machine::load(n).ok())
        .collect();
    let arch_ok: Vec<&MachineProfile> = lib.iter().filter(|m| m.arch == f.arch).collect();
    if let Some(u) = &f.uarch {
        if let Some(m) = arch_ok
            .iter()
            .find(|m| m.cpu.microarchitecture.eq_ignore_ascii_case(u))
        {
            return (
                (*m).clone(),
                format!("machines/{}.toml (same microarchitecture: {u})", m.name),
            );
        }
        let family = |s: &str| s.split('-').next().unwrap_or(s).trim().to_ascii_lowercase();
        if let Some(m) = arch_ok
            .iter()
            .find(|m| family(&m.cpu.microarchitecture) == family(u))
        {
            return (
                (*m).clone(),
                format!(
                    "machines/{}.toml (same core family as {u}: {})",
                    m.name, m.cpu.microarchitecture
                ),
            );
        }
    }
    let preferred: &[&str] = match (f.arch, f.vendor) {
        (Arch::Aarch64, _) => &["altra-neoverse-n1", "cortex-a57-opteron-a1100"],
        (_, Vendor::Amd) => &["epyc-7763-2s"],
        _ => &["skylake-i7-6700k", "haswell-i7-4770"],
    };
    let what = f
        .uarch
        .clone()
        .unwrap_or_else(|| "an unrecognised microarchitecture".into());
    for p in preferred {
        if let Some(m) = arch_ok.iter().find(|m| m.name == *p) {
            return (
                (*m).clone(),
                format!(
                    "machines/{}.toml (no library profile of {what}; nearest by vendor and era)",
                    m.name
                ),
            );
        }
    }
    match arch_ok.first().copied().or(lib.first()) {
        Some(m) => (m.clone(), format!("machines/{}.toml (no library profile of {what}; first library profile of this architecture)", m.name)),
        None => (builtin_default(f.arch), "built-in conservative defaults (the machine library is empty)".into()),
    }
}

/// Only reached with an empty library: round, conservative numbers, stated as such.
fn builtin_default(arch: Arch) -> MachineProfile {
    let text = format!(
        r#"name = "default"
description = "conservative defaults"
arch = "{}"
[topology]
sockets = 1
cores_per_socket = 1
threads_per_core = 1
numa_nodes_per_socket = 1
[cpu]
model = "unknown"
microarchitecture = "unknown"
frequency_ghz = 2.0
[cpu.features]
global_pages = true
tlbi_broadcast = {}
[[tlb]]
name = "l1d-4k"
level = 1
serves = "data"
page_sizes = ["4k"]
entries = 64
ways = 4
hit_cycles = 0
[paging_structure_cache]
pml4e_entries = 2
pdpte_entries = 4
pde_entries = 32
[memory]
l1d_kib = 32
l1d_ways = 8
l1d_hit_cycles = 4
l1i_kib = 32
l1i_ways = 8
l2_kib = 256
l2_ways = 8
l2_hit_cycles = 12
llc_kib_per_socket = 8192
llc_ways = 16
llc_hit_cycles = 40
dram_local_ns = 80.0
dram_remote_ns = 130.0
lines_in_flight = 10
llc_miss_overlap = 1.0
dram_miss_overlap = 1.0
[costs]
syscall_roundtrip_cycles = 150
cr3_write_noflush_cycles = 250
cr3_write_flush_cycles = 250
invlpg_cycles = 250
{}interrupt_entry_cycles = 400
ipi_send_cycles = 200
[costs.ipi_latency_ns]
same_core_ns = 1000.0
same_socket_ns = 1500.0
remote_socket_ns = 2500.0
"#,
        if arch == Arch::Aarch64 {
            "aarch64"
        } else {
            "x86_64"
        },
        arch == Arch::Aarch64,
        if arch == Arch::Aarch64 {
            "tlbi_broadcast_ns = 500.0\n"
        } else {
            ""
        }
    );
    toml::from_str(&text).expect("built-in default profile is valid TOML")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_defaults_are_valid_profiles() {
        for arch in [Arch::X86_64, Arch::Aarch64] {
            builtin_default(arch).validate().unwrap();
        }
    }

    /// Every name detect can produce must find its library profile by exact microarchitecture,
    /// and the per-vendor defaults must exist.
    #[test]
    fn detect_names_match_the_library() {
        let lib: Vec<MachineProfile> = crate::machine::names()
            .into_iter()
            .map(|n| crate::machine::load(n).unwrap())
            .collect();
        for u in [
            "Nehalem",
            "Sandy Bridge",
            "Sandy Bridge-EP",
            "Ivy Bridge",
            "Haswell",
            "Haswell-EP",
            "Skylake",
            "Skylake-SP",
            "Silvermont",
            "Zen 3",
            "Cortex-A57",
            "Vulcan",
            "Neoverse N1",
        ] {
            assert!(
                lib.iter().any(|m| m.cpu.microarchitecture == u),
                "no library profile of {u}"
            );
        }
        for n in [
            "altra-neoverse-n1",
            "cortex-a57-opteron-a1100",
            "epyc-7763-2s",
            "skylake-i7-6700k",
            "haswell-i7-4770",
        ] {
            assert!(
                lib.iter().any(|m| m.name == n),
                "default profile {n} missing"
            );
        }
    }
}
