//! Per-CPU address-space identifiers, as Linux's arch/x86/mm/tlb.c does them: each CPU keeps
//! TLB_NR_DYN_ASIDS recently used address spaces with the flush generation its TLB has seen
//! for each; switching back to one of them needs no flush unless the mm was flushed since.
//! The hardware PCID of ASID a is a + 1 (kernel) and (a + 1) | bit 11 (PTI user).

use crate::kernel::MmId;

pub const TLB_NR_DYN_ASIDS: usize = 6;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Slot {
    /// The mm this slot last held (Linux compares ctx_id, unique over the mm's lifetime).
    ctx: Option<(MmId, u64)>,
    /// The mm's tlb_gen this CPU's TLB is up to date with for this slot.
    tlb_gen: u64,
}

#[derive(Debug, Clone, Default)]
pub struct AsidState {
    slots: [Slot; TLB_NR_DYN_ASIDS],
    next: usize,
    /// The address space whose page tables CR3 holds (stays loaded in lazy TLB mode).
    pub loaded_mm: Option<MmId>,
    pub loaded_asid: usize,
    /// Lazy TLB: running a kernel thread or idle on the previous task's page tables.
    pub is_lazy: bool,
}

impl AsidState {
    /// Linux choose_new_asid(): the slot for (mm, ctx_id) and whether its TLB contents are
    /// stale (a new slot, or one behind the mm's flush generation).
    pub fn choose(&mut self, mm: MmId, ctx_id: u64, mm_tlb_gen: u64) -> (usize, bool) {
        if let Some(a) = self.slots.iter().position(|s| s.ctx == Some((mm, ctx_id))) {
            return (a, self.slots[a].tlb_gen < mm_tlb_gen);
        }
        let a = self.next;
        self.next = (self.next + 1) % TLB_NR_DYN_ASIDS;
        (a, true)
    }

    /// Records that slot `asid` now holds (mm, ctx_id) at generation `tlb_gen` and is loaded.
    pub fn load(&mut self, asid: usize, mm: MmId, ctx_id: u64, tlb_gen: u64) {
        self.slots[asid] = Slot {
            ctx: Some((mm, ctx_id)),
            tlb_gen,
        };
        self.loaded_mm = Some(mm);
        self.loaded_asid = asid;
        self.is_lazy = false;
    }

    /// Linux invalidate_other_asid(): every slot but the loaded one is stale; switching to
    /// one of them flushes. Needed when kernel mappings are not global (PTI), because then
    /// every ASID holds its own copies of kernel translations.
    pub fn invalidate_others(&mut self) {
        let loaded = self.loaded_asid;
        for (i, s) in self.slots.iter_mut().enumerate() {
            if i != loaded {
                s.tlb_gen = 0;
            }
        }
    }

    /// The slots for kernel/steady.rs, each generation as its lag behind its mm's
    /// (`mm_gen` gives the generation of a live mm with that ctx_id), capped at 2: every
    /// decision only asks whether a slot is current, one behind, or further.
    pub fn canon(&self, mm_gen: impl Fn(MmId, u64) -> Option<u64>, c: &mut crate::sim::Canon) {
        let AsidState {
            slots,
            next,
            loaded_mm,
            loaded_asid,
            is_lazy,
        } = self;
        for s in slots {
            let lag = s
                .ctx
                .and_then(|(mm, ctx)| mm_gen(mm, ctx))
                .map(|g| g.saturating_sub(s.tlb_gen).min(2));
            c.debug(&(s.ctx, lag));
        }
        c.debug(&(next, loaded_mm, loaded_asid, is_lazy));
    }

    /// Moves the generation of every slot that holds a live mm and is at most one behind it
    /// on by `by(mm, ctx_id)` (its mm's generation moved on by as much).
    pub fn shift_generations(&mut self, by: impl Fn(MmId, u64) -> Option<(u64, u64)>) {
        for s in self.slots.iter_mut() {
            if let Some((gen, shift)) = s.ctx.and_then(|(mm, ctx)| by(mm, ctx)) {
                if gen.saturating_sub(s.tlb_gen) < 2 {
                    s.tlb_gen += shift;
                }
            }
        }
    }

    pub fn local_tlb_gen(&self) -> u64 {
        self.slots[self.loaded_asid].tlb_gen
    }

    pub fn set_local_tlb_gen(&mut self, g: u64) {
        self.slots[self.loaded_asid].tlb_gen = g;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn reuse_without_flush_until_generation_moves() {
        let mut a = AsidState::default();
        let (s0, flush) = a.choose(7, 1, 1);
        assert!(flush, "a new slot always flushes");
        a.load(s0, 7, 1, 1);
        let (s1, _) = a.choose(8, 2, 1);
        a.load(s1, 8, 2, 1);
        assert_eq!(a.choose(7, 1, 1), (s0, false), "back to mm 7: no flush");
        assert_eq!(
            a.choose(7, 1, 2),
            (s0, true),
            "mm 7 flushed meanwhile: flush"
        );
        assert_ne!(
            a.choose(7, 9, 1).0,
            s0,
            "same mm id, new ctx_id: a new slot"
        );
    }
    #[test]
    fn slots_are_recycled_round_robin() {
        let mut a = AsidState::default();
        for mm in 0..TLB_NR_DYN_ASIDS + 1 {
            let (s, flush) = a.choose(mm, mm as u64, 1);
            assert!(flush);
            a.load(s, mm, mm as u64, 1);
        }
        assert!(a.choose(0, 0, 1).1, "mm 0's slot was recycled");
    }
}
