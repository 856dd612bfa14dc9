//! Which CPUs may hold a translation of a kernel page, and which may have paging-structure
//! cache entries: a superset kept by the walks that create them. An invalidation that reaches
//! every CPU (AMD INVLPGB, arm64 TLBI ...IS, vfree's purge of a freed kernel stack) then
//! visits only those CPUs. This is simulator bookkeeping, not hardware, and changes no
//! result: invalidating a page in TLBs that hold nothing for it changes nothing there, and on
//! a 256-CPU machine it spares 255 CPUs' arrays per page.
//!
//! Why a superset: an entry enters a CPU's TLB arrays only from a walk on that CPU (the walk
//! fills the STLB and an L1 array; an STLB hit copies such an entry into L1), and its
//! paging-structure caches fill only during walks. Evictions and local invalidations only
//! remove entries, so a CPU noted here may hold nothing, and one not noted holds nothing.

use super::{PageSize, VirtAddr};
use crate::sim::int_map::IntMap;
use crate::sim::CpuSet;

#[derive(Debug, Clone)]
pub struct TlbHolders {
    cpus: usize,
    /// Per walked kernel leaf (its size and page number): the CPUs that walked it.
    pages: IntMap<u64, Walkers>,
    /// CPUs that walked since their paging-structure caches were last emptied here.
    walked: CpuSet,
}

/// The CPUs that walked a leaf. Most kernel leaves a walk reaches are one CPU's (the 4 KiB
/// direct-map alias of a page it kmaps), so that case is a word in the index, not a set.
#[derive(Debug, Clone)]
enum Walkers {
    One(usize),
    Many(Box<CpuSet>),
}

impl Walkers {
    fn add(&mut self, cpu: usize, cpus: usize) {
        match self {
            Walkers::One(c) if *c == cpu => {}
            Walkers::One(c) => {
                let mut set = CpuSet::new(cpus);
                set.insert(*c);
                set.insert(cpu);
                *self = Walkers::Many(Box::new(set));
            }
            Walkers::Many(set) => set.insert(cpu),
        }
    }
    fn contains(&self, cpu: usize) -> bool {
        match self {
            Walkers::One(c) => *c == cpu,
            Walkers::Many(set) => set.contains(cpu),
        }
    }
    /// Adds these CPUs to `set`.
    fn add_to(&self, set: &mut CpuSet) {
        match self {
            Walkers::One(c) => set.insert(*c),
            Walkers::Many(s) => set.union_with(s),
        }
    }
}

fn key(size: PageSize, vpn: u64) -> u64 {
    (size as u64) << 60 | (vpn & ((1 << 60) - 1))
}

impl TlbHolders {
    pub fn new(cpus: usize) -> TlbHolders {
        TlbHolders {
            cpus,
            pages: IntMap::default(),
            walked: CpuSet::new(cpus),
        }
    }

    /// `cpu` walked `va`, to a leaf of `size` unless the walk faulted: its paging-structure
    /// caches may hold entries, and its TLBs the leaf. Only kernel pages are indexed, the
    /// only ones invalidated on every CPU.
    pub fn note_walk(&mut self, cpu: usize, va: VirtAddr, leaf: Option<PageSize>) {
        self.walked.insert(cpu);
        if let Some(size) = leaf.filter(|_| va.is_kernel()) {
            let cpus = self.cpus;
            self.pages
                .entry(key(size, va.page_number(size)))
                .and_modify(|w| w.add(cpu, cpus))
                .or_insert(Walkers::One(cpu));
        }
    }

    /// The CPUs that may hold a translation covering `va`'s 4 KiB page (None: no CPU may),
    /// which the caller invalidates in every context on each of them. Afterwards none holds
    /// a 4 KiB entry for it, so that page is forgotten; larger leaves stay, since an L1
    /// array may hold other fractured parts of them.
    pub fn take_page(&mut self, va: VirtAddr) -> Option<CpuSet> {
        let mut holders: Option<CpuSet> = None;
        let small = self
            .pages
            .remove(&key(PageSize::Size4K, va.page_number(PageSize::Size4K)));
        let large = [PageSize::Size2M, PageSize::Size1G]
            .map(|size| self.pages.get(&key(size, va.page_number(size))));
        for w in small.iter().chain(large.into_iter().flatten()) {
            w.add_to(holders.get_or_insert_with(|| CpuSet::new(self.cpus)));
        }
        holders
    }

    /// The index's contents in page order.
    pub fn canon(&self, c: &mut crate::sim::Canon) {
        c.sorted_map(self.pages.iter());
        c.debug(&self.walked);
    }

    /// The CPUs whose paging-structure caches may hold entries.
    /// Whether `cpu` may hold a translation of the kernel page at `va` (of any size):
    /// false means its TLBs hold none, so an INVLPG there finds nothing.
    pub fn may_hold(&self, cpu: usize, va: VirtAddr) -> bool {
        [PageSize::Size4K, PageSize::Size2M, PageSize::Size1G]
            .iter()
            .any(|&size| {
                self.pages
                    .get(&key(size, va.page_number(size)))
                    .is_some_and(|w| w.contains(cpu))
            })
    }

    pub fn walked(&self) -> &CpuSet {
        &self.walked
    }

    /// The caller emptied the paging-structure caches of every CPU `walked()` named.
    pub fn forget_walked(&mut self) {
        self.walked.clear();
    }

    /// Every CPU's TLBs and paging-structure caches were emptied, globals included.
    pub fn clear(&mut self) {
        self.pages.clear();
        self.walked.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KVA: VirtAddr = VirtAddr(0xffff_8880_0010_0000);

    fn cpus(set: Option<CpuSet>) -> Vec<usize> {
        set.map_or(vec![], |s| s.iter().collect())
    }

    fn take_walked(h: &mut TlbHolders) -> Vec<usize> {
        let walked = h.walked().iter().collect();
        h.forget_walked();
        walked
    }

    #[test]
    fn a_page_is_held_by_the_cpus_that_walked_it_until_taken() {
        let mut h = TlbHolders::new(130);
        h.note_walk(3, KVA, Some(PageSize::Size4K));
        h.note_walk(129, KVA.offset(100), Some(PageSize::Size4K));
        h.note_walk(7, KVA.offset(4096), Some(PageSize::Size4K));
        assert!(h.may_hold(3, KVA) && h.may_hold(129, KVA) && !h.may_hold(7, KVA));
        assert_eq!(cpus(h.take_page(KVA)), [3, 129]);
        assert!(h.take_page(KVA).is_none());
        assert!(!h.may_hold(3, KVA));
        assert_eq!(cpus(h.take_page(KVA.offset(4096))), [7]);
    }

    #[test]
    fn large_leaves_cover_their_pages_and_stay() {
        let mut h = TlbHolders::new(4);
        h.note_walk(1, KVA, Some(PageSize::Size2M));
        h.note_walk(2, KVA, Some(PageSize::Size1G));
        let inside = KVA.offset(5 * 4096);
        assert!(h.may_hold(1, inside) && h.may_hold(2, inside) && !h.may_hold(3, inside));
        assert_eq!(cpus(h.take_page(inside)), [1, 2]);
        assert_eq!(cpus(h.take_page(inside)), [1, 2]);
        h.clear();
        assert!(h.take_page(inside).is_none());
    }

    #[test]
    fn user_pages_are_not_indexed_but_their_walks_fill_caches() {
        let mut h = TlbHolders::new(4);
        h.note_walk(2, VirtAddr(0x40_0000), Some(PageSize::Size4K));
        assert!(h.take_page(VirtAddr(0x40_0000)).is_none());
        assert_eq!(take_walked(&mut h), [2]);
        assert!(take_walked(&mut h).is_empty());
        // A walk that faults may still have filled paging-structure caches on its way down.
        h.note_walk(3, KVA, None);
        assert!(h.take_page(KVA).is_none());
        assert_eq!(take_walked(&mut h), [3]);
    }
}
