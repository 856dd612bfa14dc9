//! Staged scenarios: short, deterministic kernel histories that drive a defense into the
//! corner its property is about, with the oracle checking at every return to user mode.
//! `kharden check` runs them next to the syscall loops; the defenses' tests use them too.

use super::{OracleMode, Violation};
use crate::arch::x86::{Access, Pfn};
use crate::defense::Defense;
use crate::error::{Error, Result};
use crate::kernel::page_alloc::Gfp;
use crate::kernel::{tlbflush, Kernel};
use crate::machine::MachineProfile;

/// A page changes hands between CPUs. Task T runs on CPU 1, where the kernel uses page P as
/// kernel memory (CPU 1's TLB now holds P's direct-map alias, in T's kernel context); P is
/// freed. T moves to CPU 0 and faults P in as a user page (XPFO takes it out of the direct
/// map), then moves back to CPU 1, whose TLB still holds T's context. Whatever the flush
/// policy, CPU 1 must have dropped the alias before T runs there. Needs two CPUs.
pub fn page_handoff(machine: &MachineProfile, defenses: Vec<Box<dyn Defense>>) -> Result<Vec<Violation>> {
    if machine.threads() < 2 {
        return Err(Error::new(format!("{}: the page-handoff scenario needs two CPUs", machine.name)));
    }
    let mut k = Kernel::boot(machine.clone(), defenses);
    k.config.oracle = OracleMode::Every;
    let t = k.spawn("victim", None);
    let other = k.spawn("other", None);
    k.switch_to(1, t);
    k.enter_user(1);
    // A kernel page P whose direct-map region is already split to 4 KiB entries, so that
    // the alias is a 4 KiB TLB entry of its own.
    let p = k.alloc_page(1, Gfp::Kernel, None);
    let neighbour = Pfn(p.0 ^ 1);
    k.set_direct_map_entry(1, neighbour, false);
    k.set_direct_map_entry(1, neighbour, true);
    k.flush_tlb_kernel_range(1, k.direct_map_addr(neighbour), tlbflush::FLUSH_ALL);
    // The kernel on CPU 1 writes P (an interrupt, so defenses see the kernel entry) and
    // frees it; P is next handed out on CPU 0.
    k.in_kernel(1, 0.0, |k| {
        k.touch(1, k.direct_map_addr(p), Access::Write).map(|_| ()).map_err(|f| Error::new(format!("page-handoff: kernel write to page {} faulted: {f:?}", p.0)))
    })?;
    k.free_page(1, p);
    k.pcp[1].retain(|&f| f != p);
    k.pcp[0].push(p);
    // CPU 1 switches to another task; T moves to CPU 0 and faults P in.
    run_next(&mut k, 1, other);
    run_next(&mut k, 0, t);
    k.anon_fault(0)?;
    if k.mms[k.tasks[t].mm].anon.last() != Some(&p) {
        return Err(Error::new("page-handoff: the fault did not get the handed-over page"));
    }
    // T goes back to CPU 1.
    k.schedule(0);
    run_next(&mut k, 1, t);
    Ok(k.violations)
}

/// Makes `cpu` switch to `task` (taken off any run queue) and return to user mode.
fn run_next(k: &mut Kernel, cpu: usize, task: usize) {
    for q in k.rq.iter_mut() {
        q.retain(|&x| x != task);
    }
    k.preempt(cpu);
    k.rq[cpu].clear();
    k.rq[cpu].push_back(task);
    k.schedule(cpu);
    k.enter_user(cpu);
}
