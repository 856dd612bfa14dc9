//! A simulation's state written out word by word, without what cannot change its future:
//! clocks and LRU stamps become orders, memos of lookups are left out, and so are the stats
//! (outputs nobody reads back). Two states with the same words behave alike from then on, up
//! to when things happen and what gets counted (kernel/steady.rs).

use std::fmt::Debug;

/// Words a checking Canon gathers before it compares them with the earlier state's all at
/// once (a slice comparison, not a test per word).
const BLOCK: usize = 512;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Canon {
    /// The words kept, or for a checking Canon the block not yet compared.
    words: Vec<u64>,
    /// Some part could not write itself out (a defense that does not say what its state
    /// is): no two such states are taken for the same.
    opaque: bool,
    /// The length at which `words` is compared and emptied: BLOCK when checking, 0 when
    /// kept (a push never leaves it empty).
    compare_at: usize,
    /// Set by `checking`: the words are compared with an earlier state's as they come
    /// instead of kept (a large machine's state is hundreds of megabytes of words).
    against: Option<Box<Against>>,
}

/// An earlier state's words, how far the words written since have matched them, and
/// whether one differed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Against {
    earlier: Canon,
    next: usize,
    differs: bool,
}

impl Canon {
    /// A state to be written out and compared with `earlier` block by block as it is
    /// (`matches`), keeping none of its own.
    pub fn checking(earlier: Canon) -> Canon {
        Canon {
            words: Vec::with_capacity(BLOCK),
            compare_at: BLOCK,
            against: Some(Box::new(Against {
                earlier,
                next: 0,
                differs: false,
            })),
            ..Canon::default()
        }
    }

    #[inline]
    pub fn word(&mut self, w: u64) {
        self.words.push(w);
        if self.words.len() == self.compare_at {
            self.compare_block();
        }
    }

    #[inline]
    pub fn words(&mut self, ws: impl IntoIterator<Item = u64>) {
        if self.against.is_none() {
            self.words.extend(ws);
        } else {
            // for_each, not a for loop: a chained iterator runs each part as its own loop.
            ws.into_iter().for_each(|w| self.word(w));
        }
    }

    /// Compares a checking Canon's block with the earlier state's words at the same place.
    #[inline(never)]
    fn compare_block(&mut self) {
        let a = self
            .against
            .as_mut()
            .expect("only a checking Canon has blocks");
        let end = a.next + self.words.len();
        a.differs |= a.earlier.words.get(a.next..end) != Some(&self.words[..]);
        a.next = end;
        self.words.clear();
    }

    /// A value through its Debug form: every field, whatever fields it has (for small
    /// plain-data parts; anything holding a stamp or a clock must not go through here).
    pub fn debug(&mut self, v: &impl Debug) {
        let text = format!("{v:?}");
        self.word(text.len() as u64);
        for chunk in text.as_bytes().chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.word(u64::from_le_bytes(w));
        }
    }

    /// The entries of a hash map in key order (its iteration order depends on its history).
    pub fn sorted_map<K: Ord + Debug, V: Debug>(&mut self, entries: impl Iterator<Item = (K, V)>) {
        let mut all: Vec<(K, V)> = entries.collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        self.word(all.len() as u64);
        for e in &all {
            self.debug(e);
        }
    }

    /// The recency rank of each of `stamps` (0: most recent), an order that a clock's
    /// absolute values do not change.
    pub fn ranks(&mut self, stamps: &[u64]) {
        for &s in stamps {
            self.word(stamps.iter().filter(|&&o| o > s).count() as u64);
        }
    }

    /// `ranks` of the slots `valid` names; an invalid slot's stamp decides nothing (an
    /// insert takes an empty slot first), so it counts as 0.
    pub fn valid_ranks(&mut self, stamps: &[u64], valid: impl Fn(usize) -> bool) {
        // A set's worth of stamps fits on the stack; a fully associative array's may not.
        let (mut small, mut large) = ([0u64; 32], Vec::new());
        let masked: &mut [u64] = match small.get_mut(..stamps.len()) {
            Some(m) => m,
            None => {
                large.resize(stamps.len(), 0);
                &mut large
            }
        };
        for (i, (m, &s)) in masked.iter_mut().zip(stamps).enumerate() {
            *m = if valid(i) { s } else { 0 };
        }
        if masked.iter().all(|&m| m == 0) {
            // Nothing valid (a TLB set never filled): every rank is 0.
            self.words(std::iter::repeat_n(0, masked.len()));
        } else {
            self.ranks(masked);
        }
    }

    pub fn opaque(&mut self) {
        self.opaque = true;
    }

    /// Gives back the room a kept state's words grew into beyond them.
    pub fn shrink_to_fit(&mut self) {
        self.words.shrink_to_fit();
    }

    /// Whether two states are known to be alike.
    pub fn same(&self, other: &Canon) -> bool {
        !self.opaque && !other.opaque && self.words == other.words
    }

    /// For a state written out `checking` an earlier one: whether the two are known to be
    /// alike (as `same` says of two kept states).
    pub fn matches(mut self) -> bool {
        if self.against.is_none() {
            return false;
        }
        if !self.words.is_empty() {
            self.compare_block();
        }
        self.against.as_ref().is_some_and(|a| {
            !self.opaque && !a.earlier.opaque && !a.differs && a.next == a.earlier.words.len()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_see_order_not_clock_values() {
        let (mut a, mut b) = (Canon::default(), Canon::default());
        a.ranks(&[5, 9, 7]);
        b.ranks(&[105, 900, 300]);
        assert!(a.same(&b));
        let mut c = Canon::default();
        c.ranks(&[9, 5, 7]);
        assert!(!a.same(&c));
    }

    #[test]
    fn checking_an_earlier_state_matches_as_same_does() {
        let write = |c: &mut Canon, ws: &[u64]| {
            c.word(ws.len() as u64);
            c.words(ws.iter().copied());
            c.debug(&("a", 3));
        };
        let mut earlier = Canon::default();
        write(&mut earlier, &[1, 2, 3]);
        for (ws, alike) in [
            (&[1, 2, 3][..], true),
            (&[1, 2, 4][..], false),
            (&[1, 2][..], false),
            (&[1, 2, 3, 0][..], false),
        ] {
            let mut now = Canon::default();
            write(&mut now, ws);
            let mut checking = Canon::checking(earlier.clone());
            write(&mut checking, ws);
            assert_eq!(now.same(&earlier), alike, "{ws:?}");
            assert_eq!(checking.matches(), alike, "{ws:?}");
        }
        // A state one word shorter that ends where the earlier one continues.
        let mut checking = Canon::checking(earlier.clone());
        checking.word(3);
        assert!(!checking.matches());
        let mut opaque = Canon::checking(earlier);
        write(&mut opaque, &[1, 2, 3]);
        opaque.opaque();
        assert!(!opaque.matches());
        assert!(!Canon::default().matches(), "nothing to check against");
    }

    #[test]
    fn valid_ranks_rank_the_valid_stamps_and_zero_the_rest() {
        for n in [0, 1, 4, 32, 33, 70] {
            let stamps: Vec<u64> = (0..n as u64).map(|i| (i * 37) % 11 + 1).collect();
            for valid in [|_: usize| false, |i: usize| i % 3 != 0, |_: usize| true] {
                let masked: Vec<u64> = (0..n)
                    .map(|i| if valid(i) { stamps[i] } else { 0 })
                    .collect();
                let (mut want, mut got) = (Canon::default(), Canon::default());
                want.ranks(&masked);
                got.valid_ranks(&stamps, valid);
                assert!(got.same(&want), "{n} stamps");
            }
        }
    }

    #[test]
    fn checking_compares_across_blocks() {
        let long: Vec<u64> = (0..3 * BLOCK as u64 + 7).collect();
        let mut earlier = Canon::default();
        earlier.words(long.iter().copied());
        let check = |ws: &[u64]| {
            let mut c = Canon::checking(earlier.clone());
            for &w in ws {
                c.word(w);
            }
            c.matches()
        };
        assert!(check(&long));
        for at in [0, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK, long.len() - 1] {
            let mut changed = long.clone();
            changed[at] += 1;
            assert!(!check(&changed), "a word differing at {at}");
        }
        for len in [
            BLOCK,
            2 * BLOCK,
            long.len() - 1,
            long.len() + 1,
            long.len() + BLOCK,
        ] {
            let other: Vec<u64> = (0..len as u64).collect();
            assert!(!check(&other), "{len} words against {}", long.len());
        }
    }

    #[test]
    fn an_opaque_state_is_like_no_other() {
        let mut a = Canon::default();
        a.opaque();
        assert!(!a.same(&a.clone()));
    }
}
