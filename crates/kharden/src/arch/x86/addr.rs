//! Newtypes for addresses and tags, so a walk cannot mix a virtual and a physical address.

use serde::Serialize;
use std::fmt;

/// A 48-bit canonical virtual (linear) address.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct VirtAddr(pub u64);

/// A physical address.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct PhysAddr(pub u64);

/// A 4 KiB physical frame number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Pfn(pub u64);

/// A 12-bit process-context identifier (0 when CR4.PCIDE = 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Pcid(pub u16);

impl Pcid {
    pub const MAX: u16 = 0xfff;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum PageSize {
    Size4K,
    Size2M,
    Size1G,
}

impl PageSize {
    pub const ALL: [PageSize; 3] = [PageSize::Size4K, PageSize::Size2M, PageSize::Size1G];
    pub const fn shift(self) -> u32 {
        match self {
            PageSize::Size4K => 12,
            PageSize::Size2M => 21,
            PageSize::Size1G => 30,
        }
    }
    pub const fn bytes(self) -> u64 {
        1 << self.shift()
    }
    /// The page-table level whose entry maps a page of this size (1 = PTE).
    pub const fn leaf_level(self) -> u8 {
        match self {
            PageSize::Size4K => 1,
            PageSize::Size2M => 2,
            PageSize::Size1G => 3,
        }
    }
    pub fn from_name(n: crate::machine::PageSizeName) -> PageSize {
        use crate::machine::PageSizeName::*;
        match n {
            Size4K => PageSize::Size4K,
            Size2M => PageSize::Size2M,
            Size1G => PageSize::Size1G,
        }
    }
}

/// First address of the upper (kernel) half of the 48-bit address space.
pub const KERNEL_HALF: u64 = 0xffff_8000_0000_0000;

impl VirtAddr {
    /// Page number of the page of `size` containing this address (unique across sizes
    /// only together with the size).
    pub fn page_number(self, size: PageSize) -> u64 {
        self.0 >> size.shift()
    }
    /// The 9-bit table index this address uses at `level` (4 = PML4 ... 1 = PT).
    pub fn index(self, level: u8) -> usize {
        ((self.0 >> (12 + 9 * (level as u32 - 1))) & 511) as usize
    }
    pub fn is_kernel(self) -> bool {
        self.0 >= KERNEL_HALF
    }
    pub fn align_down(self, size: PageSize) -> VirtAddr {
        VirtAddr(self.0 & !(size.bytes() - 1))
    }
    pub fn offset(self, bytes: u64) -> VirtAddr {
        VirtAddr(self.0.wrapping_add(bytes))
    }
    /// The canonical address whose PML4 index is `i` and whose other bits are zero.
    pub fn from_pml4_index(i: usize) -> VirtAddr {
        let raw = (i as u64) << 39;
        VirtAddr(if i >= 256 {
            raw | 0xffff_0000_0000_0000
        } else {
            raw
        })
    }
}

impl PhysAddr {
    pub fn pfn(self) -> Pfn {
        Pfn(self.0 >> 12)
    }
}

impl Pfn {
    pub fn addr(self) -> PhysAddr {
        PhysAddr(self.0 << 12)
    }
}

impl fmt::Debug for VirtAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VirtAddr({:#x})", self.0)
    }
}
impl fmt::Display for VirtAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}
impl fmt::Debug for PhysAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PhysAddr({:#x})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn indices_and_halves() {
        let va = VirtAddr(0xffff_ffff_8100_0000);
        assert!(va.is_kernel());
        assert_eq!(va.index(4), 511);
        assert_eq!(va.index(3), 510);
        assert_eq!(va.index(2), 8);
        assert_eq!(VirtAddr::from_pml4_index(511).index(4), 511);
        assert!(VirtAddr::from_pml4_index(256).is_kernel());
        assert!(!VirtAddr::from_pml4_index(255).is_kernel());
    }
}
