//! A set of CPUs as a bitmap (Linux's struct cpumask): membership, iteration over set bits
//! only, so a shootdown to 95 CPUs costs 95 steps, not 95 hash lookups.

/// Bitmap words kept in the set itself: 256 CPUs, the largest machine profile. Sets are made
/// for every walked kernel page (arch/x86/holders.rs) and every shootdown, so a set of a
/// machine this size never touches the allocator; a larger machine's words go on the heap.
const INLINE_WORDS: usize = 4;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuSet {
    /// Words in use: `inline` holds the first INLINE_WORDS of them, `spill` the rest.
    len: usize,
    inline: [u64; INLINE_WORDS],
    spill: Vec<u64>,
}

impl CpuSet {
    pub fn new(cpus: usize) -> CpuSet {
        let len = cpus.div_ceil(64);
        CpuSet {
            len,
            inline: [0; INLINE_WORDS],
            spill: vec![0; len.saturating_sub(INLINE_WORDS)],
        }
    }
    /// CPUs 0..cpus, a word at a time (Linux's bitmap_fill).
    pub fn all(cpus: usize) -> CpuSet {
        let mut s = CpuSet::new(cpus);
        for (i, w) in s.words_mut().enumerate() {
            let below = cpus - i * 64;
            *w = if below >= 64 {
                u64::MAX
            } else {
                (1 << below) - 1
            };
        }
        s
    }
    fn words(&self) -> impl Iterator<Item = &u64> {
        self.inline[..self.len.min(INLINE_WORDS)]
            .iter()
            .chain(&self.spill)
    }
    fn words_mut(&mut self) -> impl Iterator<Item = &mut u64> {
        self.inline[..self.len.min(INLINE_WORDS)]
            .iter_mut()
            .chain(&mut self.spill)
    }
    fn word(&self, i: usize) -> Option<&u64> {
        if i < INLINE_WORDS {
            self.inline[..self.len.min(INLINE_WORDS)].get(i)
        } else {
            self.spill.get(i - INLINE_WORDS)
        }
    }
    fn word_mut(&mut self, i: usize) -> &mut u64 {
        assert!(
            i < self.len,
            "CPU {} beyond the set's {} words",
            i * 64,
            self.len
        );
        if i < INLINE_WORDS {
            &mut self.inline[i]
        } else {
            &mut self.spill[i - INLINE_WORDS]
        }
    }
    pub fn insert(&mut self, cpu: usize) {
        *self.word_mut(cpu / 64) |= 1 << (cpu % 64);
    }
    pub fn remove(&mut self, cpu: usize) {
        *self.word_mut(cpu / 64) &= !(1 << (cpu % 64));
    }
    pub fn contains(&self, cpu: usize) -> bool {
        self.word(cpu / 64)
            .is_some_and(|w| w & (1 << (cpu % 64)) != 0)
    }
    /// Removes every CPU (Linux's cpumask_clear).
    pub fn clear(&mut self) {
        self.words_mut().for_each(|w| *w = 0);
    }
    /// Adds every CPU of `other` (Linux's cpumask_or).
    pub fn union_with(&mut self, other: &CpuSet) {
        for (w, o) in self.words_mut().zip(other.words()) {
            *w |= o;
        }
    }
    pub fn is_empty(&self) -> bool {
        self.words().all(|&w| w == 0)
    }
    pub fn len(&self) -> usize {
        self.words().map(|w| w.count_ones() as usize).sum()
    }
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words().enumerate().flat_map(|(i, &w)| {
            let mut bits = w;
            std::iter::from_fn(move || {
                if bits == 0 {
                    return None;
                }
                let b = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                Some(i * 64 + b)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn set_operations() {
        let mut s = CpuSet::new(130);
        for c in [0, 63, 64, 129] {
            s.insert(c);
        }
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 63, 64, 129]);
        assert_eq!(s.len(), 4);
        s.remove(63);
        assert!(!s.contains(63) && s.contains(64));
        for n in [1, 4, 63, 64, 65, 96, 128, 256, 257, 320, 700] {
            let all = CpuSet::all(n);
            assert_eq!((all.len(), all.iter().last()), (n, Some(n - 1)), "{n}");
            assert_eq!(
                all,
                (0..n).fold(CpuSet::new(n), |mut s, c| {
                    s.insert(c);
                    s
                })
            );
        }
        assert!(CpuSet::new(4).is_empty());
    }

    #[test]
    fn sets_beyond_the_inline_words_spill_to_the_heap() {
        let (mut a, mut b) = (CpuSet::new(600), CpuSet::new(600));
        a.insert(3);
        a.insert(300);
        b.insert(599);
        a.union_with(&b);
        assert_eq!(a.iter().collect::<Vec<_>>(), [3, 300, 599]);
        a.remove(300);
        assert!(a.contains(599) && !a.contains(300) && !a.contains(600));
        a.clear();
        assert!(a.is_empty());
    }
}
