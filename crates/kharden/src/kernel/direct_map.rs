//! The direct map (physmap): every physical page has a kernel alias at DIRECT_MAP + pa,
//! mapped with 1 GiB or 2 MiB pages at boot. Removing or restoring one 4 KiB alias (what
//! XPFO's set_kpte does) first splits the large page that covers it, as the kernel's
//! change_page_attr code does.

use super::layout::direct_map;
use super::{CpuId, Kernel};
use crate::arch::x86::{paging, PageSize, Pfn, PhysAddr, Pte, PteFlags, VirtAddr};
use crate::sim::{Counter, TimeCategory};

/// Cycles of one set_kpte(): lookup_address() walk of the kernel tables and the PTE update.
/// ESTIMATE: a software 4-level walk (~4 dependent loads) plus bookkeeping, ~100 instructions.
const SET_KPTE_CYCLES: f64 = 200.0;
/// Cycles to split one large mapping: allocate a table page and write 512 entries.
/// ESTIMATE: page allocation (~300 cycles) + 512 stores + the PMD/PUD update, ~1500 cycles.
const SPLIT_CYCLES: f64 = 1500.0;

impl Kernel {
    /// The direct-map alias of a frame.
    pub fn direct_map_addr(&self, pfn: Pfn) -> VirtAddr {
        direct_map(pfn.addr().0)
    }

    /// Makes the 4 KiB direct-map alias of `pfn` present (`true`) or not present, splitting
    /// the covering large page if needed; returns how many splits that took. Flushing stale
    /// TLB entries (of the page, and of a split large page) is the caller's policy.
    pub fn set_direct_map_entry(&mut self, cpu: CpuId, pfn: Pfn, present: bool) -> u32 {
        let va = self.direct_map_addr(pfn);
        let mut splits = 0;
        while let Some(leaf) = paging::translate(&self.mem, self.kernel_root, va)
            .filter(|l| l.size != PageSize::Size4K)
        {
            self.split_large(va, leaf.size, leaf.page, leaf.flags);
            self.cpus[cpu].stats.count(Counter::DirectMapSplits);
            self.compute(cpu, SPLIT_CYCLES, TimeCategory::DirectMap);
            splits += 1;
        }
        let flags = PteFlags::KERNEL_DATA
            .with_global(self.config.global_kernel == super::KernelGlobal::All);
        let table = self.pte_table_of(va);
        let pte = if present {
            Pte::leaf(pfn.addr(), PageSize::Size4K, flags)
        } else {
            Pte::EMPTY
        };
        self.mem.write(table, va.index(1), pte);
        self.compute(cpu, SET_KPTE_CYCLES, TimeCategory::DirectMap);
        splits
    }

    /// Size of the direct-map page that maps `pfn` now.
    pub fn direct_map_page_size(&self, pfn: Pfn) -> Option<PageSize> {
        paging::translate(&self.mem, self.kernel_root, self.direct_map_addr(pfn)).map(|l| l.size)
    }

    /// Whether the direct-map alias of `pfn` is currently mapped.
    pub fn direct_map_present(&self, pfn: Pfn) -> bool {
        paging::translate(&self.mem, self.kernel_root, self.direct_map_addr(pfn)).is_some()
    }

    /// Replaces the large leaf covering `va` by a table of next-smaller leaves with the same
    /// translation and permissions.
    fn split_large(&mut self, va: VirtAddr, size: PageSize, page: PhysAddr, flags: PteFlags) {
        let (level, smaller) = match size {
            PageSize::Size1G => (3u8, PageSize::Size2M),
            PageSize::Size2M => (2u8, PageSize::Size4K),
            PageSize::Size4K => unreachable!(),
        };
        let node = self.mem.node_of(page.pfn());
        let table = self.mem.alloc_table(node);
        for i in 0..512u64 {
            let pa = PhysAddr(page.0 + i * smaller.bytes());
            self.mem
                .write(table, i as usize, Pte::leaf(pa, smaller, flags));
        }
        let parent = self.table_at_level(va, level);
        self.mem
            .write(parent, va.index(level), Pte::table(table, false));
    }

    /// The page-table page holding `va`'s entry at `level` (4 = PML4) in the kernel tables.
    fn table_at_level(&self, va: VirtAddr, level: u8) -> Pfn {
        let mut t = self.kernel_root;
        for l in (level + 1..=4).rev() {
            t = self.mem.read(t, va.index(l)).addr().pfn();
        }
        t
    }

    fn pte_table_of(&self, va: VirtAddr) -> Pfn {
        self.table_at_level(va, 1)
    }
}
