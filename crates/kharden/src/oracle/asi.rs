//! ASI's property: while a CPU runs on the restricted tables (in user mode, where every
//! return to it must have entered them), no sensitive page (a user or page-cache frame, the
//! allocator's GFP_USER class) is reachable through a kernel address: not through the
//! current tables' kernel half, not through a TLB entry usable in the current context (a
//! stale one from the full tables counts), and not through a paging-structure-cache entry
//! leading to tables the current PGD does not reach. The process's own pages through its
//! user half are not sensitive to it.

use super::Violation;
use crate::arch::x86::{paging, Pfn, PhysAddr};
use crate::kernel::{CpuId, Kernel};

/// The frames currently allocated to user memory or the page cache, sorted.
fn sensitive_frames(k: &Kernel) -> Vec<u64> {
    let mut frames: Vec<u64> = k
        .pages
        .iter()
        .filter(|(_, info)| info.gfp.is_highuser())
        .map(|(pfn, _)| pfn.0)
        .collect();
    frames.sort_unstable();
    frames
}

/// The first sensitive frame in [page, page + bytes).
fn sensitive_in(frames: &[u64], page: PhysAddr, bytes: u64) -> Option<Pfn> {
    let first = page.pfn().0;
    let end = first + bytes.div_ceil(4096);
    let i = frames.partition_point(|&f| f < first);
    frames.get(i).filter(|&&f| f < end).map(|&f| Pfn(f))
}

pub fn check(
    k: &Kernel,
    cpu: CpuId,
    defense: &str,
    restricted_root: Option<Pfn>,
) -> Option<Violation> {
    let c = &k.cpus[cpu];
    let violation = |what: String| {
        Some(Violation {
            defense: defense.into(),
            cpu,
            what,
        })
    };
    let root = c.mmu.root();
    if restricted_root != Some(root) {
        return violation(format!(
            "user mode runs on tables other than its address space's restricted ones (CR3 {:#x})",
            root.0
        ));
    }
    let frames = sensitive_frames(k);
    let mut bad = None;
    paging::for_each_leaf(&k.mem, root, 256..512, &mut |va, leaf| {
        if bad.is_none() {
            if let Some(p) = sensitive_in(&frames, leaf.page, leaf.size.bytes()) {
                bad = Some(format!(
                    "restricted tables map sensitive page {:#x} at kernel {va} ({:?})",
                    p.0, leaf.size
                ));
            }
        }
    });
    if let Some(what) = bad {
        return violation(what);
    }
    let pcid = c.mmu.current_pcid();
    for e in c.mmu.tlb_entries() {
        if !e.matches_context(pcid) || !e.va().is_kernel() {
            continue;
        }
        if let Some(p) = sensitive_in(&frames, e.page, e.size.bytes()) {
            return violation(format!(
                "TLB entry for kernel {} ({:?}, PCID {}) reaches sensitive page {:#x} in restricted mode",
                e.va(),
                e.size,
                e.pcid.0,
                p.0
            ));
        }
    }
    for (e, va, bytes) in c.mmu.psc_entries() {
        if e.pcid == pcid && va.is_kernel() && !super::pti::reachable(k, root, va, bytes, e.table) {
            return violation(format!(
                "paging-structure-cache entry for kernel {va} (PCID {}) leads to tables the restricted PGD does not reach",
                e.pcid.0
            ));
        }
    }
    None
}
