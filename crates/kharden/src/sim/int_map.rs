//! Hash maps keyed by integers (page frame numbers, task ids): a multiply-rotate hash instead
//! of SipHash, which the simulator's hot paths (one lookup per page event) do not need; keys
//! are not attacker-chosen here.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A HashMap keyed by integers or integer newtypes.
pub type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

#[derive(Debug, Default, Clone, Copy)]
pub struct IntHasher(u64);

/// 2^64 / golden ratio, odd: multiplying by it permutes the low bits of sequential keys and
/// spreads them into the high bits the table's control bytes use.
const K: u64 = 0x9e37_79b9_7f4a_7c15;

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(K);
    }
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
    fn write_u32(&mut self, x: u32) {
        self.write_u64(x as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_keys_spread_over_buckets_and_high_bits() {
        let hash = |x: u64| {
            let mut h = IntHasher::default();
            h.write_u64(x);
            h.finish()
        };
        let low: std::collections::HashSet<u64> = (0..4096).map(|x| hash(x) & 4095).collect();
        assert_eq!(
            low.len(),
            4096,
            "low 12 bits are a permutation of 4096 sequential keys"
        );
        let top: std::collections::HashSet<u64> = (0..4096).map(|x| hash(x) >> 57).collect();
        assert_eq!(top.len(), 128, "all 7-bit control tags are used");
        let mut m: IntMap<u64, u64> = IntMap::default();
        for x in 0..1000 {
            m.insert(x * 4096, x);
        }
        assert!((0..1000).all(|x| m[&(x * 4096)] == x));
    }
}
