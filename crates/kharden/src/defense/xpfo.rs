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
//! The flush policies differ in who flushes: `immediate` every CPU at once by IPI
//! (flush_tlb_kernel_range); `deferred` (v7 16/16) the local CPU now and every other CPU
//! when the allocating task is next switched in there (a per-task pending mask). Splitting a
//! large direct-map page always ends with flush_tlb_all() on every CPU (__split_large_page).

use super::Defense;
use crate::arch::x86::{PageSize, Pfn, VirtAddr};
use crate::kernel::cpuset::CpuSet;
use crate::kernel::page_alloc::Gfp;
use crate::kernel::{layout, CpuId, Kernel, TaskId};
use crate::oracle::Violation;
use crate::sim::{Counter, FlushReason};
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// v7 patches 1-15 with `xpfotlbflush`: every flush IPIs every CPU.
    Immediate,
    /// v7 16/16: flush locally, post a pending full flush per task for every other CPU.
    Deferred,
    /// v7 patches 1-15 without `xpfotlbflush` (the default): no flush at all.
    NoFlush,
    /// BROKEN: deferred, but the switch-time flush is forgotten.
    BrokenDeferredNoSwitchFlush,
    /// BROKEN: deferred, but the pending mask is cleared as soon as it is posted.
    BrokenPendingClearedEarly,
}

#[derive(Debug, Clone, Copy, Default)]
struct PageState {
    user: bool,
    unmapped: bool,
    mapcount: u32,
}

pub struct Xpfo {
    policy: Policy,
    pages: HashMap<Pfn, PageState>,
    /// Per task: CPUs that owe a full flush before this task runs there again.
    pending: HashMap<TaskId, CpuSet>,
}

impl Xpfo {
    pub fn new(policy: Policy) -> Xpfo {
        Xpfo { policy, pages: HashMap::new(), pending: HashMap::new() }
    }

    fn deferred(&self) -> bool {
        matches!(self.policy, Policy::Deferred | Policy::BrokenDeferredNoSwitchFlush | Policy::BrokenPendingClearedEarly)
    }

    /// xpfo_flush_kernel_tlb(): flush the direct-map range of `pfn` (4 KiB, or the whole
    /// large page that still maps it) as the policy says.
    fn flush_alias(&mut self, k: &mut Kernel, cpu: CpuId, pfn: Pfn) {
        let size = k.direct_map_page_size(pfn).unwrap_or(PageSize::Size4K);
        let start = k.direct_map_addr(pfn).align_down(size);
        let pages = size.bytes() / 4096;
        match self.policy {
            Policy::NoFlush => {}
            Policy::Immediate => k.flush_tlb_kernel_range(cpu, start, pages),
            _ => {
                k.flush_kernel_range_local(cpu, start, pages, FlushReason::LocalShootdown);
                self.post_pending(k, cpu);
            }
        }
    }

    fn post_pending(&mut self, k: &mut Kernel, cpu: CpuId) {
        let Some(task) = k.cpus[cpu].current else { return };
        let mut others = CpuSet::all(k.cpus.len());
        others.remove(cpu);
        if self.policy == Policy::BrokenPendingClearedEarly {
            return; // posted and forgotten at once
        }
        self.pending.insert(task, others);
        k.cpus[cpu].stats.count(Counter::XpfoPendingPosted);
    }

    /// set_kpte() of the alias; a split ends with flush_tlb_all() on every CPU, whatever
    /// the policy (v7 keeps __split_large_page's own flush).
    fn set_alias(&mut self, k: &mut Kernel, cpu: CpuId, pfn: Pfn, present: bool) {
        let splits = k.set_direct_map_entry(cpu, pfn, present);
        if splits > 0 && self.policy != Policy::NoFlush {
            k.flush_tlb_kernel_range(cpu, VirtAddr(layout::DIRECT_MAP), crate::kernel::tlbflush::FLUSH_ALL);
        }
    }
}

impl Defense for Xpfo {
    fn name(&self) -> String {
        match self.policy {
            Policy::Immediate => "xpfo:immediate",
            Policy::Deferred => "xpfo:deferred",
            Policy::NoFlush => "xpfo:noflush",
            Policy::BrokenDeferredNoSwitchFlush => "xpfo:broken-deferred-no-switch-flush",
            Policy::BrokenPendingClearedEarly => "xpfo:broken-pending-cleared-early",
        }
        .into()
    }

    fn on_page_alloc(&mut self, k: &mut Kernel, cpu: CpuId, pfn: Pfn, gfp: Gfp) {
        let st = self.pages.entry(pfn).or_default();
        if !gfp.is_highuser() {
            st.user = false;
            return;
        }
        if !st.user {
            st.user = true;
            k.cpus[cpu].stats.count(Counter::XpfoFlushes);
            self.flush_alias(k, cpu, pfn);
        }
    }

    fn on_page_free(&mut self, k: &mut Kernel, cpu: CpuId, pfn: Pfn, _gfp: Gfp) {
        if let Some(st) = self.pages.remove(&pfn) {
            if st.user && st.unmapped {
                self.set_alias(k, cpu, pfn, true);
            }
        }
    }

    fn on_kmap(&mut self, k: &mut Kernel, cpu: CpuId, pfn: Pfn) {
        let Some(st) = self.pages.get_mut(&pfn).filter(|s| s.user) else { return };
        st.mapcount += 1;
        if st.mapcount == 1 && st.unmapped {
            st.unmapped = false;
            self.set_alias(k, cpu, pfn, true);
        }
    }

    fn on_kunmap(&mut self, k: &mut Kernel, cpu: CpuId, pfn: Pfn) {
        let Some(st) = self.pages.get_mut(&pfn).filter(|s| s.user) else { return };
        st.mapcount = st.mapcount.saturating_sub(1);
        if st.mapcount == 0 {
            st.unmapped = true;
            self.set_alias(k, cpu, pfn, false);
            k.cpus[cpu].stats.count(Counter::XpfoFlushes);
            self.flush_alias(k, cpu, pfn);
        }
    }

    fn on_task_switched_in(&mut self, k: &mut Kernel, cpu: CpuId, task: TaskId) {
        if !self.deferred() || self.policy == Policy::BrokenDeferredNoSwitchFlush {
            return;
        }
        if let Some(mask) = self.pending.get_mut(&task) {
            if mask.contains(cpu) {
                mask.remove(cpu);
                k.flush_tlb_all_local(cpu);
                k.cpus[cpu].stats.count(Counter::XpfoPendingExecuted);
                k.cpus[cpu].stats.count(Counter::NrTlbRemoteFlushReceived);
            }
        }
    }

    fn check_user_mode(&self, k: &Kernel, cpu: CpuId) -> Option<Violation> {
        crate::oracle::xpfo::check(k, cpu, &self.name(), |pfn| self.pages.get(&pfn).is_some_and(|s| s.user && s.unmapped))
    }
}
