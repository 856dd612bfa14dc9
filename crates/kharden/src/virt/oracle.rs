//! The CR0.WP property (DESIGN.md, the security oracle): after every CR0 write, a guest
//! supervisor write to a read-only page faults if and only if CR0.WP is set — both when the
//! hardware performs it (through whatever translation, cached or walked, is current) and
//! when KVM emulates it with its own permission bitmap.

use super::vmx::VirtFlavour;
use crate::arch::x86::VirtAddr;

/// What a vCPU saw when it probed a read-only page right after a CR0 write: CR0.WP, and
/// whether a supervisor write went through on each path.
pub(crate) struct Cr0Probe {
    pub page: VirtAddr,
    pub wp: bool,
    /// The hardware's answer, through whatever translation is current.
    pub hardware: bool,
    /// KVM's emulator's answer, from its permission bitmap.
    pub emulated: bool,
    pub flavour: VirtFlavour,
}

/// The violations a probe shows: each path whose answer disagrees with CR0.WP.
pub(crate) fn violations(p: &Cr0Probe) -> impl Iterator<Item = String> + '_ {
    [("hardware", p.hardware), ("emulated", p.emulated)]
        .into_iter()
        .filter(|&(_, allowed)| allowed == p.wp)
        .map(|(path, allowed)| {
            format!(
                "{path} supervisor write to read-only {} {} with CR0.WP={} ({:?})",
                p.page,
                if allowed { "succeeded" } else { "faulted" },
                p.wp as u8,
                p.flavour
            )
        })
}

#[cfg(test)]
mod tests {
    use crate::virt::ssdd::check_variant;
    use crate::virt::{MmuFlavour, Variant};

    #[test]
    fn correct_variants_hold_and_the_broken_one_is_caught_on_every_mmu() {
        let m = crate::machine::load("skylake-i7-6700k").unwrap();
        for v in [Variant::Base, Variant::KeepRoots, Variant::GuestOwnedWp] {
            for (f, found) in check_variant(&m, v).unwrap() {
                assert!(found.is_empty(), "{v:?} on {f:?}: {:?}", found.first());
            }
        }
        let broken = check_variant(&m, Variant::BrokenKeepRoots).unwrap();
        assert_eq!(broken.len(), 3);
        for (f, found) in broken {
            assert!(!found.is_empty(), "broken variant not caught on {f:?}");
            if f == MmuFlavour::Shadow {
                assert!(found.iter().any(|v| v.contains("hardware")), "{found:?}");
            } else {
                assert!(found.iter().any(|v| v.contains("emulated")), "{found:?}");
            }
        }
    }

    #[test]
    fn shadow_on_a_profile_without_virt_is_a_one_line_error() {
        let m = crate::machine::load("nehalem-i7-920").unwrap();
        let e = crate::virt::ssdd::check_support(&m, MmuFlavour::Shadow).unwrap_err();
        assert!(e.to_string().contains("[virt]"), "{e}");
        assert!(!e.to_string().contains('\n'));
    }
}
