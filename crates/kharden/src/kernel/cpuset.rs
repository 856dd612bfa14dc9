//! A set of CPUs as a bitmap (Linux's struct cpumask): membership, iteration over set bits
//! only, so a shootdown to 95 CPUs costs 95 steps, not 95 hash lookups.

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuSet {
    words: Vec<u64>,
}

impl CpuSet {
    pub fn new(cpus: usize) -> CpuSet {
        CpuSet {
            words: vec![0; cpus.div_ceil(64)],
        }
    }
    /// CPUs 0..cpus, a word at a time (Linux's bitmap_fill).
    pub fn all(cpus: usize) -> CpuSet {
        let mut words = vec![u64::MAX; cpus / 64];
        if cpus % 64 != 0 {
            words.push((1 << (cpus % 64)) - 1);
        }
        CpuSet { words }
    }
    pub fn insert(&mut self, cpu: usize) {
        self.words[cpu / 64] |= 1 << (cpu % 64);
    }
    pub fn remove(&mut self, cpu: usize) {
        self.words[cpu / 64] &= !(1 << (cpu % 64));
    }
    pub fn contains(&self, cpu: usize) -> bool {
        self.words
            .get(cpu / 64)
            .is_some_and(|w| w & (1 << (cpu % 64)) != 0)
    }
    /// Removes every CPU (Linux's cpumask_clear).
    pub fn clear(&mut self) {
        self.words.fill(0);
    }
    /// Adds every CPU of `other` (Linux's cpumask_or).
    pub fn union_with(&mut self, other: &CpuSet) {
        for (w, o) in self.words.iter_mut().zip(&other.words) {
            *w |= o;
        }
    }
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
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
        for n in [1, 4, 63, 64, 65, 96, 128, 256] {
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
}
