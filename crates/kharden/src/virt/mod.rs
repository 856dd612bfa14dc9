//! Hardware virtualization and KVM's MMU (issue 16, seed 004): VMX non-root mode with its
//! exits and entries (`vmx.rs`), EPT with two-dimensional walks and VPID/EPTP-tagged TLBs
//! (`ept.rs`), KVM's MMU with its roles, root lifetimes and the CR0.WP patch variants
//! (`kvm_mmu/`), a guest running rt-tests' `ssdd` with KERNEXEC-style CR0.WP toggles
//! (`guest.rs`, `ssdd.rs`), KVM's emulation of the guest's page-table writes under shadow
//! paging with its software walks (`emulate.rs`), the oracle for CR0.WP semantics
//! (`oracle.rs`), and the kernel model run as a guest with EPT (`kernel_guest.rs`).

mod emulate;
pub mod ept;
pub mod guest;
pub mod guest_text;
pub mod kernel_guest;
pub mod kernel_ssdd;
pub mod kvm_mmu;
#[cfg(target_os = "linux")]
pub mod native;
pub mod oracle;
pub mod params;
#[cfg(test)]
mod pgd_tests;
pub mod placement;
pub mod ssdd;
pub mod ssdd_options;
pub mod vmx;

pub use kernel_guest::KernelVm;
pub use kvm_mmu::{MmuFlavour, Variant};
pub use ssdd::{run_ssdd, SsddConfig, SsddResult};
pub use ssdd_options::{GuestModel, SsddOptions, SsddOutcome, SsddWords};

/// A guest-physical address (what the guest's page tables hold, what EPT translates).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GuestPhysAddr(pub u64);

/// Host-physical address of guest RAM at guest-physical 0: far above the host frames that
/// hold EPT and shadow tables, so their cache lines never alias.
pub const GUEST_RAM_HOST_BASE: u64 = 1 << 40;

impl GuestPhysAddr {
    /// Where KVM's memslot puts this guest-physical address in host memory (one memslot).
    pub fn host(self) -> crate::arch::x86::PhysAddr {
        crate::arch::x86::PhysAddr(self.0 + GUEST_RAM_HOST_BASE)
    }
}
