//! Page-table entries with the real x86-64 bit layout (Intel SDM vol. 3A, tables 4-15 to 4-20).

use super::{PageSize, Pfn, PhysAddr};

pub const P: u64 = 1 << 0;
pub const RW: u64 = 1 << 1;
pub const US: u64 = 1 << 2;
pub const A: u64 = 1 << 5;
pub const D: u64 = 1 << 6;
/// Page size: the entry maps a 2 MiB (PDE) or 1 GiB (PDPTE) page.
pub const PS: u64 = 1 << 7;
/// Global: survives CR3 writes and non-global invalidations (leaf entries, CR4.PGE = 1).
pub const G: u64 = 1 << 8;
pub const NX: u64 = 1 << 63;
const ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;

/// Permissions of a mapping; the walker ANDs RW/US and ORs NX across levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PteFlags {
    pub writable: bool,
    pub user: bool,
    pub no_exec: bool,
    pub global: bool,
}

impl PteFlags {
    pub const KERNEL_TEXT: PteFlags = PteFlags {
        writable: false,
        user: false,
        no_exec: false,
        global: false,
    };
    pub const KERNEL_RODATA: PteFlags = PteFlags {
        writable: false,
        user: false,
        no_exec: true,
        global: false,
    };
    pub const KERNEL_DATA: PteFlags = PteFlags {
        writable: true,
        user: false,
        no_exec: true,
        global: false,
    };
    pub const USER_TEXT: PteFlags = PteFlags {
        writable: false,
        user: true,
        no_exec: false,
        global: false,
    };
    pub const USER_DATA: PteFlags = PteFlags {
        writable: true,
        user: true,
        no_exec: true,
        global: false,
    };

    pub fn with_global(self, global: bool) -> PteFlags {
        PteFlags { global, ..self }
    }
    pub fn bits(self) -> u64 {
        let mut b = P | A | D;
        if self.writable {
            b |= RW;
        }
        if self.user {
            b |= US;
        }
        if self.no_exec {
            b |= NX;
        }
        if self.global {
            b |= G;
        }
        b
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pte(pub u64);

impl Pte {
    pub const EMPTY: Pte = Pte(0);
    /// A leaf mapping `pa` with `flags`; `PS` set for large pages.
    pub fn leaf(pa: PhysAddr, size: PageSize, flags: PteFlags) -> Pte {
        let ps = if size == PageSize::Size4K { 0 } else { PS };
        Pte((pa.0 & ADDR_MASK) | flags.bits() | ps)
    }
    /// A non-leaf entry pointing at a table; permissive, leaves decide access.
    pub fn table(table: Pfn, user: bool) -> Pte {
        Pte((table.addr().0 & ADDR_MASK) | P | RW | A | if user { US } else { 0 })
    }
    pub fn present(self) -> bool {
        self.0 & P != 0
    }
    pub fn large(self) -> bool {
        self.0 & PS != 0
    }
    pub fn writable(self) -> bool {
        self.0 & RW != 0
    }
    pub fn user(self) -> bool {
        self.0 & US != 0
    }
    pub fn global(self) -> bool {
        self.0 & G != 0
    }
    pub fn no_exec(self) -> bool {
        self.0 & NX != 0
    }
    pub fn addr(self) -> PhysAddr {
        PhysAddr(self.0 & ADDR_MASK)
    }
    /// The page this entry maps when read at `level` (1 = PTE), or None for a table pointer:
    /// PTEs always map 4 KiB, PDEs and PDPTEs map 2 MiB / 1 GiB when PS is set.
    pub fn leaf_size(self, level: u8) -> Option<PageSize> {
        match level {
            1 => Some(PageSize::Size4K),
            2 if self.large() => Some(PageSize::Size2M),
            3 if self.large() => Some(PageSize::Size1G),
            _ => None,
        }
    }
    pub fn flags(self) -> PteFlags {
        PteFlags {
            writable: self.writable(),
            user: self.user(),
            no_exec: self.no_exec(),
            global: self.global(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn bits_round_trip() {
        let pte = Pte::leaf(
            PhysAddr(0x20_0000),
            PageSize::Size2M,
            PteFlags::KERNEL_TEXT.with_global(true),
        );
        assert!(
            pte.present()
                && pte.large()
                && pte.global()
                && !pte.user()
                && !pte.writable()
                && !pte.no_exec()
        );
        assert_eq!(pte.addr(), PhysAddr(0x20_0000));
        assert_eq!(pte.0 & (1 << 8), 1 << 8, "G is bit 8");
        let t = Pte::table(Pfn(7), true);
        assert!(t.present() && t.user() && !t.large());
        assert_eq!(t.addr(), PhysAddr(7 << 12));
    }
}
