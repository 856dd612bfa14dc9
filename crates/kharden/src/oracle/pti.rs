//! PTI's property: in user mode no usable translation reaches kernel memory other than what
//! the variant deliberately maps (the entry trampoline; Linux without PCID: kernel text and
//! rodata).
//! "Usable" covers everything a (speculative) user access could use: the current PGD's kernel
//! half, TLB entries tagged with the current PCID or global, and paging-structure-cache
//! entries of the current PCID that point at tables the current PGD does not reach.

use super::Violation;
use crate::arch::x86::{paging, VirtAddr};
use crate::kernel::{CpuId, Kernel};

fn inside(allowed: &[(u64, u64)], start: u64, bytes: u64) -> bool {
    allowed
        .iter()
        .any(|&(lo, hi)| start >= lo && start.saturating_add(bytes) <= hi)
}

pub fn check(k: &Kernel, cpu: CpuId, defense: &str, allowed: &[(u64, u64)]) -> Option<Violation> {
    let c = &k.cpus[cpu];
    debug_assert!(c.user_mode);
    let violation = |what: String| {
        Some(Violation {
            defense: defense.into(),
            cpu,
            what,
        })
    };
    let root = c.mmu.root();
    let mut bad = None;
    paging::for_each_leaf(&k.mem, root, 256..512, &mut |va, leaf| {
        if bad.is_none() && !inside(allowed, va.0, leaf.size.bytes()) {
            bad = Some(format!(
                "user page tables map kernel {va} ({:?})",
                leaf.size
            ));
        }
    });
    if let Some(what) = bad {
        return violation(what);
    }
    let pcid = c.mmu.current_pcid();
    for e in c.mmu.tlb_entries() {
        if e.matches_context(pcid)
            && e.va().is_kernel()
            && !inside(allowed, e.va().0, e.size.bytes())
        {
            let kind = if e.global { "global " } else { "" };
            return violation(format!(
                "{kind}TLB entry for kernel {} ({:?}, PCID {}) usable in user mode",
                e.va(),
                e.size,
                e.pcid.0
            ));
        }
    }
    for (e, va, bytes) in c.mmu.psc_entries() {
        if e.pcid == pcid
            && va.is_kernel()
            && !inside(allowed, va.0, bytes)
            && !reachable(k, root, va, bytes, e.table)
        {
            return violation(format!(
                "paging-structure-cache entry for kernel {va} (PCID {}) usable in user mode",
                e.pcid.0
            ));
        }
    }
    None
}

/// Does the current PGD itself lead to `table` for the region at `va`?
pub(crate) fn reachable(
    k: &Kernel,
    root: crate::arch::x86::Pfn,
    va: VirtAddr,
    bytes: u64,
    table: crate::arch::x86::Pfn,
) -> bool {
    let levels_below = match bytes.trailing_zeros() {
        39 => 3,
        30 => 2,
        _ => 1,
    };
    let mut t = root;
    for level in (levels_below + 1..=4u8).rev() {
        let e = k.mem.read(t, va.index(level));
        if !e.present() || e.large() {
            return false;
        }
        t = e.addr().pfn();
    }
    t == table
}
