//! Host-side translation structures a vCPU's hardware uses: EPT tables (and shadow page
//! tables, which have the same 4-level radix format, SDM vol. 3C 29.3.2) in simulated host
//! memory, and the TLB, guest-physical mapping cache and paging-structure caches of one
//! logical CPU, tagged by (VPID, EPTP) as SDM vol. 3C 29.4 describes. INVEPT single-context
//! drops what one EPTP tagged; INVVPID single-context what one VPID tagged.

use crate::arch::caches::CacheHierarchy;
pub use crate::arch::x86::ept::{GpaCache, HostLeaf, HostTables};
use crate::arch::x86::psc::PagingStructureCache;
use crate::arch::x86::tlb::{TlbArray, TlbEntry};
use crate::arch::x86::{Pcid, VirtAddr};
use crate::machine::{MachineProfile, TlbServes};

/// The translation caches of the logical CPU a vCPU runs on.
pub struct VcpuTlb {
    /// Data-side arrays (L1 then second level) with their hit cost in cycles.
    arrays: Vec<(TlbArray, f64)>,
    /// Guest-physical mappings (EPT only): gPA page → host page, tagged by EPTP.
    pub gpa: GpaCache,
    /// The guest's paging-structure caches, tagged like the TLB.
    pub psc: PagingStructureCache,
}

impl VcpuTlb {
    pub fn new(m: &MachineProfile) -> VcpuTlb {
        let arrays = m
            .tlb
            .iter()
            .filter(|a| a.serves != TlbServes::Instruction)
            .map(|a| {
                let arr = TlbArray::from_profile(a);
                (
                    arr,
                    if a.level == 1 {
                        0.0
                    } else {
                        a.hit_cycles as f64
                    },
                )
            })
            .collect();
        let p = &m.paging_structure_cache;
        VcpuTlb {
            arrays,
            gpa: GpaCache::default(),
            psc: PagingStructureCache::new(p.pml4e_entries, p.pdpte_entries, p.pde_entries),
        }
    }

    /// A combined (linear → host) mapping under `tag`, with the cycles beyond an L1 hit.
    pub fn lookup(&mut self, va: VirtAddr, tag: Pcid) -> Option<(TlbEntry, f64)> {
        let mut probe = 0.0;
        for i in 0..self.arrays.len() {
            let (arr, hit) = &mut self.arrays[i];
            probe = f64::max(probe, *hit);
            if let Some(e) = arr.lookup(va, tag) {
                let e2 = e;
                for (a, _) in self.arrays[..i].iter_mut() {
                    if a.holds(e2.size) {
                        a.insert(e2);
                    }
                }
                return Some((e2, probe));
            }
        }
        None
    }

    /// Cycles an STLB miss costs before the walk starts.
    pub fn miss_cycles(&self) -> f64 {
        self.arrays.iter().map(|(_, h)| *h).fold(0.0, f64::max)
    }

    pub fn insert(&mut self, e: TlbEntry) {
        for (a, _) in self.arrays.iter_mut() {
            if a.holds(e.size) {
                a.insert(e);
            }
        }
    }

    /// INVEPT single-context (or INVVPID single-context for a VPID-only tag): every
    /// combined, guest-physical and paging-structure entry of `tag`, globals included.
    pub fn invalidate_tag(&mut self, tag: Pcid) {
        for (a, _) in self.arrays.iter_mut() {
            a.invalidate_where(|e| e.pcid == tag);
        }
        self.gpa.invalidate_tag(tag);
        self.psc.invalidate_where(|p| p == tag);
    }

    /// A guest MOV to CR3 without PCID: the non-global linear and combined mappings of the
    /// current tag, and its paging-structure entries (SDM vol. 3A 4.10.4.1).
    pub fn guest_cr3_flush(&mut self, tag: Pcid) {
        for (a, _) in self.arrays.iter_mut() {
            a.invalidate_where(|e| e.pcid == tag && !e.flags.global);
        }
        self.psc.invalidate_where(|p| p == tag);
    }

    /// Entries cached for `va` under `tag` (what the oracle inspects).
    pub fn entry_for(&mut self, va: VirtAddr, tag: Pcid) -> Option<TlbEntry> {
        self.arrays.iter_mut().find_map(|(a, _)| a.lookup(va, tag))
    }
}

/// Cycles of one table-entry load through the data caches.
pub fn load_cycles(caches: &mut CacheHierarchy, hpa: u64) -> f64 {
    let hit = caches.load(0, 0, hpa, false);
    caches.cycles(hit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::x86::{PageSize, PhysAddr, PteFlags};

    fn entry(va: u64, tag: u16, guest_global: bool) -> TlbEntry {
        TlbEntry {
            vpn: VirtAddr(va).page_number(PageSize::Size4K),
            size: PageSize::Size4K,
            pcid: Pcid(tag),
            global: false,
            page: PhysAddr(0x1000),
            flags: PteFlags::KERNEL_DATA.with_global(guest_global),
        }
    }

    #[test]
    fn invept_drops_one_eptp_and_guest_cr3_spares_guest_globals() {
        let m = crate::machine::load("skylake-i7-6700k").unwrap();
        let mut t = VcpuTlb::new(&m);
        let k = 0xffff_8880_0000_0000;
        t.insert(entry(k, 1, true));
        t.insert(entry(0x40_0000, 1, false));
        t.insert(entry(k, 2, true));
        assert!(
            t.lookup(VirtAddr(k), Pcid(3)).is_none(),
            "G never crosses EPTPs"
        );
        t.guest_cr3_flush(Pcid(1));
        assert!(t.lookup(VirtAddr(k), Pcid(1)).is_some());
        assert!(t.lookup(VirtAddr(0x40_0000), Pcid(1)).is_none());
        t.invalidate_tag(Pcid(1));
        assert!(t.lookup(VirtAddr(k), Pcid(1)).is_none());
        assert!(t.lookup(VirtAddr(k), Pcid(2)).is_some());
    }
}
