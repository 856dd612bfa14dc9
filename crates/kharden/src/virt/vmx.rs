//! VMX non-root operation as far as the CR0.WP story needs it (Intel SDM vol. 3C): the exit
//! reasons KVM's `perf kvm stat` reports, the CR0 guest/host mask that decides which MOV to
//! CR0 exits (SDM 25.1.3: a write exits if it would change a bit set in the mask away from
//! the read shadow), and the cost of an exit and an entry from the machine profile.

use crate::machine::VirtFlavour;

/// CR0.WP (bit 16).
pub const CR0_WP: u64 = 1 << 16;
/// CR0.PG (bit 31).
pub const CR0_PG: u64 = 1 << 31;

/// VM exit reasons, named as `perf kvm stat` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ExitReason {
    /// MOV to/from a control register (basic exit reason 28).
    CrAccess,
    /// An exception the exception bitmap intercepts (reason 0): #DB always (KVM intercepts
    /// it since CVE-2015-8104), #PF under shadow paging.
    ExceptionNmi,
    /// EPT violation (reason 48): the guest-physical address has no EPT mapping.
    EptViolation,
}

impl ExitReason {
    pub const ALL: [ExitReason; 3] = [
        ExitReason::CrAccess,
        ExitReason::ExceptionNmi,
        ExitReason::EptViolation,
    ];
    pub fn name(self) -> &'static str {
        match self {
            ExitReason::CrAccess => "CR_ACCESS",
            ExitReason::ExceptionNmi => "EXCEPTION_NMI",
            ExitReason::EptViolation => "EPT_VIOLATION",
        }
    }
}

/// The VMCS fields that decide whether a MOV to CR0 exits.
#[derive(Debug, Clone, Copy)]
pub struct Cr0Controls {
    /// CR0 guest/host mask: bits the host owns.
    pub guest_host_mask: u64,
    /// CR0 read shadow: what the guest reads for host-owned bits.
    pub read_shadow: u64,
}

impl Cr0Controls {
    /// What KVM sets for a vCPU whose CR0 is `cr0`: the host owns PG and WP, or PG only
    /// when the guest owns WP (`Variant::guest_owns_wp`); the read shadow is `cr0`.
    pub fn new(cr0: u64, guest_owns_wp: bool) -> Cr0Controls {
        Cr0Controls {
            guest_host_mask: if guest_owns_wp {
                CR0_PG
            } else {
                CR0_PG | CR0_WP
            },
            read_shadow: cr0,
        }
    }

    /// SDM 25.1.3: MOV to CR0 exits if, for any bit set in the mask, the new value differs
    /// from the read shadow. SVM has no per-bit mask: KVM's selective CR0 write intercept
    /// exits on every write the guest makes here (each changes WP).
    pub fn write_exits(&self, flavour: VirtFlavour, new: u64) -> bool {
        match flavour {
            VirtFlavour::Vmx => (new ^ self.read_shadow) & self.guest_host_mask != 0,
            VirtFlavour::Svm => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn wp_toggle_exits_only_when_host_owns_wp() {
        let owned = Cr0Controls {
            guest_host_mask: CR0_WP | CR0_PG,
            read_shadow: CR0_PG | CR0_WP,
        };
        assert!(owned.write_exits(VirtFlavour::Vmx, CR0_PG));
        assert!(!owned.write_exits(VirtFlavour::Vmx, CR0_PG | CR0_WP));
        let guest_owns_wp = Cr0Controls {
            guest_host_mask: CR0_PG,
            ..owned
        };
        assert!(!guest_owns_wp.write_exits(VirtFlavour::Vmx, CR0_PG));
        assert!(guest_owns_wp.write_exits(VirtFlavour::Svm, CR0_PG));
    }
}
