//! XPFO, eXclusive Page Frame Ownership (the v7 series on Linux 4.20; docs/design/xpfo.md):
//! pages given to user space lose their direct-map alias, so a kernel exploit cannot reach
//! user-controlled data through the physmap (ret2dir). The kernel maps a page back only
//! around its own copies (kmap/kunmap).
//!
//! Lifecycle of a user page (GFP_HIGHUSER in full):
//! - allocation: marked user; one flush of its direct-map range (it was a kernel page);
//! - kmap: mapcount 1 maps the alias back (set_kpte), no flush;
//! - kunmap: mapcount 0 unmaps it (set_kpte, splitting a large direct-map page first) and
//!   flushes the alias;
//! - free: alias restored, no flush.
//!
//! The flush policies differ in who flushes: `immediate` every CPU at once by IPI
//! (flush_tlb_kernel_range); `deferred` (v7 16/16) the local CPU now and every other CPU
//! when the allocating task is next switched in there (a per-task pending mask). Splitting a
//! large direct-map page ends with flush_tlb_all() on every CPU (__split_large_page), except
//! under v9's batched policy, where it is deferred like any other XPFO flush.

use super::{CounterSlots, Defense};
use crate::arch::x86::{PageSize, Pfn, PhysMem, VirtAddr};
use crate::kernel::memory::layout;
use crate::kernel::memory::page_alloc::Gfp;
use crate::kernel::tlb::shared_line::{LineAccess, SharedLine};
use crate::kernel::BootConfig;
use crate::kernel::{CpuId, Kernel, TaskId};
use crate::machine::MachineProfile;
use crate::oracle::Violation;
use crate::params::{Decl, Params, Unit};
use crate::sim::CpuSet;
use crate::sim::OwnedCounter;
use crate::sim::{Counter, FlushReason, IntMap, TimeCategory};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// v7 patches 1-15 with `xpfotlbflush`: every flush IPIs every CPU.
    Immediate,
    /// v7 16/16: flush locally, post a pending full flush per task for every other CPU.
    Deferred,
    /// v8/v9: flush locally, post a pending full flush for every other CPU in one global
    /// mask; each CPU runs it at its next switch to a user task.
    DeferredGlobal,
    /// v9 13/13 on top of DeferredGlobal: pages are unmapped when a per-CPU free list is
    /// refilled (one flush per batch) and stay unmapped when freed.
    Batched,
    /// v8 13/14 on top of DeferredGlobal: a refill only marks its pages user and unmapped
    /// (one flush per batch, no set_kpte: they stay mapped until their first kunmap); a
    /// freed page is mapped back and loses its marks, so its next allocation flushes again.
    BatchedV8,
    /// v7 patches 1-15 without `xpfotlbflush` (the default): no flush at all.
    NoFlush,
    /// BROKEN: deferred, but the switch-time flush is forgotten.
    BrokenDeferredNoSwitchFlush,
    /// BROKEN: deferred, but the pending mask is cleared as soon as it is posted.
    BrokenPendingClearedEarly,
    /// BROKEN, as v5 had it: immediate, but kunmap flushes the alias on its own CPU only
    /// (__flush_tlb_one); v6 changed it to flush_tlb_kernel_range(), every CPU.
    BrokenBeforeFlushKernelRange,
}

pub const FAMILY: super::Family = super::Family {
    name: "xpfo",
    boot_option: false,
    variants: &[
        super::Variant::new("xpfo:immediate", &["xpfo"], "XPFO (v7 + xpfotlbflush): user pages leave the direct map; every flush IPIs every CPU", false, |s| Box::new(Xpfo::new(Policy::Immediate, s))),
        super::Variant::new("xpfo:deferred", &[], "XPFO with deferred flushes (v7 16/16): local flush, per-task pending full flush on other CPUs", false, |s| Box::new(Xpfo::new(Policy::Deferred, s))),
        super::Variant::new("xpfo:deferred-global", &[], "XPFO with a global pending mask (v8/v9): local flush, every other CPU flushes at its next switch to a user task", false, |s| Box::new(Xpfo::new(Policy::DeferredGlobal, s))),
        super::Variant::new("xpfo:batched", &[], "XPFO batched (v9 13/13): pages unmapped at per-CPU-list refill with one flush per batch, freed pages stay unmapped; global pending mask", false, |s| Box::new(Xpfo::new(Policy::Batched, s))),
        super::Variant::new("xpfo:batched-v8", &[], "XPFO batched (v8 13/14): refilled movable pages marked user and unmapped with one flush per batch (still mapped until their first kunmap), freed pages mapped back; global pending mask", false, |s| Box::new(Xpfo::new(Policy::BatchedV8, s))),
        super::Variant::new("xpfo:noflush", &[], "XPFO without TLB flushes (v7 default): cheap, and stale aliases stay usable", false, |s| Box::new(Xpfo::new(Policy::NoFlush, s))),
        super::Variant::new("xpfo:broken-deferred-no-switch-flush", &[], "BROKEN: deferred XPFO that never runs the pending flush at context switch", true, |s| Box::new(Xpfo::new(Policy::BrokenDeferredNoSwitchFlush, s))),
        super::Variant::new("xpfo:broken-pending-cleared-early", &[], "BROKEN: deferred XPFO whose pending mask is cleared as soon as it is posted", true, |s| Box::new(Xpfo::new(Policy::BrokenPendingClearedEarly, s))),
        super::Variant::new("xpfo:broken-before-flush-kernel-range", &[], "BROKEN, as v5 had it: kunmap flushes the alias on its own CPU only (__flush_tlb_one); v6 flushes every CPU (flush_tlb_kernel_range)", true, |s| Box::new(Xpfo::new(Policy::BrokenBeforeFlushKernelRange, s))),
    ],
    params: &[
        Decl::num("xpfo.page_cycles", Unit::Cycles, (0.0, 1e6), "kernel cycles per XPFO user page beyond the modelled mechanisms (accounted in time category 'fitted' without delaying anything simulated)").charged_per("xpfo_page_charges"),
        Decl {
            path: "xpfo.split_kernel_heap",
            unit: Unit::Bool,
            range: (0.0, 0.0),
            help: "the kernel heap's direct map is split to 4 KiB pages too, as if slab pages had shared 2 MiB blocks with user pages XPFO unmapped (a what-if: Linux groups them apart)",
            per_event: None,
        },
    ],
    excludes: &[],
    counters: &[
        ("xpfo_page_charges", "user-page allocations charged xpfo.page_cycles"),
        ("xpfo_locked_ops", "XPFO's locked read-modify-writes of its struct page fields (page-flag bits, map count, lock)"),
        ("xpfo_flushes", "XPFO flush requests (allocations and kunmaps), whatever the policy does with them"),
        ("xpfo_pending_posted", "deferred full flushes posted for other CPUs"),
        ("xpfo_pending_executed", "deferred full flushes executed at a context switch"),
    ],
};

/// Where XPFO's fields (xpfo_mapcount, xpfo_lock) sit in struct page: after the 64 bytes
/// of the unhardened struct (include/linux/mm_types.h under CONFIG_XPFO, v7 to v9).
const XPFO_FIELDS_OFFSET: u64 = 64;

/// The counters XPFO owns (registry slots).
struct Counters {
    page_charges: OwnedCounter,
    locked_ops: OwnedCounter,
    flushes: OwnedCounter,
    pending_posted: OwnedCounter,
    pending_executed: OwnedCounter,
}

#[derive(Debug, Clone, Copy, Default)]
struct PageState {
    user: bool,
    unmapped: bool,
    mapcount: u32,
}

pub struct Xpfo {
    policy: Policy,
    /// xpfo.page_cycles.
    page_cycles: f64,
    /// xpfo.split_kernel_heap.
    split_kernel_heap: bool,
    /// The machine's locked read-modify-write (MachineProfile::locked_rmw_cycles).
    locked_rmw_cycles: f64,
    counters: Counters,
    pages: IntMap<Pfn, PageState>,
    /// Per task: CPUs that owe a full flush before this task runs there again.
    pending: IntMap<TaskId, CpuSet>,
    /// DeferredGlobal/Batched: CPUs that owe a full flush at their next user-task switch.
    global_pending: CpuSet,
    /// The cache line holding that mask: every XPFO flush anywhere writes it (cpumask_or
    /// stores even when no bit changes), every context switch reads it.
    global_pending_line: SharedLine,
}

impl Xpfo {
    pub fn new(policy: Policy, slots: &CounterSlots) -> Xpfo {
        Xpfo {
            policy,
            page_cycles: 0.0,
            split_kernel_heap: false,
            locked_rmw_cycles: 0.0,
            counters: Counters {
                page_charges: slots.get("xpfo_page_charges"),
                locked_ops: slots.get("xpfo_locked_ops"),
                flushes: slots.get("xpfo_flushes"),
                pending_posted: slots.get("xpfo_pending_posted"),
                pending_executed: slots.get("xpfo_pending_executed"),
            },
            pages: IntMap::default(),
            pending: IntMap::default(),
            global_pending: CpuSet::default(),
            global_pending_line: SharedLine::default(),
        }
    }

    fn deferred(&self) -> bool {
        !matches!(
            self.policy,
            Policy::Immediate | Policy::NoFlush | Policy::BrokenBeforeFlushKernelRange
        )
    }

    fn global_mask(&self) -> bool {
        matches!(
            self.policy,
            Policy::DeferredGlobal | Policy::Batched | Policy::BatchedV8
        )
    }

    /// xpfo_kmap() and xpfo_kunmap() take the page's xpfo_lock and update its
    /// xpfo_mapcount: the struct page's line that holds them, which no unhardened path
    /// uses, comes through the caches (a page-cache page allocated long ago finds it cold).
    fn load_lock_line(&self, k: &mut Kernel, cpu: CpuId, pfn: Pfn) {
        let pa = PhysMem::struct_page_addr(pfn, k.config.struct_page_bytes).0;
        let hit = k.load_line(cpu, pa + XPFO_FIELDS_OFFSET);
        let stall = k.caches.stall_cycles(hit);
        k.compute(cpu, stall, TimeCategory::KernelCacheMiss);
    }

    /// XPFO's own code on a page's struct page (mm/xpfo.c in v7 to v9): `ops` locked
    /// read-modify-writes of its page-flag bits, map count and spinlock, one after the
    /// other, each at the machine's locked RMW on a line in L1 (the flags share their line
    /// with the _refcount and lru the caller has just used: the allocator's free lists, the
    /// page cache's get_page before a copy).
    fn locked_ops(&mut self, k: &mut Kernel, cpu: CpuId, ops: u32) {
        let cycles = ops as f64 * self.locked_rmw_cycles;
        k.compute(cpu, cycles, TimeCategory::LockedRmw);
        k.cpus[cpu]
            .stats
            .add_owned(self.counters.locked_ops, ops as u64);
    }

    /// xpfo_flush_kernel_tlb(): lookup_address() finds the size of the direct-map page that
    /// maps `pfn` (4 KiB, or a large page not split yet), whose range is flushed as the
    /// policy says.
    fn flush_alias(&mut self, k: &mut Kernel, cpu: CpuId, pfn: Pfn) {
        if self.policy == Policy::NoFlush {
            return; // v7 without xpfotlbflush: no lookup, no flush
        }
        let va = k.direct_map_addr(pfn);
        k.lookup_address(cpu, va);
        let size = k.direct_map_page_size(pfn).unwrap_or(PageSize::Size4K);
        let start = va.align_down(size);
        let pages = size.bytes() / 4096;
        match self.policy {
            Policy::Immediate | Policy::BrokenBeforeFlushKernelRange => {
                k.flush_tlb_kernel_range(cpu, start, pages)
            }
            _ => {
                k.flush_kernel_range_local(cpu, start, pages, FlushReason::LocalShootdown);
                self.post_pending(k, cpu);
            }
        }
    }

    fn post_pending(&mut self, k: &mut Kernel, cpu: CpuId) {
        let mut others = CpuSet::all(k.cpus.len());
        others.remove(cpu);
        if self.global_mask() {
            // OR into the global mask (all but this CPU).
            k.touch_shared_line(&mut self.global_pending_line, cpu, LineAccess::Write);
            if self.global_pending.is_empty() {
                self.global_pending = CpuSet::new(k.cpus.len());
            }
            self.global_pending.union_with(&others);
            k.cpus[cpu].stats.count_owned(self.counters.pending_posted);
            return;
        }
        let Some(task) = k.cpus[cpu].current else {
            return;
        };
        if self.policy == Policy::BrokenPendingClearedEarly {
            return; // posted and forgotten at once
        }
        self.pending.insert(task, others);
        k.cpus[cpu].stats.count_owned(self.counters.pending_posted);
    }

    /// xpfo_flush_tlb_all(): a full local flush now, a pending one everywhere else.
    fn flush_all_deferred(&mut self, k: &mut Kernel, cpu: CpuId) {
        k.flush_tlb_all_local(cpu);
        self.post_pending(k, cpu);
    }

    /// set_kpte() of the alias; a split ends with __split_large_page's flush_tlb_all() on
    /// every CPU (v7, v8), or with xpfo_flush_tlb_all() under the batched policy (v9 13/13
    /// tells __split_large_page that XPFO is splitting).
    fn set_alias(&mut self, k: &mut Kernel, cpu: CpuId, pfn: Pfn, present: bool) {
        let splits = k.set_direct_map_entry(cpu, pfn, present);
        if splits == 0 {
            return;
        }
        match self.policy {
            Policy::NoFlush => {}
            Policy::Batched => self.flush_all_deferred(k, cpu),
            _ => k.flush_tlb_kernel_range(
                cpu,
                VirtAddr(layout::DIRECT_MAP),
                crate::kernel::tlb::tlbflush::FLUSH_ALL,
            ),
        }
    }
}

impl Defense for Xpfo {
    fn canon(&self, c: &mut crate::sim::Canon) {
        let Xpfo {
            policy: _,
            page_cycles: _,
            split_kernel_heap: _,
            locked_rmw_cycles: _,
            counters: _,
            pages,
            pending,
            global_pending,
            global_pending_line,
        } = self;
        c.sorted_map(pages.iter().map(|(p, state)| (p.0, state)));
        c.sorted_map(pending.iter());
        c.debug(&(global_pending, global_pending_line));
    }

    fn name(&self) -> String {
        match self.policy {
            Policy::Immediate => "xpfo:immediate",
            Policy::Deferred => "xpfo:deferred",
            Policy::DeferredGlobal => "xpfo:deferred-global",
            Policy::Batched => "xpfo:batched",
            Policy::BatchedV8 => "xpfo:batched-v8",
            Policy::NoFlush => "xpfo:noflush",
            Policy::BrokenDeferredNoSwitchFlush => "xpfo:broken-deferred-no-switch-flush",
            Policy::BrokenPendingClearedEarly => "xpfo:broken-pending-cleared-early",
            Policy::BrokenBeforeFlushKernelRange => "xpfo:broken-before-flush-kernel-range",
        }
        .into()
    }

    fn configure(&mut self, config: &mut BootConfig, machine: &MachineProfile, params: &Params) {
        // Julian Stecklina's "remove dependency on CONFIG_PAGE_EXTENSION" (in v7, v8 and v9)
        // adds atomic_t xpfo_mapcount and spinlock_t xpfo_lock to struct page: 72 bytes,
        // 80 under x86-64's 16-byte _struct_page_alignment (CONFIG_HAVE_ALIGNED_STRUCT_PAGE).
        config.struct_page_bytes = 80;
        self.page_cycles = params.num("xpfo.page_cycles");
        self.split_kernel_heap = params.flag("xpfo.split_kernel_heap");
        self.locked_rmw_cycles = machine.locked_rmw_cycles().unwrap_or(0.0);
    }

    fn on_page_alloc(&mut self, k: &mut Kernel, cpu: CpuId, pfn: Pfn, gfp: Gfp) {
        let st = self.pages.entry(pfn).or_default();
        if !gfp.is_highuser() {
            let remap = st.unmapped;
            *st = PageState::default();
            // ClearPageXpfoUser, and v9 13/13's TestClearPageXpfoUnmapped.
            let ops = 1 + (self.policy == Policy::Batched) as u32;
            self.locked_ops(k, cpu, ops);
            if remap {
                // A kernel allocation of a page the batched policy left unmapped.
                self.set_alias(k, cpu, pfn, true);
            }
            return;
        }
        // TestSetPageXpfoUser, and SetPageXpfoUnmapped where the page becomes user.
        let becomes_user = !st.user;
        self.locked_ops(k, cpu, 1 + becomes_user as u32);
        let st = self.pages.entry(pfn).or_default();
        // Whatever XPFO costs per page that the model does not derive (0 unless an experiment
        // fitted it; docs/design/xpfo-model.md section 2): accounted, not spent (Kernel::account).
        k.account(cpu, self.page_cycles, TimeCategory::Fitted);
        k.cpus[cpu].stats.count_owned(self.counters.page_charges);
        if self.policy == Policy::Batched && st.user && st.unmapped {
            return; // unmapped and flushed when its batch was refilled
        }
        if !st.user {
            st.user = true;
            k.cpus[cpu].stats.count_owned(self.counters.flushes);
            self.flush_alias(k, cpu, pfn);
        }
    }

    fn on_page_free(&mut self, k: &mut Kernel, cpu: CpuId, pfn: Pfn, _gfp: Gfp) {
        let user = self.pages.get(&pfn).is_some_and(|s| s.user);
        if self.policy == Policy::Batched {
            // Freed user pages stay user and unmapped: SetPageXpfoUnmapped.
            if user {
                self.locked_ops(k, cpu, 1);
            }
            return;
        }
        // TestClearPageXpfoUser, and ClearPageXpfoUnmapped where it was user.
        self.locked_ops(k, cpu, 1 + user as u32);
        if let Some(st) = self.pages.remove(&pfn) {
            if st.user && st.unmapped {
                self.set_alias(k, cpu, pfn, true);
            }
        }
    }

    fn on_pcp_refill(&mut self, k: &mut Kernel, cpu: CpuId, batch: &[Pfn]) {
        if !matches!(self.policy, Policy::Batched | Policy::BatchedV8) {
            return;
        }
        // xpfo_pcp_refill(): every page of a movable list becomes user and unmapped (v9 takes
        // it out of the direct map there, v8 only marks it); one local full flush and a
        // global pending flush cover the batch.
        let mut unmapped_any = false;
        for &pfn in batch {
            // TestSetPageXpfoUnmapped and SetPageXpfoUser.
            self.locked_ops(k, cpu, 2);
            let st = self.pages.entry(pfn).or_default();
            st.user = true;
            if !st.unmapped {
                st.unmapped = true;
                unmapped_any = true;
                if self.policy == Policy::Batched {
                    self.set_alias(k, cpu, pfn, false);
                }
            }
        }
        if unmapped_any {
            k.cpus[cpu].stats.count_owned(self.counters.flushes);
            self.flush_all_deferred(k, cpu);
        }
    }

    fn on_frames_recycled(&mut self, k: &mut Kernel, frames: &[Pfn]) {
        // Each frame's first unmapping split the large direct-map page over it, and splits
        // are never undone. Freeing mapped it back (v7, v8) or left it user and unmapped
        // (v9 13/13). No TLB holds the aliases yet, so nothing needs a flush.
        let cpu = 0;
        // The what-if: the frames' node's kernel heap was split by its neighbours too.
        if let Some(&first) = frames.first().filter(|_| self.split_kernel_heap) {
            let base = k.kernel_heap[k.mem.node_of(first) as usize] >> 12;
            let heap: Vec<Pfn> = (0..k.paths.heap.bytes() >> 12)
                .map(|i| Pfn(base + i))
                .collect();
            k.set_direct_map_entries(cpu, &heap, true);
        }
        if self.policy == Policy::Batched {
            k.set_direct_map_entries(cpu, frames, false);
            self.pages.reserve(frames.len());
            for &pfn in frames {
                let st = PageState {
                    user: true,
                    unmapped: true,
                    mapcount: 0,
                };
                self.pages.insert(pfn, st);
            }
            return;
        }
        let mut region = None;
        for &pfn in frames {
            let r = k.direct_map_addr(pfn).align_down(PageSize::Size2M);
            if region != Some(r) {
                k.set_direct_map_entry(cpu, pfn, true);
                region = Some(r);
            }
        }
    }

    fn on_kmap(&mut self, k: &mut Kernel, cpu: CpuId, pfn: Pfn) {
        let Some(st) = self.pages.get_mut(&pfn).filter(|s| s.user) else {
            return;
        };
        st.mapcount += 1;
        let first = st.mapcount == 1;
        let remap = first && st.unmapped;
        if remap {
            st.unmapped = false;
        }
        // spin_lock, atomic_inc_return, and TestClearPageXpfoUnmapped for the first mapping.
        self.load_lock_line(k, cpu, pfn);
        self.locked_ops(k, cpu, 2 + first as u32);
        if remap {
            self.set_alias(k, cpu, pfn, true);
        }
    }

    fn on_kunmap(&mut self, k: &mut Kernel, cpu: CpuId, pfn: Pfn) {
        let Some(st) = self.pages.get_mut(&pfn).filter(|s| s.user) else {
            return;
        };
        st.mapcount = st.mapcount.saturating_sub(1);
        let last = st.mapcount == 0;
        if last {
            st.unmapped = true;
        }
        // spin_lock, atomic_dec_return, and SetPageXpfoUnmapped for the last mapping.
        self.load_lock_line(k, cpu, pfn);
        self.locked_ops(k, cpu, 2 + last as u32);
        if last {
            self.set_alias(k, cpu, pfn, false);
            k.cpus[cpu].stats.count_owned(self.counters.flushes);
            if self.policy == Policy::BrokenBeforeFlushKernelRange {
                // v5: __flush_tlb_one() of the alias, this CPU's TLB only.
                let va = k.direct_map_addr(pfn);
                k.flush_kernel_range_local(cpu, va, 1, FlushReason::LocalShootdown);
            } else {
                self.flush_alias(k, cpu, pfn);
            }
        }
    }

    fn on_task_forked(&mut self, _k: &mut Kernel, _cpu: CpuId, parent: TaskId, child: TaskId) {
        // v7 16/16 keeps the mask in task_struct, which dup_task_struct copies.
        match self.pending.get(&parent).cloned() {
            Some(mask) => self.pending.insert(child, mask),
            // A reaped task's id may come back (kernel/memory/reap.rs): nothing of it survives.
            None => self.pending.remove(&child),
        };
    }

    fn on_task_switched_in(&mut self, k: &mut Kernel, cpu: CpuId, task: TaskId) {
        if !self.deferred() || self.policy == Policy::BrokenDeferredNoSwitchFlush {
            return;
        }
        if self.global_mask() {
            k.touch_shared_line(&mut self.global_pending_line, cpu, LineAccess::Read);
            if self.global_pending.contains(cpu) {
                k.touch_shared_line(&mut self.global_pending_line, cpu, LineAccess::Write); // cpumask_clear_cpu
                self.global_pending.remove(cpu);
                k.flush_tlb_all_local(cpu);
                k.cpus[cpu]
                    .stats
                    .count_owned(self.counters.pending_executed);
                k.cpus[cpu].stats.count(Counter::NrTlbRemoteFlushReceived);
            }
            return;
        }
        if let Some(mask) = self.pending.get_mut(&task) {
            if mask.contains(cpu) {
                mask.remove(cpu);
                k.flush_tlb_all_local(cpu);
                k.cpus[cpu]
                    .stats
                    .count_owned(self.counters.pending_executed);
                k.cpus[cpu].stats.count(Counter::NrTlbRemoteFlushReceived);
            }
        }
    }

    fn check_user_mode(&self, k: &Kernel, cpu: CpuId) -> Option<Violation> {
        crate::oracle::xpfo::check(k, cpu, &self.name(), |pfn| {
            self.pages.get(&pfn).is_some_and(|s| s.user && s.unmapped)
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::kernel::Kernel;
    use crate::sim::Counter;
    use crate::{defense, machine};

    /// The deferred policy's reason to exist and its duty: a CPU that touched a page while it
    /// was a kernel page keeps that alias in its TLB; when the page becomes task T's and
    /// leaves the direct map, the CPU must be flushed before T runs there.
    fn stale_alias_scenario(defenses: &str) -> Vec<String> {
        let m = machine::load("ivybridge-i5-3550").unwrap();
        let violations = crate::oracle::scenario::page_handoff(
            &m,
            defense::parse_list(defenses).unwrap(),
            &crate::params::Params::linux(),
        )
        .unwrap();
        violations.into_iter().map(|v| v.what).collect()
    }

    #[test]
    fn correct_policies_flush_the_stale_alias_before_the_owner_runs() {
        assert_eq!(stale_alias_scenario("xpfo:immediate"), Vec::<String>::new());
        assert_eq!(stale_alias_scenario("xpfo:deferred"), Vec::<String>::new());
        assert_eq!(
            stale_alias_scenario("xpfo:deferred-global"),
            Vec::<String>::new()
        );
        assert_eq!(stale_alias_scenario("xpfo:batched"), Vec::<String>::new());
        assert_eq!(
            stale_alias_scenario("xpfo:batched-v8"),
            Vec::<String>::new()
        );
    }

    /// Dave Hansen's objection to v7 16/16, which Khalid Aziz conceded: deferring the other
    /// CPUs' flush leaves a sibling thread of the receiving process, already running on a
    /// CPU that holds the old alias, free to use it. Every deferred policy has the hole;
    /// flushing every CPU at once does not.
    #[test]
    fn deferral_leaves_a_sibling_thread_the_stale_alias() {
        let m = machine::load("ivybridge-i5-3550").unwrap();
        let sibling = |d: &str| {
            crate::oracle::scenario::sibling_thread(
                &m,
                defense::parse_list(d).unwrap(),
                &crate::params::Params::linux(),
            )
            .unwrap()
        };
        assert!(sibling("xpfo:immediate").is_empty());
        for d in [
            "xpfo:deferred",
            "xpfo:deferred-global",
            "xpfo:batched",
            "xpfo:batched-v8",
        ] {
            assert!(
                sibling(d)
                    .iter()
                    .any(|v| v.what.contains("direct-map alias")),
                "{d}"
            );
        }
    }

    #[test]
    fn broken_deferred_variants_are_caught() {
        for d in [
            "xpfo:broken-deferred-no-switch-flush",
            "xpfo:broken-pending-cleared-early",
            "xpfo:noflush",
        ] {
            let v = stale_alias_scenario(d);
            assert!(
                v.iter().any(|w| w.contains("direct-map alias")),
                "{d}: {v:?}"
            );
        }
    }

    #[test]
    fn a_forked_child_inherits_its_parents_pending_flushes() {
        let m = machine::load("ivybridge-i5-3550").unwrap();
        let mut k = Kernel::boot(m, defense::parse_list("xpfo:deferred").unwrap());
        let parent = k.spawn("parent", None);
        k.switch_to(0, parent);
        k.enter_user(0);
        k.anon_fault(0).unwrap(); // posts a pending full flush for CPUs 1-3
        let child = k.fork(0, parent, "child").unwrap();
        k.cpus[1].rq.push_back(child);
        k.schedule(1);
        assert_eq!(
            k.cpus[1]
                .stats
                .owned(crate::defense::registry::counter("xpfo_pending_executed")),
            1,
            "the child owes CPU 1 its parent's flush"
        );
        k.cpus[0].rq.push_back(child);
        k.schedule(0);
        assert_eq!(
            k.cpus[0]
                .stats
                .owned(crate::defense::registry::counter("xpfo_pending_executed")),
            0,
            "CPU 0 flushed when the page was allocated"
        );
    }

    /// A long build's frames have been user pages before: under XPFO the direct map over
    /// them is already split, so reusing them splits nothing (and flushes no CPU for a
    /// split); v9 left them unmapped. Without XPFO the direct map keeps its large pages.
    #[test]
    fn recycled_frames_carry_their_split_direct_map() {
        use crate::arch::x86::PageSize;
        use crate::kernel::memory::page_alloc::Gfp;
        for (d, split, mapped) in [
            ("none", false, true),
            ("xpfo:deferred", true, true),
            ("xpfo:batched", true, false),
        ] {
            let m = machine::load("xeon-platinum-8160").unwrap();
            let mut k = Kernel::boot(m, defense::parse_list(d).unwrap());
            k.recycle_frames(2048);
            let t = k.spawn("t", None);
            k.switch_to(0, t);
            let splits = |k: &Kernel| k.cpus[0].stats.counter(Counter::DirectMapSplits);
            let before = splits(&k);
            for _ in 0..2048 {
                let p = k.alloc_page(0, Gfp::UserAnon, Some(t));
                let large = k
                    .direct_map_page_size(p)
                    .is_some_and(|s| s != PageSize::Size4K);
                assert_eq!(large, !split, "{d}: direct-map page size of {p:?}");
                assert_eq!(k.direct_map_present(p), mapped, "{d}: alias of {p:?}");
                k.kunmap(0, p); // what a clear_page's kunmap does: split if still large
            }
            assert_eq!(
                splits(&k),
                before,
                "{d}: splits while reusing recycled frames"
            );
        }
    }

    /// The kernel heap keeps its large direct-map pages under XPFO (no user page lives in
    /// its regions) unless the what-if xpfo.split_kernel_heap splits them with the recycled
    /// frames' regions.
    #[test]
    fn the_kernel_heap_is_split_only_in_the_what_if() {
        use crate::arch::x86::PageSize;
        for (d, what_if, split) in [
            ("xpfo:deferred", "false", false),
            ("xpfo:deferred", "true", true),
            ("none", "true", false),
        ] {
            let m = machine::load("ivybridge-i5-3550").unwrap();
            let params = crate::params::Params::linux()
                .with("xpfo.split_kernel_heap", what_if)
                .unwrap();
            let defenses = defense::parse_list(d).unwrap();
            let mut k = Kernel::boot_with(m, defenses, &params, Default::default());
            k.recycle_frames(2048);
            let heap = crate::arch::x86::PhysAddr(k.kernel_heap[0]).pfn();
            let size = k.direct_map_page_size(heap);
            assert_eq!(size == Some(PageSize::Size4K), split, "{d} {what_if}");
            assert!(k.direct_map_present(heap));
        }
    }

    /// The fitted per-page cost (xpfo.page_cycles) is accounted once per user page
    /// allocated, under every flush policy, and never for kernel pages or without XPFO;
    /// it does not move the CPU's clock (Kernel::account).
    #[test]
    fn fitted_page_cost_is_accounted_per_user_page() {
        use crate::kernel::memory::page_alloc::Gfp;
        use crate::sim::TimeCategory;
        for (d, charged) in [
            ("none", false),
            ("xpfo:immediate", true),
            ("xpfo:deferred", true),
            ("xpfo:batched", true),
            ("xpfo:batched-v8", true),
        ] {
            let run = |cycles: &str| {
                let m = machine::load("ivybridge-i5-3550").unwrap();
                let params = crate::params::Params::linux()
                    .with("xpfo.page_cycles", cycles)
                    .unwrap();
                let mut k = Kernel::boot_with(
                    m,
                    defense::parse_list(d).unwrap(),
                    &params,
                    Default::default(),
                );
                let t = k.spawn("t", None);
                k.switch_to(0, t);
                for gfp in [Gfp::UserAnon, Gfp::PageCache, Gfp::Kernel, Gfp::UserAnon] {
                    let p = k.alloc_page(0, gfp, Some(t));
                    k.free_page(0, p);
                }
                k
            };
            let (k, free) = (run("1000"), run("0"));
            let user_pages = if charged { 3 } else { 0 };
            assert_eq!(
                k.cpus[0].stats.time(TimeCategory::Fitted),
                k.clock.cycles(1000.0) * user_pages,
                "{d}"
            );
            assert_eq!(k.cpus[0].now, free.cpus[0].now, "{d}: the clock moved");
        }
    }

    /// XPFO's own locked operations follow mm/xpfo.c: a user page's life (allocation,
    /// a kmap/kunmap pair, free) takes 2 + 3 + 3 + 2, a kernel page's 1 + 1, each at the
    /// machine's locked_rmw_cycles; without XPFO there are none.
    #[test]
    fn locked_operations_follow_a_pages_life() {
        use crate::arch::x86::Access;
        use crate::kernel::memory::page_alloc::Gfp;
        use crate::sim::TimeCategory;
        for (d, ops) in [("none", 0), ("xpfo:immediate", 12), ("xpfo:deferred", 12)] {
            let m = machine::load("ivybridge-i5-3550").unwrap();
            let per_op = m.locked_rmw_cycles().unwrap();
            let mut k = Kernel::boot(m, defense::parse_list(d).unwrap());
            let t = k.spawn("t", None);
            k.switch_to(0, t);
            let time0 = k.cpus[0].stats.time(TimeCategory::LockedRmw);
            let user = k.alloc_page(0, Gfp::UserAnon, Some(t));
            k.kmap(0, user, Access::Write);
            k.kunmap(0, user);
            k.free_page(0, user);
            let kernel = k.alloc_page(0, Gfp::Kernel, None);
            k.free_page(0, kernel);
            let spent = k.cpus[0].stats.time(TimeCategory::LockedRmw) - time0;
            // Each hook's time is rounded to the picosecond on its own.
            let expected = k.clock.cycles(per_op * ops as f64).ns();
            assert!(
                (spent.ns() - expected).abs() < 0.01,
                "{d}: {spent:?}, {expected} ns"
            );
        }
    }

    /// What v8 and v9 batching do differently with a page taken from a refilled per-CPU
    /// list: v9 unmaps it at the refill and leaves it unmapped when freed; v8 only marks it,
    /// and maps it back at free, so the same page flushes again when it is reallocated.
    #[test]
    fn v8_and_v9_batching_differ_at_refill_and_free() {
        use crate::kernel::memory::page_alloc::Gfp;
        for (d, mapped_after_refill, flushes_again) in [
            ("xpfo:batched", false, false),
            ("xpfo:batched-v8", true, true),
        ] {
            let m = machine::load("ivybridge-i5-3550").unwrap();
            let mut k = Kernel::boot(m, defense::parse_list(d).unwrap());
            let t = k.spawn("t", None);
            k.switch_to(0, t);
            let flushes = |k: &Kernel| {
                k.cpus[0]
                    .stats
                    .owned(crate::defense::registry::counter("xpfo_flushes"))
            };
            let p = k.alloc_page(0, Gfp::UserAnon, Some(t)); // refills the empty list: one batch flush
            assert_eq!(flushes(&k), 1, "{d}");
            assert_eq!(
                k.direct_map_present(p),
                mapped_after_refill,
                "{d}: alias present after the refill"
            );
            k.free_page(0, p);
            assert_eq!(
                k.direct_map_present(p),
                flushes_again,
                "{d}: alias mapped back at free"
            );
            let q = k.alloc_page(0, Gfp::UserAnon, Some(t)); // LIFO: the same frame
            assert_eq!(q, p);
            assert_eq!(
                flushes(&k),
                1 + flushes_again as u64,
                "{d}: flush when the freed page is reallocated"
            );
        }
    }
}
