//! The cache hierarchy: per-core L1I, L1D and L2, per-socket LLC, set-associative with LRU,
//! inclusive fill. Page walkers load paging entries through the data side (Intel's
//! PAGE_WALKER_LOADS events count hits per level), kernel paths fetch their text lines through
//! the instruction side and touch their data lines through the data side, so each costs what
//! the levels its lines sit in cost.

use crate::machine::MachineProfile;
use recency_cache::RecencyCache;
use slot_cache::SlotCache;

mod recency_cache;
mod slot_cache;

/// Sets of a cache of `kib` KiB with `ways` ways: its capacity exactly (L2 and LLC index any
/// set count; see RecencyCache).
fn sets(kib: u32, ways: u32) -> usize {
    let lines = (kib as usize * 1024 / 64).max(ways as usize);
    lines / ways as usize
}

/// Sets of an L1, indexed by address bits: a power of two on every real part (rounded up
/// for a profile that gives another size).
fn l1_sets(kib: u32, ways: u32) -> usize {
    sets(kib, ways).next_power_of_two()
}

/// The two L1 caches of a core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L1Side {
    Instruction,
    Data,
}

/// Where a load was served from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HitLevel {
    L1,
    L2,
    Llc,
    LocalDram,
    RemoteDram,
}

impl HitLevel {
    pub fn is_dram(self) -> bool {
        matches!(self, HitLevel::LocalDram | HitLevel::RemoteDram)
    }
}

pub struct CacheHierarchy {
    l1: Vec<SlotCache>,
    l1i: Vec<SlotCache>,
    l2: Vec<RecencyCache>,
    llc: Vec<RecencyCache>,
    /// Latency per level, in core cycles.
    pub l1_cycles: f64,
    pub l2_cycles: f64,
    pub llc_cycles: f64,
    pub local_dram_cycles: f64,
    pub remote_dram_cycles: f64,
    /// Lines a core's store stream keeps in flight to DRAM (the profile's lines_in_flight).
    pub lines_in_flight: f64,
    /// What a kernel path's LLC hits and DRAM accesses overlap (the profile's
    /// llc_miss_overlap, dram_miss_overlap).
    pub llc_overlap: f64,
    pub dram_overlap: f64,
}

impl CacheHierarchy {
    pub fn new(m: &MachineProfile) -> CacheHierarchy {
        let cores = (m.topology.sockets * m.topology.cores_per_socket) as usize;
        let mem = &m.memory;
        CacheHierarchy {
            l1: vec![
                SlotCache::new(l1_sets(mem.l1d_kib, mem.l1d_ways), mem.l1d_ways as usize);
                cores
            ],
            l1i: vec![
                SlotCache::new(l1_sets(mem.l1i_kib, mem.l1i_ways), mem.l1i_ways as usize);
                cores
            ],
            l2: vec![RecencyCache::new(sets(mem.l2_kib, mem.l2_ways), mem.l2_ways as usize); cores],
            llc: vec![
                RecencyCache::new(
                    sets(mem.llc_kib_per_socket, mem.llc_ways),
                    mem.llc_ways as usize
                );
                m.topology.sockets as usize
            ],
            l1_cycles: mem.l1d_hit_cycles as f64,
            l2_cycles: mem.l2_hit_cycles as f64,
            llc_cycles: mem.llc_hit_cycles as f64,
            local_dram_cycles: mem.dram_local_ns * m.cpu.frequency_ghz,
            remote_dram_cycles: mem.dram_remote_ns * m.cpu.frequency_ghz,
            lines_in_flight: mem.lines_in_flight as f64,
            llc_overlap: mem.llc_miss_overlap,
            dram_overlap: mem.dram_miss_overlap,
        }
    }

    /// Loads the line holding physical byte address `pa` for `core` on `socket`; `remote`
    /// says whether the line's home node is another node than the core's.
    pub fn load(&mut self, core: usize, socket: usize, pa: u64, remote: bool) -> HitLevel {
        self.access(L1Side::Data, core, socket, pa, remote).0
    }

    /// Fetches the instruction line holding `pa`: L1I, then the levels a load goes to.
    pub fn fetch(&mut self, core: usize, socket: usize, pa: u64, remote: bool) -> HitLevel {
        self.access(L1Side::Instruction, core, socket, pa, remote).0
    }

    /// A load or fetch, with the L1 slot the line is in afterwards.
    pub fn access(
        &mut self,
        side: L1Side,
        core: usize,
        socket: usize,
        pa: u64,
        remote: bool,
    ) -> (HitLevel, usize) {
        let line = pa >> 6;
        match self.l1_mut(side, core).access(line) {
            (true, slot) => (HitLevel::L1, slot),
            (false, slot) => (self.below_l1(core, socket, line, remote), slot),
        }
    }

    /// Accesses that hit in L1 at `slots`, in order: what access() of lines known to be
    /// there does (their LRU order is refreshed), without looking them up.
    pub fn replay_l1_hits(
        &mut self,
        side: L1Side,
        core: usize,
        slots: impl Iterator<Item = usize>,
    ) {
        self.l1_mut(side, core).hits(slots);
    }

    /// Whether L1 `slot` holds the line of `pa`.
    pub fn l1_holds(&self, side: L1Side, core: usize, slot: usize, pa: u64) -> bool {
        self.l1(side, core).holds(slot, pa >> 6)
    }

    fn l1(&self, side: L1Side, core: usize) -> &SlotCache {
        match side {
            L1Side::Instruction => &self.l1i[core],
            L1Side::Data => &self.l1[core],
        }
    }

    fn l1_mut(&mut self, side: L1Side, core: usize) -> &mut SlotCache {
        match side {
            L1Side::Instruction => &mut self.l1i[core],
            L1Side::Data => &mut self.l1[core],
        }
    }

    fn below_l1(&mut self, core: usize, socket: usize, line: u64, remote: bool) -> HitLevel {
        if self.l2[core].access(line) {
            return HitLevel::L2;
        }
        if self.llc[socket].access(line) {
            return HitLevel::Llc;
        }
        if remote {
            HitLevel::RemoteDram
        } else {
            HitLevel::LocalDram
        }
    }

    /// Empties every level of every core and socket. Counted as a fill of each cache, so
    /// nothing that watches the fill counts (kernel/paths/l1_replay.rs) takes the lines for present.
    pub fn clear(&mut self) {
        for c in self.l1.iter_mut().chain(self.l1i.iter_mut()) {
            c.clear();
        }
        for c in self.l2.iter_mut().chain(self.llc.iter_mut()) {
            c.clear();
        }
    }

    /// `lines` lines of someone else's (user code between kernel entries) pass through
    /// `core`'s L1 on `side`, displacing what was there (SlotCache::displace).
    pub fn displace_l1(&mut self, side: L1Side, core: usize, lines: usize) {
        self.l1_mut(side, core).displace(lines);
    }

    /// Empties `core`'s L1 on `side` (an L1D flush), counted as a fill.
    pub fn empty_l1(&mut self, side: L1Side, core: usize) {
        self.l1_mut(side, core).clear();
    }

    /// Every level's lines and recency order (latencies and overlaps are the profile's).
    pub fn canon(&self, c: &mut crate::sim::Canon) {
        for l1 in self.l1.iter().chain(&self.l1i) {
            l1.canon(c);
        }
        for r in self.l2.iter().chain(&self.llc) {
            r.canon(c);
        }
    }

    /// Fills of `core`'s L1 on `side` so far: while it stands still, every line that was
    /// there still is, in the same slot.
    pub fn l1_fills(&self, side: L1Side, core: usize) -> u64 {
        self.l1(side, core).fills()
    }

    /// Cycles a hit at `level` waits beyond an L1 hit (which a path's own work includes).
    pub fn stall_cycles(&self, level: HitLevel) -> f64 {
        match level {
            HitLevel::L1 => 0.0,
            other => self.cycles(other) - self.l1_cycles,
        }
    }

    /// Cycles a kernel path's line served at `h` waits beyond an L1 hit. The next-line
    /// prefetcher every modelled core has (Intel's and AMD's optimization manuals) has asked
    /// L2 for a code line that follows the previous one in a straight run (`sequential`)
    /// before it is needed, so such a line served by L2 costs nothing; other L2 hits wait in
    /// full; lines from the LLC or DRAM wait their latency over the misses the core overlaps
    /// there (the profile's llc_miss_overlap and dram_miss_overlap; `reproduce evict-fault`
    /// fits the recording host's).
    #[inline]
    pub fn line_stall(&self, h: HitLevel, sequential: bool) -> f64 {
        let stall = self.stall_cycles(h);
        match h {
            HitLevel::L1 => 0.0,
            HitLevel::L2 if sequential => 0.0,
            HitLevel::L2 => stall,
            HitLevel::Llc => stall / self.llc_overlap,
            HitLevel::LocalDram | HitLevel::RemoteDram => stall / self.dram_overlap,
        }
    }

    pub fn cycles(&self, level: HitLevel) -> f64 {
        match level {
            HitLevel::L1 => self.l1_cycles,
            HitLevel::L2 => self.l2_cycles,
            HitLevel::Llc => self.llc_cycles,
            HitLevel::LocalDram => self.local_dram_cycles,
            HitLevel::RemoteDram => self.remote_dram_cycles,
        }
    }
}
