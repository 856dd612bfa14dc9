//! An L1 cache: set-associative with LRU by per-slot stamps. Lines stay in the slot they
//! were filled into, so a run of known hits can be replayed by slot (kernel/l1_replay.rs),
//! and the fill count says when any slot changed.
//!
//! A set's tags and stamps sit next to each other, four bytes each, so an 8-way set is one
//! host cache line's worth: with a hundred simulated cores the L1s do not fit the host's
//! caches, and a lookup costs what the host's misses on its set cost.

#[derive(Debug, Clone)]
pub(super) struct SlotCache {
    ways: usize,
    set_mask: u64,
    set_bits: u32,
    /// Per set: `ways` tags (the line's bits above the set index, EMPTY when invalid), then
    /// `ways` stamps (0 when invalid; a valid slot's stamp is its last use, from 1 up). A
    /// slot is named by its tag's index here; its stamp is `ways` further on.
    words: Vec<u32>,
    clock: u32,
    /// Lines filled so far: while it stands still, nothing was evicted.
    fills: u64,
}

const EMPTY: u32 = u32::MAX;

impl SlotCache {
    pub(super) fn new(sets: usize, ways: usize) -> SlotCache {
        assert!(sets.is_power_of_two(), "L1 sets are indexed by address bits");
        SlotCache {
            ways,
            set_mask: sets as u64 - 1,
            set_bits: sets.trailing_zeros(),
            words: (0..sets)
                .flat_map(|_| (0..ways).map(|_| EMPTY).chain((0..ways).map(|_| 0)))
                .collect(),
            clock: 0,
            fills: 0,
        }
    }

    /// The set of `line` and its tag there.
    fn place(&self, line: u64) -> (usize, u32) {
        let tag = u32::try_from(line >> self.set_bits)
            .ok()
            .filter(|&t| t != EMPTY)
            .expect("physical addresses fit the cache tags");
        ((line & self.set_mask) as usize, tag)
    }

    /// The next stamp. When the clock would overflow, every set's valid stamps are
    /// renumbered 1, 2, ... in the same order: LRU decisions only compare stamps of a set.
    #[inline]
    fn tick(&mut self) -> u32 {
        if self.clock == u32::MAX {
            self.renumber();
        }
        self.clock += 1;
        self.clock
    }

    #[cold]
    #[inline(never)]
    fn renumber(&mut self) {
        let ways = self.ways;
        let mut order: Vec<usize> = Vec::with_capacity(ways);
        for set in self.words.chunks_exact_mut(2 * ways) {
            let (tags, stamps) = set.split_at_mut(ways);
            order.clear();
            order.extend((0..ways).filter(|&w| tags[w] != EMPTY));
            order.sort_by_key(|&w| stamps[w]);
            for (rank, &w) in order.iter().enumerate() {
                stamps[w] = rank as u32 + 1;
            }
        }
        self.clock = ways as u32;
    }

    /// Whether `line` hit, and the slot it is in now (on a miss it was filled there, over
    /// the least recently used way).
    pub(super) fn access(&mut self, line: u64) -> (bool, usize) {
        let (set, tag) = self.place(line);
        let now = self.tick();
        let ways = self.ways;
        let base = set * 2 * ways;
        let (tags, stamps) = self.words[base..base + 2 * ways].split_at_mut(ways);
        // One pass finds the line or, failing that, the least recently used way.
        let (mut victim, mut oldest) = (0, u32::MAX);
        for w in 0..ways {
            if tags[w] == tag {
                stamps[w] = now;
                return (true, base + w);
            }
            if stamps[w] < oldest {
                (victim, oldest) = (w, stamps[w]);
            }
        }
        self.fills += 1;
        tags[victim] = tag;
        stamps[victim] = now;
        (false, base + victim)
    }

    /// What `lines` other lines passing through evict: with at least as many lines as
    /// slots, everything; otherwise the least recently used lines, `lines` of them spread
    /// over the sets in turn. A displaced slot is left empty (the lines that took it are
    /// nobody's the simulation follows) and counted as a fill.
    pub(super) fn displace(&mut self, lines: usize) {
        let ways = self.ways;
        let sets = self.words.len() / (2 * ways);
        if lines >= sets * ways {
            self.clear();
            return;
        }
        for (i, set) in self.words.chunks_exact_mut(2 * ways).enumerate() {
            // This set's share: lines * (i + 1) / sets - lines * i / sets.
            let n = lines * (i + 1) / sets - lines * i / sets;
            let (tags, stamps) = set.split_at_mut(ways);
            for _ in 0..n {
                let Some(oldest) = (0..ways)
                    .filter(|&w| tags[w] != EMPTY)
                    .min_by_key(|&w| stamps[w])
                else {
                    break;
                };
                tags[oldest] = EMPTY;
                stamps[oldest] = 0;
            }
        }
        if lines > 0 {
            self.fills += 1;
        }
    }

    /// Accesses to lines known to be in `slots`, in order: what access() does on those hits.
    pub(super) fn hits(&mut self, slots: impl ExactSizeIterator<Item = usize>) {
        if ((u32::MAX - self.clock) as usize) < slots.len() {
            self.renumber();
        }
        // The clock stays in a register: the stores to stamps cannot move it.
        let (ways, mut clock) = (self.ways, self.clock);
        for slot in slots {
            clock += 1;
            self.words[slot + ways] = clock;
        }
        self.clock = clock;
    }

    /// Whether `slot` holds `line`.
    pub(super) fn holds(&self, slot: usize, line: u64) -> bool {
        let set = (line & self.set_mask) as usize;
        slot.wrapping_sub(set * 2 * self.ways) < self.ways
            && self.words[slot] as u64 == line >> self.set_bits
    }

    /// Each set's lines from the most to the least recently used, without the clock, the
    /// fill count or the slots they sit in: no lookup's outcome depends on the slot (ways
    /// with equal stamps are empty ones), only the replay memo does, which checks its slots.
    pub(super) fn canon(&self, c: &mut crate::sim::Canon) {
        let ways = self.ways;
        let mut order: Vec<usize> = Vec::with_capacity(ways);
        for (set, words) in self.words.chunks_exact(2 * ways).enumerate() {
            let (tags, stamps) = words.split_at(ways);
            let line = |w: usize| match tags[w] {
                EMPTY => u64::MAX,
                t => (t as u64) << self.set_bits | set as u64,
            };
            order.clear();
            order.extend(0..ways);
            order.sort_by_key(|&w| (std::cmp::Reverse(stamps[w]), line(w)));
            c.words(order.iter().map(|&w| line(w)));
        }
    }

    /// Lines filled so far: while it stands still, every line is where it was.
    pub(super) fn fills(&self) -> u64 {
        self.fills
    }

    /// Empties every way; counted as a fill, so nothing that watches the fill count takes
    /// a line for present.
    pub(super) fn clear(&mut self) {
        let ways = self.ways;
        for set in self.words.chunks_exact_mut(2 * ways) {
            let (tags, stamps) = set.split_at_mut(ways);
            tags.fill(EMPTY);
            stamps.fill(0);
        }
        self.fills += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displacement_evicts_the_least_recently_used_lines_of_every_set() {
        // 2 sets x 4 ways; lines 0..8 fill both sets, 0 and 1 (set 0, 1) oldest.
        let mut c = SlotCache::new(2, 4);
        for line in 0..8 {
            c.access(line);
        }
        c.access(0); // line 0 is now the newest of set 0
        let fills = c.fills();
        c.displace(2); // one per set: line 2 (set 0's oldest now) and line 1
        assert!(c.fills() > fills);
        assert!(c.access(0).0 && c.access(3).0 && c.access(5).0);
        assert!(!c.access(2).0 && !c.access(1).0);
        c.displace(8); // as many lines as slots: everything
        assert!((0..8).all(|l| !c.access(l).0));
    }

    #[test]
    fn replayed_hits_leave_the_state_lookups_leave() {
        let lines = [3u64, 7, 11, 3, 19, 23, 27, 15];
        let mut looked_up = SlotCache::new(4, 2);
        let slots: Vec<usize> = lines.iter().map(|&l| looked_up.access(l).1).collect();
        let mut replayed = looked_up.clone();
        // The lines still in place are hit again, by lookup in one copy and by slot in the
        // other; then both take the same miss, whose victim depends on the LRU order.
        let resident: Vec<(u64, usize)> = lines
            .iter()
            .zip(&slots)
            .filter(|&(&l, &s)| looked_up.holds(s, l))
            .map(|(&l, &s)| (l, s))
            .collect();
        for &(l, _) in &resident {
            assert!(looked_up.access(l).0);
        }
        replayed.hits(resident.iter().map(|&(_, s)| s));
        assert_eq!(looked_up.access(31), replayed.access(31));
        assert_eq!(
            (&looked_up.words, looked_up.clock, looked_up.fills),
            (&replayed.words, replayed.clock, replayed.fills)
        );
    }

    #[test]
    fn a_clock_that_wraps_renumbers_and_decides_as_before() {
        // The same accesses from a fresh clock and from one about to overflow: the same
        // hits, slots and final order.
        let mut fresh = SlotCache::new(4, 4);
        let mut wrapping = SlotCache::new(4, 4);
        wrapping.clock = u32::MAX - 8;
        let mut x = 12345u64;
        for i in 0..200 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let line = (x >> 33) % 40;
            let (hit, slot) = fresh.access(line);
            assert_eq!((hit, slot), wrapping.access(line));
            if i % 7 == 0 {
                // A replayed run of hits crosses the wrap too.
                fresh.hits([slot, slot].into_iter());
                wrapping.hits([slot, slot].into_iter());
            }
        }
        assert!(wrapping.clock < 1000, "renumbered");
        let (mut a, mut b) = (crate::sim::Canon::default(), crate::sim::Canon::default());
        fresh.canon(&mut a);
        wrapping.canon(&mut b);
        assert_eq!(a, b);
    }

    #[test]
    fn a_slot_holds_only_lines_of_its_own_set() {
        let mut c = SlotCache::new(4, 2);
        let (_, slot) = c.access(5); // set 1, tag 1
        assert!(c.holds(slot, 5));
        assert!(!c.holds(slot, 4), "same tag, set 0");
        assert!(!c.holds(slot, 9), "set 1, another tag");
    }
}
