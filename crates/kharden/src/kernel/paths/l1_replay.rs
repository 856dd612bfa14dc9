//! Replaying a kernel path's L1 hits. A path runs the same lines again and again; while a
//! core's L1 has filled nothing since a run left them there, every one of them is still in
//! the slot it was in, and the next run's accesses are hits that only refresh LRU order.
//! Recording the slots lets that run write the LRU stamps in order instead of searching
//! every set: the same cache state as looking the lines up, at a fraction of the engine's
//! cost (line lookups were half of a kbuild simulation's time).

use crate::arch::caches::L1Side;
use crate::kernel::{CpuId, Kernel};

/// Where one side's lines of a path were in a core's L1 after its last run on a CPU.
#[derive(Debug, Clone, Default)]
pub(crate) struct Residence {
    /// The L1's fill count when the slots were last known right; None: not known.
    fills: Option<u64>,
    /// Per group of lines (a text page, a data object): the physical address it started at.
    bases: Vec<u64>,
    /// Per line, in the path's order: its physical address and L1 slot.
    lines: Vec<(u64, usize)>,
}

/// Both sides of a path's L1 residence.
#[derive(Debug, Clone, Default)]
pub(crate) struct PathResidence {
    pub text: Residence,
    pub data: Residence,
}

impl Residence {
    /// Ready for a path of `groups` groups and `lines` lines (forgotten if it was another
    /// shape).
    pub fn shape(&mut self, groups: usize, lines: usize) {
        if self.bases.len() != groups || self.lines.len() != lines {
            *self = Residence {
                fills: None,
                bases: vec![u64::MAX; groups],
                lines: vec![(u64::MAX, 0); lines],
            };
        }
    }
}

impl Kernel {
    /// Group `g` of a path's lines on `side`: the lines at `offsets` from physical `base`,
    /// lines `first..` of the side in `r`. Replayed as L1 hits when the group starts where it
    /// did and the L1 has filled nothing since `r` was right; otherwise accessed through the
    /// caches (fetch_lines, which records where they went). Returns the cycles waited
    /// beyond L1 hits.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_lines(
        &mut self,
        cpu: CpuId,
        side: L1Side,
        r: &mut Residence,
        g: usize,
        first: usize,
        base: u64,
        offsets: impl ExactSizeIterator<Item = (u64, bool)>,
    ) -> f64 {
        let core = self.cpus[cpu].mmu.core();
        let span = first..first + offsets.len();
        if r.bases[g] == base && r.fills == Some(self.caches.l1_fills(side, core)) {
            let slots = r.lines[span.clone()].iter().map(|&(_, slot)| slot);
            self.caches.replay_l1_hits(side, core, slots);
            self.count_lines(cpu, side, span.len() as u64);
            return 0.0;
        }
        r.bases[g] = base;
        self.fetch_lines(cpu, base, offsets, side, &mut r.lines[span])
    }

    /// After a side's groups ran: if the L1 filled anything since `r` was right, whether
    /// every line is still in the slot recorded (a later line may have evicted an earlier).
    pub(super) fn settle(&self, cpu: CpuId, side: L1Side, r: &mut Residence) {
        let core = self.cpus[cpu].mmu.core();
        let fills = self.caches.l1_fills(side, core);
        if r.fills != Some(fills) {
            let in_place = r
                .lines
                .iter()
                .all(|&(pa, slot)| self.caches.l1_holds(side, core, slot, pa));
            r.fills = in_place.then_some(fills);
        }
    }
}
