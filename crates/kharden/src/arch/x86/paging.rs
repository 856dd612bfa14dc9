//! Building and reading 4-level page tables held in `PhysMem` (software view; the hardware
//! walker with its caches is in `mmu.rs`).

use super::{PageSize, Pfn, PhysAddr, PhysMem, Pte, PteFlags, VirtAddr};

/// A leaf translation found by a software walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leaf {
    /// Physical address of the start of the page.
    pub page: PhysAddr,
    pub size: PageSize,
    /// Effective permissions (RW/US ANDed, NX ORed across levels; G from the leaf).
    pub flags: PteFlags,
}

impl Leaf {
    pub fn translate(&self, va: VirtAddr) -> PhysAddr {
        PhysAddr(self.page.0 + (va.0 & (self.size.bytes() - 1)))
    }
}

/// Maps `va` (aligned to `size`) to `pa`, creating intermediate tables on `table_node`.
/// Replaces whatever leaf was there; panics (a model bug, not user input) if a large page
/// is in the way of a smaller mapping.
pub fn map(
    mem: &mut PhysMem,
    root: Pfn,
    va: VirtAddr,
    pa: PhysAddr,
    size: PageSize,
    flags: PteFlags,
    table_node: u32,
) {
    debug_assert_eq!(
        va.0 & (size.bytes() - 1),
        0,
        "unaligned {va:?} for {size:?}"
    );
    let mut table = root;
    for level in (size.leaf_level() + 1..=4).rev() {
        let idx = va.index(level);
        let e = mem.read(table, idx);
        table = if e.present() {
            assert!(
                !e.large(),
                "map {va:?} {size:?}: a large page is in the way at level {level}"
            );
            e.addr().pfn()
        } else {
            let t = mem.alloc_table(table_node);
            mem.write(table, idx, Pte::table(t, !va.is_kernel()));
            t
        };
    }
    mem.write(
        table,
        va.index(size.leaf_level()),
        Pte::leaf(pa, size, flags),
    );
}

/// Points `root`'s PML4 slot `index` at the same next-level table as `from`'s: the way every
/// address space shares the kernel half.
pub fn share_pml4_entry(mem: &mut PhysMem, root: Pfn, from: Pfn, index: usize) {
    let e = mem.read(from, index);
    mem.write(root, index, e);
}

/// Removes the leaf mapping `va`; returns what it mapped.
pub fn unmap(mem: &mut PhysMem, root: Pfn, va: VirtAddr) -> Option<Leaf> {
    let (table, idx, leaf) = find_leaf(mem, root, va)?;
    mem.write(table, idx, Pte::EMPTY);
    Some(leaf)
}

/// Changes the permissions of the leaf mapping `va`; returns the old leaf.
pub fn protect(mem: &mut PhysMem, root: Pfn, va: VirtAddr, flags: PteFlags) -> Option<Leaf> {
    let (table, idx, leaf) = find_leaf(mem, root, va)?;
    mem.write(table, idx, Pte::leaf(leaf.page, leaf.size, flags));
    Some(leaf)
}

/// Software walk: the leaf that maps `va`, if any.
pub fn translate(mem: &PhysMem, root: Pfn, va: VirtAddr) -> Option<Leaf> {
    find_leaf(mem, root, va).map(|(_, _, leaf)| leaf)
}

/// The tables below `root` that a walk of `va` reads, top down, to its leaf or to the first
/// entry that is not present.
pub fn tables_on_walk(mem: &PhysMem, root: Pfn, va: VirtAddr) -> Vec<Pfn> {
    let mut tables = vec![];
    let mut table = root;
    for level in (2..=4u8).rev() {
        let e = mem.read(table, va.index(level));
        if !e.present() || e.leaf_size(level).is_some() {
            break;
        }
        table = e.addr().pfn();
        tables.push(table);
    }
    tables
}

fn find_leaf(mem: &PhysMem, root: Pfn, va: VirtAddr) -> Option<(Pfn, usize, Leaf)> {
    let mut table = root;
    let (mut writable, mut user, mut no_exec) = (true, true, false);
    for level in (1..=4u8).rev() {
        let idx = va.index(level);
        let e = mem.read(table, idx);
        if !e.present() {
            return None;
        }
        writable &= e.writable();
        user &= e.user();
        no_exec |= e.no_exec();
        let size = e.leaf_size(level);
        if let Some(size) = size {
            let flags = PteFlags {
                writable,
                user,
                no_exec,
                global: e.global(),
            };
            return Some((
                table,
                idx,
                Leaf {
                    page: e.addr(),
                    size,
                    flags,
                },
            ));
        }
        table = e.addr().pfn();
    }
    None
}

/// Calls `f(va, leaf)` for every leaf reachable from `root` through PML4 slots `pml4_slots`.
pub fn for_each_leaf(
    mem: &PhysMem,
    root: Pfn,
    pml4_slots: std::ops::Range<usize>,
    f: &mut dyn FnMut(VirtAddr, Leaf),
) {
    for i in pml4_slots {
        let e = mem.read(root, i);
        if e.present() {
            let perms = (e.writable(), e.user(), e.no_exec());
            visit(
                mem,
                e.addr().pfn(),
                3,
                VirtAddr::from_pml4_index(i),
                perms,
                f,
            );
        }
    }
}

fn visit(
    mem: &PhysMem,
    table: Pfn,
    level: u8,
    base: VirtAddr,
    perms: (bool, bool, bool),
    f: &mut dyn FnMut(VirtAddr, Leaf),
) {
    let span = 1u64 << (12 + 9 * (level as u32 - 1));
    for (i, e) in mem.table(table).iter().enumerate() {
        if !e.present() {
            continue;
        }
        let va = base.offset(i as u64 * span);
        let p = (
            perms.0 & e.writable(),
            perms.1 & e.user(),
            perms.2 | e.no_exec(),
        );
        let size = e.leaf_size(level);
        match size {
            Some(size) => f(
                va,
                Leaf {
                    page: e.addr(),
                    size,
                    flags: PteFlags {
                        writable: p.0,
                        user: p.1,
                        no_exec: p.2,
                        global: e.global(),
                    },
                },
            ),
            None => visit(mem, e.addr().pfn(), level - 1, va, p, f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_translate_unmap() {
        let mut mem = PhysMem::new(1);
        let root = mem.alloc_table(0);
        let va = VirtAddr(0x7fff_0000_1000);
        map(
            &mut mem,
            root,
            va,
            PhysAddr(0x5000),
            PageSize::Size4K,
            PteFlags::USER_DATA,
            0,
        );
        let leaf = translate(&mem, root, va.offset(0x123)).unwrap();
        assert_eq!(leaf.translate(va.offset(0x123)), PhysAddr(0x5123));
        assert!(leaf.flags.user && leaf.flags.writable && leaf.flags.no_exec);
        assert_eq!(unmap(&mut mem, root, va).unwrap().page, PhysAddr(0x5000));
        assert!(translate(&mem, root, va).is_none());
    }

    #[test]
    fn large_pages_and_enumeration() {
        let mut mem = PhysMem::new(1);
        let root = mem.alloc_table(0);
        let text = VirtAddr(0xffff_ffff_8100_0000);
        map(
            &mut mem,
            root,
            text,
            PhysAddr(0x100_0000),
            PageSize::Size2M,
            PteFlags::KERNEL_TEXT.with_global(true),
            0,
        );
        let leaf = translate(&mem, root, text.offset(0x1234)).unwrap();
        assert_eq!(leaf.size, PageSize::Size2M);
        assert!(leaf.flags.global && !leaf.flags.user);
        let mut seen = vec![];
        for_each_leaf(&mem, root, 256..512, &mut |va, l| seen.push((va, l.size)));
        assert_eq!(seen, vec![(text, PageSize::Size2M)]);
    }
}
