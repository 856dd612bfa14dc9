//! Paging-structure caches (Intel SDM vol. 3A 4.10.3): PML4E, PDPTE and PDE caches that let
//! a walk start below the root. Tagged by PCID; the G bit does not apply to them.

use super::{Pcid, Pfn, VirtAddr};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PscEntry {
    pub pcid: Pcid,
    /// `va >> shift` of the region the cached entry covers.
    pub prefix: u64,
    /// The next-level table the cached entry points to.
    pub table: Pfn,
    /// Permissions accumulated down to this entry (RW, US ANDed; NX ORed).
    pub writable: bool,
    pub user: bool,
    pub no_exec: bool,
}

/// One fully associative LRU cache for one level. A slot's PCID and prefix are packed in one
/// key word (0 when the slot is empty), so a lookup is one compare per slot over contiguous
/// memory, and `live` lets a lookup skip a level a flush emptied.
#[derive(Debug, Clone)]
struct Level {
    shift: u32,
    keys: Vec<u64>,
    slots: Vec<PscEntry>,
    stamps: Vec<u64>,
    live: usize,
}

const KEY_VALID: u64 = 1 << 63;
/// Prefixes are at most 43 bits (`va >> 21`); the tag (16 bits: a PCID, or an EPTP's tag)
/// sits above them.
const KEY_TAG_SHIFT: u32 = 44;

/// The key of the entry for `prefix` under `pcid`.
fn key(pcid: Pcid, prefix: u64) -> u64 {
    KEY_VALID | (pcid.0 as u64) << KEY_TAG_SHIFT | (prefix & ((1 << KEY_TAG_SHIFT) - 1))
}

impl Level {
    fn new(shift: u32, n: u32) -> Level {
        let n = n as usize;
        let empty = PscEntry {
            pcid: Pcid(0),
            prefix: 0,
            table: Pfn(0),
            writable: false,
            user: false,
            no_exec: false,
        };
        Level {
            shift,
            keys: vec![0; n],
            slots: vec![empty; n],
            stamps: vec![0; n],
            live: 0,
        }
    }

    fn clear(&mut self, slot: usize) {
        self.keys[slot] = 0;
        self.live -= 1;
    }
}

#[derive(Debug, Clone)]
pub struct PagingStructureCache {
    /// Index 0: PDE cache (shift 21, one read left), 1: PDPTE (shift 30), 2: PML4E (shift 39).
    levels: [Level; 3],
    clock: u64,
}

/// The result of a PSC lookup: the table to continue the walk from and its level.
#[derive(Debug, Clone, Copy)]
pub struct PscHit {
    pub entry: PscEntry,
    /// Level of `entry.table` (1 = page table).
    pub next_level: u8,
}

impl PagingStructureCache {
    pub fn new(pml4e: u32, pdpte: u32, pde: u32) -> Self {
        PagingStructureCache {
            levels: [
                Level::new(21, pde),
                Level::new(30, pdpte),
                Level::new(39, pml4e),
            ],
            clock: 0,
        }
    }

    /// The deepest cached entry for `va` under `pcid`.
    pub fn lookup(&mut self, va: VirtAddr, pcid: Pcid) -> Option<PscHit> {
        for (i, level) in self.levels.iter_mut().enumerate() {
            if level.live == 0 {
                continue;
            }
            let want = key(pcid, va.0 >> level.shift);
            if let Some(slot) = level.keys.iter().position(|&k| k == want) {
                self.clock += 1;
                level.stamps[slot] = self.clock;
                return Some(PscHit {
                    entry: level.slots[slot],
                    next_level: i as u8 + 1,
                });
            }
        }
        None
    }

    /// Caches a non-leaf entry read at `level` (2 = PDE, 3 = PDPTE, 4 = PML4E): over the
    /// slot holding the same prefix and PCID, else the first empty slot, else the least
    /// recently used one.
    pub fn fill(&mut self, level: u8, va: VirtAddr, entry_without_prefix: PscEntry) {
        let l = &mut self.levels[level as usize - 2];
        if l.keys.is_empty() {
            return;
        }
        let e = PscEntry {
            prefix: va.0 >> l.shift,
            ..entry_without_prefix
        };
        let want = key(e.pcid, e.prefix);
        let slot = match l.keys.iter().position(|&k| k == want) {
            Some(same) => same,
            None => {
                let slot = l
                    .keys
                    .iter()
                    .position(|&k| k == 0)
                    .unwrap_or_else(|| (0..l.keys.len()).min_by_key(|&i| l.stamps[i]).unwrap());
                if l.keys[slot] == 0 {
                    l.live += 1;
                }
                slot
            }
        };
        self.clock += 1;
        l.keys[slot] = want;
        l.slots[slot] = e;
        l.stamps[slot] = self.clock;
    }

    /// Drops every entry for which `kill(pcid)` is true.
    pub fn invalidate_where(&mut self, kill: impl Fn(Pcid) -> bool) {
        for l in &mut self.levels {
            if l.live == 0 {
                continue;
            }
            for slot in 0..l.keys.len() {
                if l.keys[slot] != 0 && kill(l.slots[slot].pcid) {
                    l.clear(slot);
                }
            }
        }
    }

    /// Drops everything (a flush of every PCID).
    pub fn invalidate_all(&mut self) {
        for l in &mut self.levels {
            if l.live != 0 {
                l.keys.fill(0);
                l.live = 0;
            }
        }
    }

    /// The caches' state without their clock: each slot's key and entry, and the recency
    /// order of the valid ones per level.
    pub fn canon(&self, c: &mut crate::sim::Canon) {
        for l in &self.levels {
            c.words(l.keys.iter().copied());
            for (k, e) in l.keys.iter().zip(&l.slots).filter(|(&k, _)| k != 0) {
                c.words([
                    *k,
                    e.table.0,
                    e.writable as u64 | (e.user as u64) << 1 | (e.no_exec as u64) << 2,
                ]);
            }
            c.valid_ranks(&l.stamps, |i| l.keys[i] != 0);
        }
    }

    /// Every cached entry with the virtual region it covers: (entry, first va, bytes).
    pub fn entries(&self) -> impl Iterator<Item = (PscEntry, VirtAddr, u64)> + '_ {
        self.levels.iter().flat_map(|l| {
            let live = l.keys.iter().zip(&l.slots).filter(|(&k, _)| k != 0);
            live.map(move |(_, e)| {
                let raw = e.prefix << l.shift;
                let va = if raw & (1 << 47) != 0 {
                    raw | 0xffff_0000_0000_0000
                } else {
                    raw
                };
                (*e, VirtAddr(va), 1u64 << l.shift)
            })
        })
    }
}
