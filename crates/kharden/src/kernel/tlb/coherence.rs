//! TLB coherence, the property every flush policy must keep whatever it defers: at a return to
//! user mode, no TLB entry usable in the current context translates a user address to
//! something the current page tables no longer say (gone, another frame, or more rights).

use crate::arch::x86::paging;
use crate::kernel::hooks::Violation;
use crate::kernel::{CpuId, Kernel};

pub fn check(k: &Kernel, cpu: CpuId) -> Option<Violation> {
    let c = &k.cpus[cpu];
    let (root, pcid) = (c.mmu.root(), c.mmu.current_pcid());
    for e in c.mmu.tlb_entries() {
        let va = e.va();
        if va.is_kernel() || !e.matches_context(pcid) {
            continue;
        }
        let stale = match paging::translate(&k.mem, root, va) {
            None => true,
            Some(leaf) => {
                let offset = va.0 & (leaf.size.bytes() - 1);
                leaf.page.0 + offset != e.page.0
                    || (e.flags.writable && !leaf.flags.writable)
                    || (e.flags.user && !leaf.flags.user)
            }
        };
        if stale {
            let defense = k.defense_names().join(",");
            let what = format!(
                "stale TLB entry for user {va} (PCID {}) survives a page-table change",
                e.pcid.0
            );
            return Some(Violation { defense, cpu, what });
        }
    }
    None
}
