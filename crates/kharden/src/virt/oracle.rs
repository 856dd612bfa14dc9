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
