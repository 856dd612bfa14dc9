//! An L2 or last-level cache: set-associative with LRU, each set's tags kept in recency
//! order (most recent first), four bytes a line. These caches are megabytes of host memory
//! per simulated core or socket, so what a lookup costs the simulator is the host's cache
//! misses on them: one host line per set here, against two or four with a tag and a stamp
//! per way. Hits and misses are those of any exact LRU.

#[derive(Debug, Clone)]
pub(super) struct RecencyCache {
    ways: usize,
    sets: u64,
    /// sets - 1 and log2(sets) when the set count is a power of two (an index by mask);
    /// otherwise (a 33 MiB 11-way LLC has 49152 sets) the index is the line modulo the
    /// set count, as a sliced LLC's hash spreads lines evenly over every set.
    set_mask: Option<(u64, u32)>,
    /// Per set, `ways` tags (the line's bits above the set index), most recent first;
    /// EMPTY ways are always last.
    tags: Vec<u32>,
}

const EMPTY: u32 = u32::MAX;

impl RecencyCache {
    pub(super) fn new(sets: usize, ways: usize) -> RecencyCache {
        RecencyCache {
            ways,
            sets: sets as u64,
            set_mask: sets
                .is_power_of_two()
                .then(|| (sets as u64 - 1, sets.trailing_zeros())),
            tags: vec![EMPTY; sets * ways],
        }
    }

    /// Whether `line` hit; on a miss it is filled over the least recently used way.
    pub(super) fn access(&mut self, line: u64) -> bool {
        let (set, tag) = match self.set_mask {
            Some((mask, bits)) => (line & mask, line >> bits),
            None => (line % self.sets, line / self.sets),
        };
        let start = set as usize * self.ways;
        let tag = u32::try_from(tag)
            .ok()
            .filter(|&t| t != EMPTY)
            .expect("physical addresses fit the cache tags");
        let set = &mut self.tags[start..start + self.ways];
        let hit = set.iter().position(|&t| t == tag);
        // Move the line to the front; on a miss the last (least recent) way drops out.
        let end = hit.unwrap_or(set.len() - 1);
        set[..=end].rotate_right(1);
        set[0] = tag;
        hit.is_some()
    }

    /// Tags in recency order are the whole state; two to a word (a 256 MiB LLC is 4 M
    /// tags, and a probe keeps its state's words: kernel/steady.rs).
    pub(super) fn canon(&self, c: &mut crate::sim::Canon) {
        let pairs = self.tags.chunks_exact(2);
        let odd = pairs.remainder().first().map(|&t| t as u64);
        c.words(pairs.map(|p| p[0] as u64 | (p[1] as u64) << 32).chain(odd));
    }

    pub(super) fn clear(&mut self) {
        self.tags.fill(EMPTY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_least_recently_used_line_of_a_set() {
        let mut c = RecencyCache::new(4, 2);
        // Lines 1, 5 and 9 share set 1.
        assert!(!c.access(1));
        assert!(!c.access(5));
        assert!(c.access(1));
        assert!(!c.access(9)); // evicts 5, the least recent
        assert!(c.access(1));
        assert!(!c.access(5));
        assert!(!c.access(9)); // 1 was least recent after 5's fill
        assert!(c.access(5));
        c.clear();
        assert!(!c.access(5));
    }

    #[test]
    fn a_set_count_that_is_no_power_of_two_holds_exactly_its_capacity() {
        // 3 sets of 2 ways: six lines fit, a seventh evicts the least recent of its set.
        let mut c = RecencyCache::new(3, 2);
        for line in 0..6 {
            assert!(!c.access(line));
        }
        assert!((0..6).all(|line| c.access(line)), "all six are held");
        assert!(!c.access(6)); // set 0: evicts line 0 (3 was used later)
        assert!(!c.access(0));
        assert!(c.access(6) && c.access(4) && c.access(5));
    }
}
