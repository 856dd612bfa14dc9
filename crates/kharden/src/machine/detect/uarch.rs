//! Microarchitecture names (spelled as in the library's `cpu.microarchitecture`) from the CPUID
//! signature (x86) or the MIDR implementer and part (arm64).

use super::Vendor;

/// (microarchitecture, how) from the CPUID signature.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn x86_microarchitecture(
    vendor: Vendor,
    family: u32,
    model: u32,
) -> (Option<String>, String) {
    let how = format!("CPUID signature family {family:#x} model {model:#x}");
    let name = match (vendor, family) {
        (Vendor::Intel, 6) => match model {
            0x1a | 0x1e | 0x1f | 0x2e => Some("Nehalem"),
            0x25 | 0x2c | 0x2f => Some("Westmere"),
            0x2a => Some("Sandy Bridge"),
            0x2d => Some("Sandy Bridge-EP"),
            0x3a => Some("Ivy Bridge"),
            0x3e => Some("Ivy Bridge-EP"),
            0x3c | 0x45 | 0x46 => Some("Haswell"),
            0x3f => Some("Haswell-EP"),
            0x3d | 0x47 => Some("Broadwell"),
            0x4f | 0x56 => Some("Broadwell-EP"),
            0x4e | 0x5e | 0x8e | 0x9e | 0xa5 | 0xa6 => Some("Skylake"),
            0x55 => Some("Skylake-SP"),
            0x7d | 0x7e => Some("Ice Lake"),
            0x6a | 0x6c => Some("Ice Lake-SP"),
            0x8c | 0x8d => Some("Tiger Lake"),
            0x97 | 0x9a | 0xb7 | 0xba | 0xbf => Some("Golden Cove"),
            0x8f | 0xcf => Some("Golden Cove-SP"),
            0x37 | 0x4a | 0x4d | 0x5a | 0x5d | 0x4c => Some("Silvermont"),
            0x5c | 0x5f => Some("Goldmont"),
            0x7a => Some("Goldmont Plus"),
            0x86 | 0x96 | 0x9c => Some("Tremont"),
            _ => None,
        },
        (Vendor::Amd, 0x17) => Some(if model < 0x30 { "Zen" } else { "Zen 2" }),
        (Vendor::Amd, 0x19) => Some(match model {
            0x10..=0x1f | 0x60..=0x7f | 0xa0..=0xaf => "Zen 4",
            _ => "Zen 3",
        }),
        (Vendor::Amd, 0x1a) => Some("Zen 5"),
        _ => None,
    };
    (name.map(str::to_string), how)
}

/// arm64 MIDR implementer/part -> (microarchitecture, marketing name).
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
pub(crate) fn arm_core(
    implementer: Option<u32>,
    part: Option<u32>,
) -> (Option<String>, Option<String>) {
    let s = |a: &str, b: &str| (Some(a.to_string()), Some(b.to_string()));
    match (implementer, part) {
        (Some(0x41), Some(0xd03)) => s("Cortex-A53", "Arm Cortex-A53"),
        (Some(0x41), Some(0xd07)) => s("Cortex-A57", "Arm Cortex-A57"),
        (Some(0x41), Some(0xd08)) => s("Cortex-A72", "Arm Cortex-A72"),
        (Some(0x41), Some(0xd0b)) => s("Cortex-A76", "Arm Cortex-A76"),
        (Some(0x41), Some(0xd0c)) => s("Neoverse N1", "Arm Neoverse N1"),
        (Some(0x41), Some(0xd40)) => s("Neoverse V1", "Arm Neoverse V1"),
        (Some(0x41), Some(0xd49)) => s("Neoverse N2", "Arm Neoverse N2"),
        (Some(0x41), Some(0xd4f)) => s("Neoverse V2", "Arm Neoverse V2"),
        (Some(0x43), Some(0x0af)) | (Some(0x42), Some(0x516)) => s("Vulcan", "Marvell ThunderX2"),
        (Some(0x43), Some(0x0a1)) => s("ThunderX", "Cavium ThunderX"),
        (Some(0xc0), Some(0xac3)) => s("AmpereOne", "AmpereOne"),
        _ => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arm_parts_name_library_microarchitectures() {
        assert_eq!(
            arm_core(Some(0x41), Some(0xd07)).0.as_deref(),
            Some("Cortex-A57")
        );
        assert_eq!(
            arm_core(Some(0x41), Some(0xd0c)).0.as_deref(),
            Some("Neoverse N1")
        );
        assert_eq!(
            arm_core(Some(0x43), Some(0x0af)).0.as_deref(),
            Some("Vulcan")
        );
        assert_eq!(arm_core(None, None).0, None);
    }
}
