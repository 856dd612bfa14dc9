//! The CR0.WP property (DESIGN.md, the security oracle): after every CR0 write, a guest
//! supervisor write to a read-only page faults if and only if CR0.WP is set — both when the
//! hardware performs it (through whatever translation, cached or walked, is current) and
//! when KVM emulates it with its own permission bitmap.

use super::ssdd::Vcpu;

/// Probes the read-only GDT page; records a violation when either path disagrees with WP.
pub(crate) fn check_after_cr0_write(v: &mut Vcpu) {
    let gdt = v.guest.gdt;
    let wp = v.wp();
    let hw = v.access(gdt, true, false);
    let emulated = v.emulated_write_allowed(gdt);
    for (path, allowed) in [("hardware", hw), ("emulated", emulated)] {
        if allowed == wp {
            v.violations.push(format!(
                "{path} supervisor write to read-only {gdt} {} with CR0.WP={} ({:?})",
                if allowed { "succeeded" } else { "faulted" },
                wp as u8,
                v.flavour()
            ));
        }
    }
}

/// Runs a short ssdd with the oracle on for every MMU flavour the machine supports; returns
/// each flavour's violations.
pub fn check_variant(
    m: &crate::machine::MachineProfile,
    variant: super::Variant,
) -> crate::error::Result<Vec<(super::MmuFlavour, Vec<String>)>> {
    let mut out = vec![];
    for flavour in super::MmuFlavour::ALL {
        if super::ssdd::check_support(m, flavour).is_err() {
            continue;
        }
        let mut cfg = super::SsddConfig::new(flavour, variant);
        cfg.oracle = true;
        cfg.warmup_steps = 0;
        cfg.sample_steps = 40;
        cfg.guest.wp_pairs_other_per_step = 1.5;
        out.push((flavour, super::run_ssdd(m, &cfg)?.violations));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
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
