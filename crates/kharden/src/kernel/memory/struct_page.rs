//! `struct page`: the 64 bytes Linux keeps per frame in the vmemmap array, on the frame's own
//! node (more under a defense that adds fields: BootConfig::struct_page_bytes). The
//! allocator reads and writes them (free-list links, refcount, flags); when a frame was last
//! handled long ago, its line comes from DRAM. In the recorded compile job these
//! misses are 12% of an anonymous fault's samples (docs/design/kernel-paths.md section 6).
//!
//! The lines go through the data caches at their place on the frame's node
//! (`PhysMem::struct_page_addr`). The vmemmap's translations are not modelled: it is mapped
//! with 2 MiB pages, one per 128 MiB of memory, so its DTLB misses are rare beside the line
//! misses.

use crate::arch::x86::{Pfn, PhysMem};
use crate::kernel::{CpuId, Kernel};
use crate::sim::{Counter, TimeCategory};

/// How the allocator reaches a run of struct pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Following free-list links: each address comes from the line before, so every miss
    /// waits in full (rmqueue_bulk(), taking a page off a per-CPU list).
    Linked,
    /// Independent accesses (a page freed among others): DRAM misses overlap,
    /// lines_in_flight at a time.
    Stream,
}

impl Kernel {
    /// The allocator touches the struct pages of `pfns` on `cpu`, reaching them as `reach`
    /// says; waits beyond L1 are charged as kernel-cache-miss. A struct page larger than a
    /// line is touched on every line it occupies: the fields the allocator uses (flags, lru,
    /// refcount: the first 56 bytes) straddle two lines for three frames in four at an
    /// 80-byte stride, and XPFO's own fields sit in the second.
    pub(crate) fn touch_struct_pages(&mut self, cpu: CpuId, pfns: &[Pfn], reach: Reach) {
        let bytes = self.config.struct_page_bytes;
        let lines_of = move |pfn: Pfn| {
            let start = PhysMem::struct_page_addr(pfn, bytes).0;
            (start & !63..start + bytes).step_by(64)
        };
        match reach {
            Reach::Stream => self.stream_lines(
                cpu,
                pfns.iter().flat_map(|&pfn| lines_of(pfn)),
                Counter::StructPagesFromMemory,
            ),
            Reach::Linked => self.linked_lines(cpu, pfns.iter().map(|&pfn| lines_of(pfn))),
        }
    }

    /// Loads of each struct page's lines, its address known only from the struct before:
    /// every wait beyond L1 is paid in full, though one struct's own lines load together.
    fn linked_lines<L: Iterator<Item = u64>>(
        &mut self,
        cpu: CpuId,
        structs: impl Iterator<Item = L>,
    ) {
        if self.fast_forward {
            return;
        }
        let (mut from_memory, mut waited) = (0, 0.0);
        for lines in structs {
            let mut longest: f64 = 0.0;
            for pa in lines {
                let h = self.load_line(cpu, pa);
                from_memory += h.is_dram() as u64;
                longest = longest.max(self.caches.stall_cycles(h));
            }
            waited += longest;
        }
        self.cpus[cpu]
            .stats
            .add(Counter::StructPagesFromMemory, from_memory);
        self.compute(cpu, waited, TimeCategory::KernelCacheMiss);
    }
}

#[cfg(test)]
mod tests {
    use super::Reach;
    use crate::arch::x86::Pfn;
    use crate::kernel::memory::page_alloc::Gfp;
    use crate::kernel::Kernel;
    use crate::sim::{Counter, Time, TimeCategory};
    use crate::{defense, machine};

    #[test]
    fn linked_misses_wait_in_full_and_freed_pages_stream() {
        let m = machine::load("haswell-i7-4770").unwrap();
        let mut k = Kernel::boot(m.clone(), defense::parse_list("none").unwrap());
        let dram = m.memory.dram_local_ns * m.cpu.frequency_ghz - m.memory.l1d_hit_cycles as f64;
        let waited = |k: &Kernel| k.cpus[0].stats.time(TimeCategory::KernelCacheMiss);
        let misses = |k: &Kernel| k.cpus[0].stats.counter(Counter::StructPagesFromMemory);
        // frames far from anything boot touched (one struct page, one line, each)
        let fresh = |first: u64| [Pfn(first), Pfn(first + 1), Pfn(first + 2)];
        let (t0, n0) = (waited(&k), misses(&k));
        k.touch_struct_pages(0, &fresh(1 << 20), Reach::Linked);
        assert_eq!(waited(&k) - t0, k.clock.cycles(3.0 * dram));
        assert_eq!(misses(&k) - n0, 3);
        let t1 = waited(&k);
        k.touch_struct_pages(0, &fresh(1 << 21), Reach::Stream);
        let streamed = 3.0 * dram / m.memory.lines_in_flight as f64;
        assert_eq!(waited(&k) - t1, k.clock.cycles(streamed));
        let t2 = waited(&k);
        k.touch_struct_pages(0, &fresh(1 << 20), Reach::Linked);
        assert_eq!(waited(&k) - t2, Time::ZERO, "cached now");
        // the allocator goes through them
        let n = misses(&k);
        let pfn = k.alloc_page(0, Gfp::PageCache, None);
        k.free_page(0, pfn);
        assert!(
            misses(&k) > n,
            "a first allocation reaches struct pages in DRAM"
        );
    }

    /// XPFO's two fields make struct page 80 bytes: three fresh neighbours occupy four lines,
    /// and each struct's own two lines load together, so the chain still waits three times.
    #[test]
    fn a_grown_struct_page_straddles_two_lines_that_load_together() {
        let m = machine::load("haswell-i7-4770").unwrap();
        let mut k = Kernel::boot(m.clone(), defense::parse_list("xpfo:deferred").unwrap());
        assert_eq!(k.config.struct_page_bytes, 80);
        let dram = m.memory.dram_local_ns * m.cpu.frequency_ghz - m.memory.l1d_hit_cycles as f64;
        let before = k.cpus[0].stats.clone();
        let fresh = [Pfn(1 << 20), Pfn((1 << 20) + 1), Pfn((1 << 20) + 2)];
        k.touch_struct_pages(0, &fresh, Reach::Linked);
        let s = &k.cpus[0].stats;
        assert_eq!(
            s.counter(Counter::StructPagesFromMemory)
                - before.counter(Counter::StructPagesFromMemory),
            4
        );
        assert_eq!(
            s.time(TimeCategory::KernelCacheMiss) - before.time(TimeCategory::KernelCacheMiss),
            k.clock.cycles(3.0 * dram)
        );
    }
}
