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

/// One fully associative LRU cache for one level.
#[derive(Debug, Clone)]
struct Level {
    shift: u32,
    slots: Vec<Option<PscEntry>>,
    stamps: Vec<u64>,
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
        let level = |shift, n: u32| Level {
            shift,
            slots: vec![None; n as usize],
            stamps: vec![0; n as usize],
        };
        PagingStructureCache {
            levels: [level(21, pde), level(30, pdpte), level(39, pml4e)],
            clock: 0,
        }
    }

    /// The deepest cached entry for `va` under `pcid`.
    pub fn lookup(&mut self, va: VirtAddr, pcid: Pcid) -> Option<PscHit> {
        for (i, level) in self.levels.iter_mut().enumerate() {
            let prefix = va.0 >> level.shift;
            if let Some(slot) = level
                .slots
                .iter()
                .position(|s| s.is_some_and(|e| e.pcid == pcid && e.prefix == prefix))
            {
                self.clock += 1;
                level.stamps[slot] = self.clock;
                return Some(PscHit {
                    entry: level.slots[slot].unwrap(),
                    next_level: i as u8 + 1,
                });
            }
        }
        None
    }

    /// Caches a non-leaf entry read at `level` (2 = PDE, 3 = PDPTE, 4 = PML4E).
    pub fn fill(&mut self, level: u8, va: VirtAddr, entry_without_prefix: PscEntry) {
        let l = &mut self.levels[level as usize - 2];
        if l.slots.is_empty() {
            return;
        }
        let e = PscEntry {
            prefix: va.0 >> l.shift,
            ..entry_without_prefix
        };
        let slot = l
            .slots
            .iter()
            .position(|s| s.is_some_and(|o| o.pcid == e.pcid && o.prefix == e.prefix))
            .or_else(|| l.slots.iter().position(Option::is_none))
            .unwrap_or_else(|| (0..l.slots.len()).min_by_key(|&i| l.stamps[i]).unwrap());
        self.clock += 1;
        l.slots[slot] = Some(e);
        l.stamps[slot] = self.clock;
    }

    /// Drops every entry for which `kill(pcid)` is true.
    pub fn invalidate_where(&mut self, kill: impl Fn(Pcid) -> bool) {
        for l in &mut self.levels {
            for s in &mut l.slots {
                if s.is_some_and(|e| kill(e.pcid)) {
                    *s = None;
                }
            }
        }
    }

    /// Every cached entry with the virtual region it covers: (entry, first va, bytes).
    pub fn entries(&self) -> impl Iterator<Item = (PscEntry, VirtAddr, u64)> + '_ {
        self.levels.iter().flat_map(|l| {
            l.slots.iter().flatten().map(move |e| {
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
