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

/// A slot's tag packed in one word, so a set is searched in a few compares over contiguous
/// memory: valid bit, page size, global bit, PCID (12 bits) and the low 48 bits of the page
/// number (enough to tell canonical addresses apart at every size).
const TAG_VALID: u64 = 1 << 63;
const TAG_GLOBAL: u64 = 1 << 60;
const TAG_PCID_SHIFT: u32 = 48;
const TAG_PCID: u64 = 0xfff << TAG_PCID_SHIFT;
const TAG_VPN: u64 = (1 << 48) - 1;

/// The tag bits every lookup must match: valid, size and page number.
fn page_tag(vpn: u64, size: PageSize) -> u64 {
    TAG_VALID | (size as u64) << 61 | (vpn & TAG_VPN)
}

fn tag_of(e: &TlbEntry) -> u64 {
    debug_assert!(e.pcid.0 < 1 << 12, "PCIDs are 12 bits");
    page_tag(e.vpn, e.size)
        | if e.global { TAG_GLOBAL } else { 0 }
        | (e.pcid.0 as u64) << TAG_PCID_SHIFT
}

/// Whether a slot tagged `tag` translates the page `want` (a page_tag) under `pcid`.
fn tag_matches(tag: u64, want: u64, pcid: Pcid) -> bool {
    page_of(tag) == want
        && (tag & TAG_GLOBAL != 0 || (tag & TAG_PCID) >> TAG_PCID_SHIFT == pcid.0 as u64)
}

/// Counts of the slots holding a tag, by a hash of the tag's page (size and page number),
/// each with the slot last tagged there while it still is. A zero count proves no slot holds
/// the page; a count of one with a hint names the only slot that can. A lookup or a one-page
/// invalidation then skips the set scan (all of a fully associative array); a broadcast
/// invalidation reaching hundreds of simulated TLBs mostly reads one word per array.
#[derive(Debug, Clone)]
struct PageFilter {
    buckets: Vec<Bucket>,
    shift: u32,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    count: u16,
    /// A slot holding a tag of this bucket, or NO_HINT.
    hint: u16,
}

const NO_HINT: u16 = u16::MAX;

/// Where the slots that may hold a page are.
enum Probe {
    Absent,
    Only(usize),
    Scan,
}

/// The page part of a tag (what the filter hashes).
fn page_of(tag: u64) -> u64 {
    tag & !(TAG_GLOBAL | TAG_PCID)
}

/// The `live` counter of a page: its size, and whether it is in the upper (kernel) half
/// (bit 47 of the canonical address).
fn class(size: PageSize, vpn: u64) -> usize {
    size as usize * 2 + ((vpn << size.shift()) >> 47 & 1) as usize
}

/// The `live` counter of a valid slot's tag, from the tag alone (its page number keeps bit
/// 47 of the address at every size), so replacing or clearing a slot reads no entry.
fn class_of_tag(tag: u64) -> usize {
    let size = PageSize::ALL[((tag >> 61) & 3) as usize];
    class(size, tag & TAG_VPN)
}

impl PageFilter {
    fn new(capacity: usize) -> PageFilter {
        assert!(capacity < NO_HINT as usize, "a hint names any slot");
        let buckets = (capacity * 2).next_power_of_two().max(64);
        PageFilter {
            buckets: vec![
                Bucket {
                    count: 0,
                    hint: NO_HINT
                };
                buckets
            ],
            shift: 64 - buckets.trailing_zeros(),
        }
    }
    fn bucket(&self, page: u64) -> usize {
        (page.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }
    fn probe(&self, page: u64) -> Probe {
        match self.buckets[self.bucket(page)] {
            Bucket { count: 0, .. } => Probe::Absent,
            Bucket { count: 1, hint } if hint != NO_HINT => Probe::Only(hint as usize),
            _ => Probe::Scan,
        }
    }
    /// `slot`'s tag changes from `old` to `new` (0: no tag).
    fn retag(&mut self, slot: usize, old: u64, new: u64) {
        if old != 0 {
            let b = self.bucket(page_of(old));
            let bucket = &mut self.buckets[b];
            bucket.count -= 1;
            if bucket.hint as usize == slot {
                bucket.hint = NO_HINT;
            }
        }
        if new != 0 {
            let b = self.bucket(page_of(new));
            let bucket = &mut self.buckets[b];
            bucket.count += 1;
            bucket.hint = slot as u16;
        }
    }
}

/// Ways up to which a set scan (two host cache lines of tags, next to each other) costs less
/// than probing the filter, whose buckets are one more line to miss on: with a hundred
/// simulated CPUs the filters of 12-way STLBs were a third of a lookup's time.
const SCAN_WAYS: usize = 16;

#[derive(Debug, Clone)]
pub struct TlbArray {
    pub name: String,
    /// Page sizes this array holds natively.
    pub sizes: Vec<PageSize>,
    ways: usize,
    set_mask: u64,
    /// Per slot: the packed tag (0 when invalid) and the entry.
    tags: Vec<u64>,
    slots: Vec<Option<TlbEntry>>,
    stamps: Vec<u64>,
    clock: u64,
    /// One bit per occupied slot, so flushes visit only live entries.
    occupied: Vec<u64>,
    /// Entries held per page size and address-space half (see `class`): a lookup skips the
    /// sizes with none in its half. Most user lookups then probe one set, not one per size
    /// (no user page is 2 MiB or 1 GiB here, and a kernel entry never translates a user
    /// address).
    live: [u32; 6],
    /// Only for arrays with more than SCAN_WAYS ways (large fully associative arrays),
    /// where a scan costs more than the filter.
    pages: Option<PageFilter>,
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
            tags: vec![0; entries],
            slots: vec![None; entries],
            stamps: vec![0; entries],
            clock: 0,
            occupied: vec![0; entries.div_ceil(64)],
            live: [0; 6],
            pages: (ways > SCAN_WAYS).then(|| PageFilter::new(entries)),
        }
    }

    /// An array with a machine profile's geometry.
    pub fn from_profile(a: &crate::machine::TlbArray) -> TlbArray {
        let sizes = a
            .page_sizes
            .iter()
            .map(|&s| PageSize::from_name(s))
            .collect();
        TlbArray::new(&a.name, sizes, a.entries as usize, a.ways as usize)
    }

    pub fn holds(&self, size: PageSize) -> bool {
        self.sizes.contains(&size)
    }

    fn set_range(&self, vpn: u64) -> std::ops::Range<usize> {
        let set = (vpn & self.set_mask) as usize;
        set * self.ways..(set + 1) * self.ways
    }

    /// The slots that may hold the page `want` (the page_tag of `vpn`): none, the one the
    /// filter names, or the page's set.
    #[inline]
    fn candidates(&self, vpn: u64, want: u64) -> Option<std::ops::Range<usize>> {
        let probe = match &self.pages {
            Some(f) => f.probe(want),
            None => Probe::Scan,
        };
        match probe {
            Probe::Absent => None,
            Probe::Only(slot) => Some(slot..slot + 1),
            Probe::Scan => Some(self.set_range(vpn)),
        }
    }

    /// The entry translating `va` under `pcid`, if present (updates LRU).
    pub fn lookup(&mut self, va: VirtAddr, pcid: Pcid) -> Option<TlbEntry> {
        self.find(va, pcid).map(|slot| self.hit(slot))
    }

    /// The slot `lookup` would return, without touching LRU order.
    pub fn find(&self, va: VirtAddr, pcid: Pcid) -> Option<usize> {
        for &size in &self.sizes {
            let vpn = va.page_number(size);
            if self.live[class(size, vpn)] == 0 {
                continue;
            }
            let want = page_tag(vpn, size);
            let Some(range) = self.candidates(vpn, want) else {
                continue;
            };
            let base = range.start;
            if let Some(way) = self.tags[range]
                .iter()
                .position(|&t| tag_matches(t, want, pcid))
            {
                return Some(base + way);
            }
        }
        None
    }

    /// A lookup's hit on occupied `slot` (from `find`): makes it the most recently used.
    pub fn hit(&mut self, slot: usize) -> TlbEntry {
        self.clock += 1;
        self.stamps[slot] = self.clock;
        self.slots[slot].expect("a hit is on an occupied slot")
    }

    /// Inserts `e` (its size must be one this array holds), replacing an entry with the
    /// same tag, else an invalid way, else the least recently used way.
    pub fn insert(&mut self, e: TlbEntry) {
        debug_assert!(self.holds(e.size));
        let range = self.set_range(e.vpn);
        let (want, pcid) = (page_tag(e.vpn, e.size), e.pcid.0 as u64);
        // One pass over the set finds all three candidates (a fully associative array's
        // set is every slot): the first way with the same tag, else the first invalid
        // one, else the first least recently used.
        let (mut same, mut empty, mut lru) = (None, None, (0, u64::MAX));
        let ways = self.tags[range.clone()]
            .iter()
            .zip(&self.stamps[range.clone()]);
        for (way, (&t, &stamp)) in ways.enumerate() {
            if page_of(t) == want && (t & TAG_PCID) >> TAG_PCID_SHIFT == pcid {
                same = Some(way);
                break;
            }
            if t == 0 && empty.is_none() {
                empty = Some(way);
            }
            if stamp < lru.1 {
                lru = (way, stamp);
            }
        }
        let victim = range.start + same.or(empty).unwrap_or(lru.0);
        self.clock += 1;
        let tag = tag_of(&e);
        if let Some(f) = &mut self.pages {
            f.retag(victim, self.tags[victim], tag);
        }
        if self.tags[victim] != 0 {
            self.live[class_of_tag(self.tags[victim])] -= 1;
        }
        self.live[class(e.size, e.vpn)] += 1;
        self.tags[victim] = tag;
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
        if let Some(f) = &mut self.pages {
            f.retag(slot, self.tags[slot], 0);
        }
        if self.tags[slot] != 0 {
            self.live[class_of_tag(self.tags[slot])] -= 1;
        }
        self.tags[slot] = 0;
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
            if self.live[class(size, vpn)] == 0 {
                continue;
            }
            let want = page_tag(vpn, size);
            let Some(range) = self.candidates(vpn, want) else {
                continue;
            };
            for slot in range {
                if page_of(self.tags[slot]) == want && self.slots[slot].is_some_and(|e| kill(&e)) {
                    self.clear(slot);
                    n += 1;
                }
            }
        }
        n
    }

    /// The array's state without its clock: each slot's tag and entry and, for the valid
    /// ones, their recency order in the set (the filter, `live` and `occupied` follow from
    /// the tags; an invalid slot's stamp decides nothing, as an insert takes it first).
    pub fn canon(&self, c: &mut crate::sim::Canon) {
        for set in 0..self.tags.len() / self.ways {
            let range = set * self.ways..(set + 1) * self.ways;
            c.words(self.tags[range.clone()].iter().copied());
            for e in self.slots[range.clone()].iter().flatten() {
                let f = e.flags;
                c.words([
                    e.page.0,
                    f.writable as u64
                        | (f.user as u64) << 1
                        | (f.no_exec as u64) << 2
                        | (f.global as u64) << 3,
                ]);
            }
            c.valid_ranks(&self.stamps[range.clone()], |i| {
                self.tags[range.start + i] != 0
            });
        }
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

    #[test]
    fn a_tag_tells_its_live_class() {
        for va in [
            0x7fff_f7dc_0000u64,
            0x40_0000,
            0xffff_8880_0000_0000,
            0xffff_ffff_8100_0000,
        ] {
            for size in PageSize::ALL {
                let e = TlbEntry {
                    vpn: VirtAddr(va).page_number(size),
                    size,
                    pcid: Pcid(5),
                    global: false,
                    page: PhysAddr(0),
                    flags: PteFlags::KERNEL_DATA,
                };
                assert_eq!(
                    class_of_tag(tag_of(&e)),
                    class(size, e.vpn),
                    "{va:#x} {size:?}"
                );
            }
        }
    }

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

    /// The array without its page filter: every set scanned.
    struct Unfiltered {
        sets: u64,
        ways: usize,
        slots: Vec<Option<TlbEntry>>,
        stamps: Vec<u64>,
        clock: u64,
    }

    impl Unfiltered {
        fn set(&self, vpn: u64) -> std::ops::Range<usize> {
            let s = (vpn & (self.sets - 1)) as usize;
            s * self.ways..(s + 1) * self.ways
        }
        fn lookup(&mut self, va: VirtAddr, pcid: Pcid) -> Option<TlbEntry> {
            let r = self.set(va.page_number(PageSize::Size4K));
            let slot = r.clone().find(|&s| {
                self.slots[s].is_some_and(|e| e.vpn == va.0 >> 12 && e.matches_context(pcid))
            })?;
            self.clock += 1;
            self.stamps[slot] = self.clock;
            self.slots[slot]
        }
        fn insert(&mut self, e: TlbEntry) {
            let r = self.set(e.vpn);
            let same = r
                .clone()
                .find(|&s| self.slots[s].is_some_and(|o| o.vpn == e.vpn && o.pcid == e.pcid));
            let victim = same
                .or_else(|| r.clone().find(|&s| self.slots[s].is_none()))
                .unwrap_or_else(|| r.min_by_key(|&s| self.stamps[s]).unwrap());
            self.clock += 1;
            self.slots[victim] = Some(e);
            self.stamps[victim] = self.clock;
        }
        fn kill(&mut self, kill: impl Fn(&TlbEntry) -> bool) {
            for s in &mut self.slots {
                if s.is_some_and(|e| kill(&e)) {
                    *s = None;
                }
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u16, bool),
        Lookup(u64, u16),
        Invlpg(u64, u16),
        InvalidateWhere(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        let (page, pcid) = (0u64..24, 0u16..4);
        prop_oneof![
            4 => (page.clone(), pcid.clone(), any::<bool>()).prop_map(|(p, c, g)| Op::Insert(p, c, g)),
            4 => (page.clone(), pcid.clone()).prop_map(|(p, c)| Op::Lookup(p, c)),
            1 => (page, pcid.clone()).prop_map(|(p, c)| Op::Invlpg(p, c)),
            1 => pcid.prop_map(Op::InvalidateWhere),
        ]
    }

    use proptest::prelude::*;

    /// Page `p` of the test: the first 16 in the user half, the rest in the kernel half.
    fn va_of(p: u64) -> VirtAddr {
        VirtAddr(if p < 16 {
            p << 12
        } else {
            0xffff_8880_0000_0000 + (p << 12)
        })
    }

    proptest! {
        /// The page filter and the per-size counts are invisible: every lookup, every
        /// fill's victim and every listing is what scanning every set gives, in a 4-way
        /// array and a fully associative one (filtered), over user and kernel pages.
        #[test]
        fn the_page_filter_changes_no_answer(
            ops in proptest::collection::vec(op(), 1..300),
            ways in prop_oneof![Just(4usize), Just(32usize)],
        ) {
            let mut t = TlbArray::new("t", vec![PageSize::Size4K], 32, ways);
            let sets = 32 / ways as u64;
            let mut r = Unfiltered { sets, ways, slots: vec![None; 32], stamps: vec![0; 32], clock: 0 };
            for op in ops {
                match op {
                    Op::Insert(p, c, g) => {
                        let e = entry(va_of(p).0, c, g);
                        t.insert(e);
                        r.insert(e);
                    }
                    Op::Lookup(p, c) => {
                        let va = va_of(p);
                        prop_assert_eq!(t.lookup(va, Pcid(c)), r.lookup(va, Pcid(c)));
                    }
                    Op::Invlpg(p, c) => {
                        let kill = |e: &TlbEntry| e.pcid == Pcid(c) || e.global;
                        t.invalidate_page_where(va_of(p), kill);
                        r.kill(|e| e.vpn == va_of(p).0 >> 12 && kill(e));
                    }
                    Op::InvalidateWhere(c) => {
                        t.invalidate_where(|e| e.pcid == Pcid(c));
                        r.kill(|e| e.pcid == Pcid(c));
                    }
                }
                let mut held: Vec<_> = t.entries().map(|e| (e.vpn, e.pcid, e.global)).collect();
                let mut want: Vec<_> = r.slots.iter().flatten().map(|e| (e.vpn, e.pcid, e.global)).collect();
                held.sort();
                want.sort();
                prop_assert_eq!(held, want);
            }
        }
    }
}
