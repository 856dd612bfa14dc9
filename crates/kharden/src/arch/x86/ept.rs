//! The second translation stage of hardware virtualization (Intel EPT, AMD NPT): host
//! tables in the 4-level radix format of the guest's own (SDM vol. 3C 29.3.2; shadow page
//! tables share it), the hardware walk of a guest-physical address through them, and the
//! guest-physical mapping cache in front of that walk (SDM vol. 3C 29.4.1, tagged by EPTP:
//! only INVEPT drops it, never a guest CR3 write or INVLPG).

use super::tlb::{TlbArray, TlbEntry};
use super::{PageSize, Pcid, Pfn, PhysAddr, PhysMem, Pte, PteFlags, VirtAddr};

/// Host memory holding EPT or shadow tables, with the pages of zapped roots reused.
pub struct HostTables {
    pub mem: PhysMem,
    pool: Vec<Pfn>,
    /// Host-physical address of the tables' frame 0: what a walk's loads are cached at.
    base: u64,
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
        HostTables::at(0)
    }
}

impl HostTables {
    /// Tables whose frames start at host-physical `base`.
    pub fn at(base: u64) -> HostTables {
        HostTables {
            mem: PhysMem::new(1),
            pool: vec![],
            base,
        }
    }

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
            load(self.base + table.addr().0 + idx as u64 * 8);
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

/// A vCPU's guest-physical mapping cache: gPA page to host page, tagged by EPTP.
#[derive(Debug, Clone)]
pub struct GpaCache {
    entries: TlbArray,
}

impl Default for GpaCache {
    fn default() -> Self {
        GpaCache {
            // ESTIMATE: Intel does not document the guest-physical mapping cache; sized
            // like the PDE cache, holding mappings of every EPT page size.
            entries: TlbArray::new("gpa", PageSize::ALL.to_vec(), 32, 32),
        }
    }
}

impl GpaCache {
    /// `gpa` under EPTP `tag`: from the cache, or from a walk of `tables` from `root` (each
    /// entry's host address passed to `load`), then cached. `None`: no mapping, an EPT
    /// violation for the hypervisor to fix before the access retries.
    pub fn translate(
        &mut self,
        tables: &HostTables,
        root: Pfn,
        tag: Pcid,
        gpa: u64,
        load: &mut dyn FnMut(u64),
    ) -> Option<HostLeaf> {
        if let Some(e) = self.entries.lookup(VirtAddr(gpa), tag) {
            return Some(HostLeaf {
                page: e.page,
                size: e.size,
                flags: e.flags,
            });
        }
        let leaf = tables.walk(root, gpa, load)?;
        self.entries.insert(TlbEntry {
            vpn: VirtAddr(gpa).page_number(leaf.size),
            size: leaf.size,
            pcid: tag,
            global: false,
            page: leaf.page,
            flags: leaf.flags,
        });
        Some(leaf)
    }

    /// INVEPT single-context: what EPTP `tag` tagged.
    pub fn invalidate_tag(&mut self, tag: Pcid) {
        self.entries.invalidate_where(|e| e.pcid == tag);
    }

    pub fn canon(&self, c: &mut crate::sim::Canon) {
        self.entries.canon(c);
    }
}

/// What a vCPU's MMU asks of the hypervisor when it walks in two dimensions: the EPT loaded
/// now, and the handling of an EPT violation (the page mapped, before the access retries).
pub trait SecondStage {
    /// The loaded EPT: its tables, root and EPTP tag.
    fn loaded(&self) -> (&HostTables, Pfn, Pcid);
    /// An EPT violation at `gpa`: the hypervisor maps it in the loaded EPT.
    fn fault_in(&mut self, gpa: u64);
}

/// Host-physical address of the EPT tables of a guest whose RAM starts at host-physical 0.
pub const EPT_TABLES_HOST_BASE: u64 = 1 << 40;

#[cfg(test)]
mod tests {
    use super::*;

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
