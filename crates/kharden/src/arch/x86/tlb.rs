//! One set-associative TLB array, entry by entry: tags are (page number, page size, PCID),
//! global entries match any PCID, replacement is LRU within a set.

use super::{PageSize, Pcid, PhysAddr, PteFlags, VirtAddr};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlbEntry {
    /// Page number in units of `size`.
    pub vpn: u64,
    pub size: PageSize,
    pub pcid: Pcid,
    pub global: bool,
    /// Start of the physical page (of `size`).
    pub page: PhysAddr,
    pub flags: PteFlags,
}

impl TlbEntry {
    pub fn va(&self) -> VirtAddr {
        let raw = self.vpn << self.size.shift();
        // Re-canonicalise the upper half.
        VirtAddr(if raw & (1 << 47) != 0 {
            raw | 0xffff_0000_0000_0000
        } else {
            raw
        })
    }
    /// Usable under `pcid`: tagged with it, or global.
    pub fn matches_context(&self, pcid: Pcid) -> bool {
        self.global || self.pcid == pcid
    }
}

#[derive(Debug, Clone)]
pub struct TlbArray {
    pub name: String,
    /// Page sizes this array holds natively.
    pub sizes: Vec<PageSize>,
    ways: usize,
    set_mask: u64,
    slots: Vec<Option<TlbEntry>>,
    stamps: Vec<u64>,
    clock: u64,
    /// One bit per occupied slot, so flushes visit only live entries.
    occupied: Vec<u64>,
}

impl TlbArray {
    pub fn new(name: &str, sizes: Vec<PageSize>, entries: usize, ways: usize) -> TlbArray {
        let sets = entries / ways;
        assert!(
            sets.is_power_of_two(),
            "{name}: sets must be a power of two"
        );
        TlbArray {
            name: name.into(),
            sizes,
            ways,
            set_mask: sets as u64 - 1,
            slots: vec![None; entries],
            stamps: vec![0; entries],
            clock: 0,
            occupied: vec![0; entries.div_ceil(64)],
        }
    }

    pub fn holds(&self, size: PageSize) -> bool {
        self.sizes.contains(&size)
    }

    fn set_range(&self, vpn: u64) -> std::ops::Range<usize> {
        let set = (vpn & self.set_mask) as usize;
        set * self.ways..(set + 1) * self.ways
    }

    /// The entry translating `va` under `pcid`, if present (updates LRU).
    pub fn lookup(&mut self, va: VirtAddr, pcid: Pcid) -> Option<TlbEntry> {
        for i in 0..self.sizes.len() {
            let size = self.sizes[i];
            let vpn = va.page_number(size);
            for slot in self.set_range(vpn) {
                if let Some(e) = self.slots[slot] {
                    if e.vpn == vpn && e.size == size && e.matches_context(pcid) {
                        self.clock += 1;
                        self.stamps[slot] = self.clock;
                        return Some(e);
                    }
                }
            }
        }
        None
    }

    /// Inserts `e` (its size must be one this array holds), replacing an entry with the
    /// same tag, else an invalid way, else the least recently used way.
    pub fn insert(&mut self, e: TlbEntry) {
        debug_assert!(self.holds(e.size));
        let range = self.set_range(e.vpn);
        let same = range.clone().find(|&s| matches!(self.slots[s], Some(o) if o.vpn == e.vpn && o.size == e.size && o.pcid == e.pcid));
        let victim = same
            .or_else(|| range.clone().find(|&s| self.slots[s].is_none()))
            .unwrap_or_else(|| range.min_by_key(|&s| self.stamps[s]).unwrap());
        self.clock += 1;
        self.slots[victim] = Some(e);
        self.stamps[victim] = self.clock;
        self.occupied[victim / 64] |= 1 << (victim % 64);
    }

    /// Invalidates every entry for which `kill` returns true; returns how many.
    pub fn invalidate_where(&mut self, kill: impl Fn(&TlbEntry) -> bool) -> usize {
        let mut n = 0;
        for w in 0..self.occupied.len() {
            let mut bits = self.occupied[w];
            while bits != 0 {
                let slot = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if self.slots[slot].is_some_and(|e| kill(&e)) {
                    self.clear(slot);
                    n += 1;
                }
            }
        }
        n
    }

    fn clear(&mut self, slot: usize) {
        self.slots[slot] = None;
        self.occupied[slot / 64] &= !(1 << (slot % 64));
    }

    /// Invalidates entries that cover `va` and satisfy `kill` (only the sets `va` maps to).
    pub fn invalidate_page_where(
        &mut self,
        va: VirtAddr,
        kill: impl Fn(&TlbEntry) -> bool,
    ) -> usize {
        let mut n = 0;
        for i in 0..self.sizes.len() {
            let size = self.sizes[i];
            let vpn = va.page_number(size);
            for slot in self.set_range(vpn) {
                if self.slots[slot].is_some_and(|e| e.vpn == vpn && e.size == size && kill(&e)) {
                    self.clear(slot);
                    n += 1;
                }
            }
        }
        n
    }

    pub fn entries(&self) -> impl Iterator<Item = &TlbEntry> {
        self.slots.iter().flatten()
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(va: u64, pcid: u16, global: bool) -> TlbEntry {
        TlbEntry {
            vpn: va >> 12,
            size: PageSize::Size4K,
            pcid: Pcid(pcid),
            global,
            page: PhysAddr(0x1000),
            flags: PteFlags::USER_DATA,
        }
    }

    #[test]
    fn pcid_tags_and_global() {
        let mut t = TlbArray::new("t", vec![PageSize::Size4K], 16, 4);
        t.insert(entry(0x1000, 1, false));
        t.insert(entry(0x2000, 1, true));
        assert!(t.lookup(VirtAddr(0x1000), Pcid(1)).is_some());
        assert!(t.lookup(VirtAddr(0x1000), Pcid(2)).is_none());
        assert!(
            t.lookup(VirtAddr(0x2000), Pcid(2)).is_some(),
            "global matches any PCID"
        );
    }

    #[test]
    fn lru_evicts_least_recent_in_set() {
        let mut t = TlbArray::new("t", vec![PageSize::Size4K], 2, 2); // one set, two ways
        t.insert(entry(0x1000, 0, false));
        t.insert(entry(0x2000, 0, false));
        t.lookup(VirtAddr(0x1000), Pcid(0));
        t.insert(entry(0x3000, 0, false));
        assert!(t.lookup(VirtAddr(0x1000), Pcid(0)).is_some());
        assert!(t.lookup(VirtAddr(0x2000), Pcid(0)).is_none());
    }

    #[test]
    fn kernel_va_round_trips() {
        let e = TlbEntry {
            vpn: VirtAddr(0xffff_ffff_8120_0000).page_number(PageSize::Size2M),
            size: PageSize::Size2M,
            ..entry(0, 0, false)
        };
        assert_eq!(e.va(), VirtAddr(0xffff_ffff_8120_0000));
    }
}
