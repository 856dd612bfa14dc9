//! x86-64 paging (Intel SDM vol. 3A ch. 4): 4-level page tables in simulated physical memory,
//! a walker with paging-structure caches, PCID-tagged set-associative TLBs, and the
//! invalidation instructions with their architectural semantics.

pub mod addr;
pub mod ept;
pub mod holders;
pub mod mmu;
pub mod paging;
pub mod physmem;
pub mod psc;
pub mod pte;
pub mod tlb;

pub use addr::{PageSize, Pcid, Pfn, PhysAddr, VirtAddr};
pub use holders::TlbHolders;
pub use mmu::{Access, Fault, InvpcidType, Mmu, WalkEnv};
pub use physmem::PhysMem;
pub use pte::{Pte, PteFlags};

#[cfg(test)]
mod tests;
