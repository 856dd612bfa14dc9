//! The direct map (physmap): every physical page has a kernel alias at DIRECT_MAP + pa,
//! mapped with 1 GiB or 2 MiB pages at boot. Removing or restoring one 4 KiB alias (what
//! XPFO's set_kpte does) first splits the large page that covers it, as the kernel's
//! change_page_attr code does.

use super::layout::direct_map;
use crate::arch::x86::{paging, PageSize, Pfn, PhysAddr, Pte, PteFlags, VirtAddr};
use crate::kernel::{CpuId, Kernel};
use crate::sim::{Counter, TimeCategory};

/// The direct map grows with the frames the simulation hands out, in steps of this many
/// bytes per node, so booting does not map a node's whole address range (Linux maps all of
/// RAM at boot; frames nobody uses have no observable alias).
const COVER_STEP_BYTES: u64 = 4 << 30;

impl Kernel {
    /// Extends `node`'s direct map (1 GiB pages where the CPU has them, Linux's
    /// direct_gbpages, else 2 MiB) to the step boundary above every data frame handed out
    /// there.
    pub(crate) fn cover_direct_map(&mut self, node: u32) {
        let n = node as usize;
        let used = self.mem.data_bytes_used(node);
        if used < self.direct_map_covered[n] {
            return;
        }
        let size = if self.machine.cpu.features.gbpages {
            PageSize::Size1G
        } else {
            PageSize::Size2M
        };
        let flags = PteFlags::KERNEL_DATA
            .with_global(self.config.global_kernel == crate::kernel::KernelGlobal::All);
        let base = self.mem.node_base(node).0;
        let from = self.direct_map_covered[n];
        let to = ((used / COVER_STEP_BYTES + 1) * COVER_STEP_BYTES)
            .min(crate::arch::x86::physmem::DATA_BYTES_PER_NODE);
        for off in (from..to).step_by(size.bytes() as usize) {
            let pa = base + off;
            paging::map(
                &mut self.mem,
                self.kernel_root,
                direct_map(pa),
                PhysAddr(pa),
                size,
                flags,
                node,
            );
        }
        self.direct_map_covered[n] = to;
    }

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
            self.compute(cpu, self.params.split_cycles, TimeCategory::DirectMap);
            splits += 1;
        }
        let table = self.pte_table_of(va);
        self.write_direct_map_pte(cpu, table, pfn, present);
        splits
    }

    /// lookup_address() of `va` in the kernel's tables on `cpu`: a software walk, each
    /// entry's load waiting for the one above it, to the leaf or the first entry not present.
    /// Its time is charged to direct-map.
    pub fn lookup_address(&mut self, cpu: CpuId, va: VirtAddr) {
        let tables = paging::tables_on_walk(&self.mem, self.kernel_root, va);
        let mut cycles = 0.0;
        for (table, level) in std::iter::once(self.kernel_root)
            .chain(tables)
            .zip((1..=4).rev())
        {
            let hit = self.load_line(cpu, table.addr().0 + va.index(level) as u64 * 8);
            cycles += self.caches.cycles(hit);
        }
        self.compute(cpu, cycles, TimeCategory::DirectMap);
    }

    /// set_direct_map_entry() of every frame of `pfns`, with the same effect, for boot-time
    /// runs of frames (XPFO's recycled frames): a 2 MiB region's PTE table is found once per
    /// run of its frames, since after the run's first frame the region is split and the
    /// others only write their entry.
    pub fn set_direct_map_entries(&mut self, cpu: CpuId, pfns: &[Pfn], present: bool) {
        let mut known: Option<(VirtAddr, Pfn)> = None;
        for &pfn in pfns {
            let region = self.direct_map_addr(pfn).align_down(PageSize::Size2M);
            match known {
                Some((r, table)) if r == region => {
                    self.write_direct_map_pte(cpu, table, pfn, present)
                }
                _ => {
                    self.set_direct_map_entry(cpu, pfn, present);
                    known = Some((region, self.pte_table_of(region)));
                }
            }
        }
    }

    /// Writes `pfn`'s 4 KiB direct-map entry into its PTE table `table`.
    fn write_direct_map_pte(&mut self, cpu: CpuId, table: Pfn, pfn: Pfn, present: bool) {
        let flags = PteFlags::KERNEL_DATA
            .with_global(self.config.global_kernel == crate::kernel::KernelGlobal::All);
        let pte = if present {
            Pte::leaf(pfn.addr(), PageSize::Size4K, flags)
        } else {
            Pte::EMPTY
        };
        self.mem
            .write(table, self.direct_map_addr(pfn).index(1), pte);
        self.compute(cpu, self.params.set_kpte_cycles, TimeCategory::DirectMap);
    }

    /// Makes the direct-map alias of the 2 MiB block at `pa` read-only, splitting a 1 GiB
    /// page over it: set_memory_ro() on kernel text changes its direct-map alias too (Linux
    /// cpa_process_alias()). Boot work, charged nothing.
    pub fn protect_direct_map_2m(&mut self, pa: PhysAddr) {
        let va = direct_map(pa.0);
        let leaf = paging::translate(&self.mem, self.kernel_root, va)
            .expect("the direct map covers every frame handed out");
        if leaf.size == PageSize::Size1G {
            self.split_large(va, leaf.size, leaf.page, leaf.flags);
        }
        let flags = PteFlags {
            writable: false,
            ..PteFlags::KERNEL_DATA
        }
        .with_global(self.config.global_kernel == crate::kernel::KernelGlobal::All);
        let table = self.table_at_level(va, 2);
        self.mem
            .write(table, va.index(2), Pte::leaf(pa, PageSize::Size2M, flags));
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

#[cfg(test)]
mod tests {
    use crate::kernel::memory::page_alloc::Gfp;
    use crate::kernel::Kernel;
    use crate::{defense, machine};

    #[test]
    fn the_direct_map_grows_with_the_frames_handed_out() {
        for m in ["ivybridge-i5-3550", "xeon-platinum-8160"] {
            let mut k = Kernel::boot(
                machine::load(m).unwrap(),
                defense::parse_list("none").unwrap(),
            );
            // Use up the first 4 GiB of node 0's frames, as 160 compile jobs do.
            k.mem.alloc_data_contiguous(0, 1 << 20, 1);
            let pfn = k.alloc_page(0, Gfp::UserAnon, None);
            assert!(pfn.0 >= 1 << 20, "{m}: {pfn:?}");
            assert!(
                k.direct_map_present(pfn),
                "{m}: the new frame has its alias"
            );
            let va = k.direct_map_addr(pfn);
            assert!(
                k.touch(0, va, crate::arch::x86::Access::Write).is_ok(),
                "{m}"
            );
        }
    }

    #[test]
    fn a_run_of_frames_unmapped_at_once_leaves_what_unmapping_each_leaves() {
        let boot = || {
            let mut k = Kernel::boot(
                machine::load("xeon-platinum-8160").unwrap(),
                defense::parse_list("none").unwrap(),
            );
            let frames: Vec<_> = (0..1500).map(|_| k.mem.alloc_data(0)).collect();
            k.cover_direct_map(0);
            (k, frames)
        };
        let ((mut each, frames), (mut run, same)) = (boot(), boot());
        assert_eq!(frames, same);
        // Every other frame over three 2 MiB regions, then one of them again.
        let pick: Vec<_> = frames
            .iter()
            .step_by(2)
            .chain([&frames[4]])
            .copied()
            .collect();
        for &pfn in &pick {
            each.set_direct_map_entry(0, pfn, false);
        }
        run.set_direct_map_entries(0, &pick, false);
        assert!(run.direct_map_present(frames[1]) && !run.direct_map_present(frames[2]));
        assert_eq!(
            each.cpus[0].stats, run.cpus[0].stats,
            "splits and time alike"
        );
        assert_eq!(each.canon(), run.canon(), "the same page tables");
    }
}
