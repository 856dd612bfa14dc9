//! An L1 cache: set-associative with LRU by per-slot stamps. Lines stay in the slot they
//! were filled into, so a run of known hits can be replayed by slot (kernel/paths/l1_replay.rs),
//! and the fill count says when any slot changed.

#[derive(Debug, Clone)]
pub(super) struct SlotCache {
    ways: usize,
    set_mask: u64,
    tags: Vec<u64>,
    stamps: Vec<u64>,
    clock: u64,
    /// Lines filled so far: while it stands still, nothing was evicted.
    fills: u64,
}

impl SlotCache {
    pub(super) fn new(sets: usize, ways: usize) -> SlotCache {
        let n = sets * ways;
        SlotCache {
            ways,
            set_mask: sets as u64 - 1,
            tags: vec![u64::MAX; n],
            stamps: vec![0; n],
            clock: 0,
            fills: 0,
        }
    }

    /// Whether `line` hit, and the slot it is in now (on a miss it was filled there, over
    /// the least recently used way).
    pub(super) fn access(&mut self, line: u64) -> (bool, usize) {
        let start = (line & self.set_mask) as usize * self.ways;
        self.clock += 1;
        // One pass finds the line or, failing that, the least recently used way.
        let (mut victim, mut oldest) = (start, u64::MAX);
        for i in start..start + self.ways {
            if self.tags[i] == line {
                self.stamps[i] = self.clock;
                return (true, i);
            }
            if self.stamps[i] < oldest {
                (victim, oldest) = (i, self.stamps[i]);
            }
        }
        self.fills += 1;
        self.tags[victim] = line;
        self.stamps[victim] = self.clock;
        (false, victim)
    }

    /// What `lines` other lines passing through evict: with at least as many lines as
    /// slots, everything; otherwise the least recently used lines, `lines` of them spread
    /// over the sets in turn. A displaced slot is left empty (the lines that took it are
    /// nobody's the simulation follows) and counted as a fill.
    pub(super) fn displace(&mut self, lines: usize) {
        let sets = self.tags.len() / self.ways;
        if lines >= self.tags.len() {
            self.clear();
            return;
        }
        for set in 0..sets {
            // This set's share: lines * (set + 1) / sets - lines * set / sets.
            let n = lines * (set + 1) / sets - lines * set / sets;
            let start = set * self.ways;
            for _ in 0..n {
                let Some(oldest) = (start..start + self.ways)
                    .filter(|&i| self.tags[i] != u64::MAX)
                    .min_by_key(|&i| self.stamps[i])
                else {
                    break;
                };
                self.tags[oldest] = u64::MAX;
                self.stamps[oldest] = 0;
            }
        }
        if lines > 0 {
            self.fills += 1;
        }
    }

    /// Accesses to lines known to be in `slots`, in order: what access() does on those hits.
    pub(super) fn hits(&mut self, slots: impl Iterator<Item = usize>) {
        // The clock stays in a register: the stores to stamps cannot move it.
        let mut clock = self.clock;
        for slot in slots {
            clock += 1;
            self.stamps[slot] = clock;
        }
        self.clock = clock;
    }

    /// Whether `slot` holds `line`.
    pub(super) fn holds(&self, slot: usize, line: u64) -> bool {
        self.tags[slot] == line
    }

    /// Each set's lines from the most to the least recently used, without the clock, the
    /// fill count or the slots they sit in: no lookup's outcome depends on the slot (ways
    /// with equal stamps are empty ones), only the replay memo does, which checks its slots.
    pub(super) fn canon(&self, c: &mut crate::sim::Canon) {
        let mut order: Vec<(std::cmp::Reverse<u64>, u64)> = Vec::with_capacity(self.ways);
        let sets = self
            .tags
            .chunks_exact(self.ways)
            .zip(self.stamps.chunks_exact(self.ways));
        for (tags, stamps) in sets {
            // An empty set (every stamp 0, every tag empty) is in order as it is.
            if stamps.iter().all(|&s| s == 0) && tags.iter().all(|&t| t == tags[0]) {
                c.words(tags.iter().copied());
                continue;
            }
            order.clear();
            order.extend(
                stamps
                    .iter()
                    .zip(tags)
                    .map(|(&s, &t)| (std::cmp::Reverse(s), t)),
            );
            // Unstable is enough: two ways with the same key write the same tag.
            order.sort_unstable();
            c.words(order.iter().map(|&(_, t)| t));
        }
    }

    /// Lines filled so far: while it stands still, every line is where it was.
    pub(super) fn fills(&self) -> u64 {
        self.fills
    }

    /// Empties every way; counted as a fill, so nothing that watches the fill count takes
    /// a line for present.
    pub(super) fn clear(&mut self) {
        self.tags.fill(u64::MAX);
        self.stamps.fill(0);
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
            (
                &looked_up.tags,
                &looked_up.stamps,
                looked_up.clock,
                looked_up.fills
            ),
            (
                &replayed.tags,
                &replayed.stamps,
                replayed.clock,
                replayed.fills
            )
        );
    }
}
