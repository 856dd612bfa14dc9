//! XPFO's property: no CPU running task T holds a usable TLB entry for a direct-map alias of
//! a page owned by T that XPFO has taken out of the direct map.

use super::Violation;
use crate::arch::x86::Pfn;
use crate::kernel::memory::layout::DIRECT_MAP;
use crate::kernel::{CpuId, Kernel};

pub fn check(
    k: &Kernel,
    cpu: CpuId,
    defense: &str,
    unmapped: impl Fn(Pfn) -> bool,
) -> Option<Violation> {
    let c = &k.cpus[cpu];
    let task = c.current?;
    let mm = k.tasks[task].mm;
    let owned = &k.mms[mm].anon;
    // The kernel reaches aliases with its own PCID, which under PTI is not the one user
    // mode runs with.
    let (pcid, kernel_pcid) = (c.mmu.current_pcid(), k.kernel_pcid(cpu));
    for e in c.mmu.tlb_entries() {
        let va = e.va().0;
        if !(e.matches_context(pcid) || e.matches_context(kernel_pcid))
            || !(DIRECT_MAP..DIRECT_MAP + (1 << 46)).contains(&va)
        {
            continue;
        }
        let first = e.page.pfn().0;
        let frames = e.size.bytes() / 4096;
        let covers = |p: &Pfn| p.0 >= first && p.0 < first + frames;
        if let Some(p) = owned.iter().find(|p| covers(p) && unmapped(**p)) {
            return Some(Violation {
                defense: defense.into(),
                cpu,
                what: format!("TLB entry ({:?}) for the direct-map alias of page {:#x}, owned by the running task, survives its unmapping", e.size, p.0),
            });
        }
    }
    None
}
