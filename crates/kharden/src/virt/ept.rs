//! Host-side translation structures a vCPU's hardware uses: EPT tables (and shadow page
//! tables, which have the same 4-level radix format, SDM vol. 3C 29.3.2) in simulated host
//! memory, and the TLB, guest-physical mapping cache and paging-structure caches of one
//! logical CPU, tagged by (VPID, EPTP) as SDM vol. 3C 29.4 describes. INVEPT single-context
//! drops what one EPTP tagged; INVVPID single-context what one VPID tagged.

use crate::arch::caches::CacheHierarchy;
use crate::arch::x86::psc::PagingStructureCache;
use crate::arch::x86::tlb::{TlbArray, TlbEntry};
use crate::arch::x86::{PageSize, Pcid, Pfn, PhysAddr, PhysMem, Pte, PteFlags, VirtAddr};
use crate::machine::{MachineProfile, TlbServes};

/// Host memory holding EPT or shadow tables, with the pages of zapped roots reused.
pub struct HostTables {
    pub mem: PhysMem,
    pool: Vec<Pfn>,
}

/// A leaf found by a hardware walk of host tables.
#[derive(Debug, Clone, Copy)]
pub struct HostLeaf {
    pub page: PhysAddr,
    pub size: PageSize,
    pub flags: PteFlags,
}

impl Default for HostTables {
    fn default() -> Self {
        HostTables {
            mem: PhysMem::new(1),
            pool: vec![],
        }
    }
}

impl HostTables {
    /// A zeroed table page.
    pub fn alloc(&mut self) -> Pfn {
        self.pool.pop().unwrap_or_else(|| self.mem.alloc_table(0))
    }

    /// Maps `addr` (guest-physical for EPT, guest-virtual for shadow tables) to `page`;
    /// returns how many table pages it allocated.
    pub fn map(
        &mut self,
        root: Pfn,
        addr: u64,
        page: PhysAddr,
        size: PageSize,
        flags: PteFlags,
    ) -> u32 {
        let va = VirtAddr(addr & !(size.bytes() - 1));
        let mut table = root;
        let mut allocated = 0;
        for level in (size.leaf_level() + 1..=4).rev() {
            let e = self.mem.read(table, va.index(level));
            table = if e.present() {
                e.addr().pfn()
            } else {
                let t = self.alloc();
                allocated += 1;
                self.mem.write(table, va.index(level), Pte::table(t, true));
                t
            };
        }
        self.mem.write(
            table,
            va.index(size.leaf_level()),
            Pte::leaf(page, size, flags),
        );
        allocated
    }

    /// The hardware walk from `root` for `addr`: calls `load` with each entry's host address
    /// and returns the leaf, or `None` when an entry is not present (an EPT violation or,
    /// for shadow tables, a #PF the guest's tables may or may not explain).
    pub fn walk(&self, root: Pfn, addr: u64, load: &mut dyn FnMut(u64)) -> Option<HostLeaf> {
        let va = VirtAddr(addr);
        let mut table = root;
        let mut writable = true;
        for level in (1..=4u8).rev() {
            let idx = va.index(level);
            load(table.addr().0 + idx as u64 * 8);
            let e = self.mem.read(table, idx);
            if !e.present() {
                return None;
            }
            writable &= e.writable();
            if let Some(size) = e.leaf_size(level) {
                let flags = PteFlags {
                    writable,
                    ..e.flags()
                };
                return Some(HostLeaf {
                    page: e.addr(),
                    size,
                    flags,
                });
            }
            table = e.addr().pfn();
        }
        None
    }

    /// Clears entry `index` of top-level table `root` and returns the table it pointed to,
    /// whole, for `attach_entry` to link again (None if the entry was not present).
    pub fn detach_entry(&mut self, root: Pfn, index: usize) -> Option<Pfn> {
        let e = self.mem.read(root, index);
        if !e.present() {
            return None;
        }
        self.mem.write(root, index, Pte::EMPTY);
        Some(e.addr().pfn())
    }

    /// Links a detached level-3 table back as entry `index` of `root`.
    pub fn attach_entry(&mut self, root: Pfn, index: usize, table: Pfn) {
        self.mem.write(root, index, Pte::table(table, true));
    }

    /// Zaps a detached level-3 table and the tree under it: (tables freed, leaves zapped).
    pub fn zap_detached(&mut self, table: Pfn) -> (u64, u64) {
        self.zap_tree(table, 3)
    }

    /// Zaps the tree under `root`, root included: every table page returns to the pool.
    /// Returns (table pages freed, leaf entries zapped).
    pub fn zap(&mut self, root: Pfn) -> (u64, u64) {
        self.zap_tree(root, 4)
    }

    /// Zaps the table `top` of paging level `level` and the tree under it.
    fn zap_tree(&mut self, top: Pfn, level: u8) -> (u64, u64) {
        let (mut tables, mut leaves) = (0, 0);
        let mut stack = vec![(top, level)];
        while let Some((t, level)) = stack.pop() {
            for i in 0..512 {
                let e = self.mem.read(t, i);
                if !e.present() {
                    continue;
                }
                if e.leaf_size(level).is_some() {
                    leaves += 1;
                } else {
                    stack.push((e.addr().pfn(), level - 1));
                }
            }
            *self.mem.table_mut(t) = [Pte::EMPTY; 512];
            self.pool.push(t);
            tables += 1;
        }
        (tables, leaves)
    }
}

/// The translation caches of the logical CPU a vCPU runs on.
pub struct VcpuTlb {
    /// Data-side arrays (L1 then second level) with their hit cost in cycles.
    arrays: Vec<(TlbArray, f64)>,
    /// Guest-physical mappings (EPT only): gPA page → host page, tagged by EPTP.
    gpa: TlbArray,
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
            // ESTIMATE: Intel does not document the guest-physical mapping cache; sized
            // like the PDE cache, holding 4 KiB and 2 MiB mappings.
            gpa: TlbArray::new("gpa", vec![PageSize::Size4K, PageSize::Size2M], 32, 32),
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

    pub fn gpa_lookup(&mut self, gpa: u64, tag: Pcid) -> Option<TlbEntry> {
        self.gpa.lookup(VirtAddr(gpa), tag)
    }

    pub fn gpa_insert(&mut self, e: TlbEntry) {
        self.gpa.insert(e);
    }

    /// INVEPT single-context (or INVVPID single-context for a VPID-only tag): every
    /// combined, guest-physical and paging-structure entry of `tag`, globals included.
    pub fn invalidate_tag(&mut self, tag: Pcid) {
        for (a, _) in self.arrays.iter_mut() {
            a.invalidate_where(|e| e.pcid == tag);
        }
        self.gpa.invalidate_where(|e| e.pcid == tag);
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

    #[test]
    fn zapped_roots_return_their_tables() {
        let mut h = HostTables::default();
        let root = h.alloc();
        let n = h.map(
            root,
            0x20_0000,
            PhysAddr(1 << 40),
            PageSize::Size2M,
            PteFlags::KERNEL_DATA,
        );
        assert_eq!(n, 2);
        assert!(h.walk(root, 0x20_1234, &mut |_| {}).is_some());
        assert_eq!(h.zap(root), (3, 1));
        let again = h.alloc();
        assert!(
            h.walk(again, 0x20_1234, &mut |_| {}).is_none(),
            "reused tables are zeroed"
        );
    }
}
