//! The CR0.WP property (DESIGN.md, the security oracle): after every CR0 write, a guest
//! supervisor write to a read-only page faults if and only if CR0.WP is set — both when the
//! hardware performs it (through whatever translation, cached or walked, is current) and
//! when KVM emulates it with its own permission bitmap.

use crate::arch::x86::VirtAddr;
use crate::machine::VirtFlavour;

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

/// A store KVM emulated for the guest (GuestOp::EmulatedStore): CR0.WP and the guest PTE's
/// W bit at that moment, and what KVM did.
pub(crate) struct EmulatedStore {
    pub page: VirtAddr,
    pub wp: bool,
    pub writable: bool,
    /// Whether the emulator let the store through (else it injected #PF).
    pub allowed: bool,
    pub flavour: VirtFlavour,
}

/// The same property for a store the emulator performed: it must go through iff the page
/// is writable or CR0.WP is clear, as the CPU's own store would.
pub(crate) fn emulated_store_violation(s: &EmulatedStore) -> Option<String> {
    let architectural = s.writable || !s.wp;
    (s.allowed != architectural).then(|| {
        format!(
            "emulated supervisor store to {} {} {} with CR0.WP={} ({:?})",
            if s.writable { "writable" } else { "read-only" },
            s.page,
            if s.allowed { "went through" } else { "got #PF" },
            s.wp as u8,
            s.flavour
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
            for (f, found) in check_variant(&m, v, &crate::params::Params::linux()).unwrap() {
                assert!(found.is_empty(), "{v:?} on {f:?}: {:?}", found.first());
            }
        }
        let broken = check_variant(
            &m,
            Variant::BrokenKeepRoots,
            &crate::params::Params::linux(),
        )
        .unwrap();
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

    /// cf9f4c0eb169's bug: with a guest-owned CR0.WP, the emulator judges a store by the WP
    /// of KVM's last look. The probe after every CR0 write (the general invariant) sees it on
    /// the direct MMUs; shadow paging intercepts WP and holds.
    #[test]
    fn the_stale_role_wp_is_caught_by_the_probe_on_direct_mmus() {
        let m = crate::machine::load("skylake-i7-6700k").unwrap();
        for (f, found) in check_variant(
            &m,
            Variant::BrokenBeforeRefreshCr0Wp,
            &crate::params::Params::linux(),
        )
        .unwrap()
        {
            if f.direct() {
                assert!(
                    found.iter().all(|v| v.starts_with("emulated")) && !found.is_empty(),
                    "{f:?}: {found:?}"
                );
            } else {
                assert!(found.is_empty(), "{f:?}: {found:?}");
            }
        }
    }

    /// Mathias Krause's guest: WP cleared without an exit, then an emulated LTR stores to
    /// the read-only GDT. Before the fix KVM injects #PF (the guest triple-faults); after
    /// it, and under every variant that intercepts WP, the store goes through.
    #[test]
    fn an_emulated_store_after_a_guest_owned_toggle_needs_the_refresh() {
        use crate::virt::ssdd::emulated_store_after_wp_toggle;
        let m = crate::machine::load("skylake-i7-6700k").unwrap();
        for v in [Variant::Base, Variant::KeepRoots, Variant::GuestOwnedWp] {
            for (f, found) in
                emulated_store_after_wp_toggle(&m, v, &crate::params::Params::linux()).unwrap()
            {
                assert!(found.is_empty(), "{v:?} on {f:?}: {found:?}");
            }
        }
        let stale = emulated_store_after_wp_toggle(
            &m,
            Variant::BrokenBeforeRefreshCr0Wp,
            &crate::params::Params::linux(),
        )
        .unwrap();
        for (f, found) in stale {
            let caught = found
                .iter()
                .any(|v| v.contains("read-only") && v.contains("got #PF with CR0.WP=0"));
            assert_eq!(caught, f.direct(), "{f:?}: {found:?}");
        }
        // SVM intercepts every CR0 write: KVM looks at each toggle, nothing goes stale.
        let epyc = crate::machine::load("epyc-7763-2s").unwrap();
        for (f, found) in emulated_store_after_wp_toggle(
            &epyc,
            Variant::BrokenBeforeRefreshCr0Wp,
            &crate::params::Params::linux(),
        )
        .unwrap()
        {
            assert!(found.is_empty(), "SVM {f:?}: {found:?}");
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
