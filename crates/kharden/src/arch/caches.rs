//! The cache hierarchy: per-core L1I, L1D and L2, per-socket LLC, set-associative with LRU,
//! inclusive fill. Page walkers load paging entries through the data side (Intel's
//! PAGE_WALKER_LOADS events count hits per level), kernel paths fetch their text lines through
//! the instruction side and touch their data lines through the data side, so each costs what
//! the levels its lines sit in cost.

use crate::machine::MachineProfile;

#[derive(Debug, Clone)]
struct LineCache {
    ways: usize,
    set_mask: u64,
    tags: Vec<u64>,
    stamps: Vec<u64>,
    clock: u64,
    /// Lines filled so far: while it stands still, nothing was evicted.
    fills: u64,
}

impl LineCache {
    fn new(kib: u32, ways: u32) -> LineCache {
        let lines = (kib as usize * 1024 / 64).max(ways as usize);
        let sets = (lines / ways as usize).next_power_of_two();
        let n = sets * ways as usize;
        LineCache {
            ways: ways as usize,
            set_mask: sets as u64 - 1,
            tags: vec![u64::MAX; n],
            stamps: vec![0; n],
            clock: 0,
            fills: 0,
        }
    }

    /// True on a hit; on a miss the line is filled (LRU victim).
    fn access(&mut self, line: u64) -> bool {
        let start = (line & self.set_mask) as usize * self.ways;
        self.clock += 1;
        // One pass finds the line or, failing that, the least recently used way.
        let (mut victim, mut oldest) = (start, u64::MAX);
        for i in start..start + self.ways {
            if self.tags[i] == line {
                self.stamps[i] = self.clock;
                return true;
            }
            if self.stamps[i] < oldest {
                (victim, oldest) = (i, self.stamps[i]);
            }
        }
        self.fills += 1;
        self.tags[victim] = line;
        self.stamps[victim] = self.clock;
        false
    }
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

pub struct CacheHierarchy {
    l1: Vec<LineCache>,
    l1i: Vec<LineCache>,
    l2: Vec<LineCache>,
    llc: Vec<LineCache>,
    /// Latency per level, in core cycles.
    pub l1_cycles: f64,
    pub l2_cycles: f64,
    pub llc_cycles: f64,
    pub local_dram_cycles: f64,
    pub remote_dram_cycles: f64,
}

impl CacheHierarchy {
    pub fn new(m: &MachineProfile) -> CacheHierarchy {
        let cores = (m.topology.sockets * m.topology.cores_per_socket) as usize;
        let mem = &m.memory;
        CacheHierarchy {
            l1: vec![LineCache::new(mem.l1d_kib, mem.l1d_ways); cores],
            l1i: vec![LineCache::new(mem.l1i_kib, mem.l1i_ways); cores],
            l2: vec![LineCache::new(mem.l2_kib, mem.l2_ways); cores],
            llc: vec![
                LineCache::new(mem.llc_kib_per_socket, mem.llc_ways);
                m.topology.sockets as usize
            ],
            l1_cycles: mem.l1d_hit_cycles as f64,
            l2_cycles: mem.l2_hit_cycles as f64,
            llc_cycles: mem.llc_hit_cycles as f64,
            local_dram_cycles: mem.dram_local_ns * m.cpu.frequency_ghz,
            remote_dram_cycles: mem.dram_remote_ns * m.cpu.frequency_ghz,
        }
    }

    /// Loads the line holding physical byte address `pa` for `core` on `socket`; `remote`
    /// says whether the line's home node is another node than the core's.
    pub fn load(&mut self, core: usize, socket: usize, pa: u64, remote: bool) -> HitLevel {
        let line = pa >> 6;
        if self.l1[core].access(line) {
            return HitLevel::L1;
        }
        self.below_l1(core, socket, line, remote)
    }

    /// Fetches the instruction line holding `pa`: L1I, then the levels a load goes to.
    pub fn fetch(&mut self, core: usize, socket: usize, pa: u64, remote: bool) -> HitLevel {
        let line = pa >> 6;
        if self.l1i[core].access(line) {
            return HitLevel::L1;
        }
        self.below_l1(core, socket, line, remote)
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
    /// nothing that watches the fill counts (kernel/path.rs) takes the lines for present.
    pub fn clear(&mut self) {
        let all = self
            .l1
            .iter_mut()
            .chain(self.l1i.iter_mut())
            .chain(self.l2.iter_mut())
            .chain(self.llc.iter_mut());
        for c in all {
            c.tags.fill(u64::MAX);
            c.stamps.fill(0);
            c.fills += 1;
        }
    }

    /// Fills of `core`'s L1I and L1D so far: while both stand still, every line that was in
    /// them still is.
    pub fn l1_fills(&self, core: usize) -> (u64, u64) {
        (self.l1i[core].fills, self.l1[core].fills)
    }

    /// Cycles a hit at `level` waits beyond an L1 hit (which a path's own work includes).
    pub fn stall_cycles(&self, level: HitLevel) -> f64 {
        match level {
            HitLevel::L1 => 0.0,
            other => self.cycles(other) - self.l1_cycles,
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
