//! Staged scenarios: short, deterministic kernel histories that drive a defense into the
//! corner its property is about, with the oracle checking at every return to user mode.
//! `kharden check` runs them next to the syscall loops; the defenses' tests use them too.

use super::{OracleMode, Violation};
use crate::arch::x86::{Access, Pfn};
use crate::defense::Defense;
use crate::error::{Error, Result};
use crate::kernel::memory::page_alloc::Gfp;
use crate::kernel::paths::process::PageCacheFs;
use crate::kernel::paths::syscall;
use crate::kernel::tlb::tlbflush;
use crate::kernel::{CpuId, Kernel, TaskId};
use crate::machine::MachineProfile;
use crate::params::Params;

/// Runs a scenario on a machine under the given defenses; returns what the oracle found.
pub type Run = fn(&MachineProfile, Vec<Box<dyn Defense>>, &Params) -> Result<Vec<Violation>>;

/// A staged scenario: its name, what it stages, and the run.
pub struct Scenario {
    pub name: &'static str,
    pub what: &'static str,
    pub run: Run,
}

/// Every scenario; each needs two CPUs.
pub const ALL: &[Scenario] = &[
    Scenario {
        name: "page-handoff",
        what: "a CPU keeps a kernel alias of a page that becomes task T's on another CPU; T then runs there",
        run: page_handoff,
    },
    Scenario {
        name: "sibling-thread",
        what: "thread T receives a page on one CPU while its sibling thread keeps running on a CPU holding the page's old kernel alias (Dave Hansen's review of XPFO v7 16/16)",
        run: sibling_thread,
    },
    Scenario {
        name: "kmap-two-cpus",
        what: "threads T and S of one process kmap the same page of theirs at once on two CPUs; S unmaps first, T's kunmap on CPU 0 takes the page out of the direct map; S then makes a system call on CPU 1",
        run: kmap_two_cpus,
    },
    Scenario {
        name: "page-cache-read",
        what: "a task reads a file through the page cache (read(): a page brought in, then pages already cached, each copied to its buffer) while a task of another process on the other CPU reads the same file",
        run: page_cache_read,
    },
    Scenario {
        name: "text-poke",
        what: "a task runs on a CPU of every NUMA node; the kernel patches a line of the syscall path's text (a static key) from the first node; every CPU then makes the syscall again",
        run: text_poke,
    },
];

/// A page changes hands between CPUs. Task T runs on CPU 1, where the kernel uses page P as
/// kernel memory (CPU 1's TLB now holds P's direct-map alias, in T's kernel context); P is
/// freed. T moves to CPU 0 and faults P in as a user page (XPFO takes it out of the direct
/// map), then moves back to CPU 1, whose TLB still holds T's context. Whatever the flush
/// policy, CPU 1 must have dropped the alias before T runs there.
pub fn page_handoff(
    machine: &MachineProfile,
    defenses: Vec<Box<dyn Defense>>,
    params: &Params,
) -> Result<Vec<Violation>> {
    let mut k = boot(machine, defenses, params, "page-handoff")?;
    let t = k.spawn("victim", None);
    let other = k.spawn("other", None);
    run_next(&mut k, 1, t);
    let p = stale_kernel_alias(&mut k, 1, 0)?;
    // CPU 1 switches to another task; T moves to CPU 0 and faults P in.
    run_next(&mut k, 1, other);
    run_next(&mut k, 0, t);
    fault_in(&mut k, 0, t, p)?;
    // T goes back to CPU 1.
    k.schedule(0);
    run_next(&mut k, 1, t);
    Ok(k.violations)
}

/// The hole Dave Hansen pointed out in v7's per-task deferral (linux-mm, January 2019;
/// conceded by Khalid Aziz): threads T and S of one process run on CPUs 0 and 1; the kernel
/// used page P on CPU 1 (in S's context, so the alias sits in the process's kernel context
/// there) and freed it; T faults P in on CPU 0. CPU 1 flushes only when a task owing it a
/// flush is switched in there (per-task mask) or at its next switch (global mask), but S
/// just makes a system call and returns to user mode with the alias of its own process's
/// page still usable. The property is about the process's pages, so S must not see it.
pub fn sibling_thread(
    machine: &MachineProfile,
    defenses: Vec<Box<dyn Defense>>,
    params: &Params,
) -> Result<Vec<Violation>> {
    let mut k = boot(machine, defenses, params, "sibling-thread")?;
    let t = k.spawn("victim", None);
    let s = k.spawn_thread(0, t, "sibling");
    run_next(&mut k, 0, t);
    run_next(&mut k, 1, s);
    let p = stale_kernel_alias(&mut k, 1, 0)?;
    fault_in(&mut k, 0, t, p)?;
    let getppid = syscall::lookup(&k.paths, "getppid")
        .ok_or_else(|| Error::new("sibling-thread: getppid is not in the syscall table"))?;
    k.syscall(1, &getppid)?;
    Ok(k.violations)
}

/// A user page kmapped on two CPUs at once: threads T (CPU 0) and S (CPU 1) of one process
/// both read page P of theirs through kmap (e.g. through /proc/self/mem); S's kunmap leaves
/// P mapped (T still holds it), T's takes it out of the direct map. Both CPUs used the
/// alias, so T's kunmap must reach CPU 1 too, whose thread S returns to user mode next.
pub fn kmap_two_cpus(
    machine: &MachineProfile,
    defenses: Vec<Box<dyn Defense>>,
    params: &Params,
) -> Result<Vec<Violation>> {
    let mut k = boot(machine, defenses, params, "kmap-two-cpus")?;
    let t = k.spawn("victim", None);
    let s = k.spawn_thread(0, t, "sibling");
    run_next(&mut k, 0, t);
    run_next(&mut k, 1, s);
    k.anon_fault(0)?;
    let p = *k.mms[k.tasks[t].mm]
        .anon
        .last()
        .ok_or_else(|| Error::new("kmap-two-cpus: the fault mapped no page"))?;
    let read = |k: &mut Kernel, cpu: CpuId| {
        let alias = k.kmap(cpu, p, Access::Read);
        k.touch_kernel(cpu, alias, Access::Read)
            .map(|_| ())
            .map_err(|f| {
                Error::new(format!(
                    "kernel read of kmapped page {} faulted: {f:?}",
                    p.0
                ))
            })
    };
    k.in_kernel(0, 0.0, |k| {
        read(k, 0)?;
        k.in_kernel(1, 0.0, |k| {
            read(k, 1)?;
            k.kunmap(1, p);
            Ok(())
        })?;
        k.kunmap(0, p);
        Ok(())
    })?;
    let getppid = syscall::lookup(&k.paths, "getppid")
        .ok_or_else(|| Error::new("kmap-two-cpus: getppid is not in the syscall table"))?;
    k.syscall(1, &getppid)?;
    Ok(k.violations)
}

/// Two processes read the same file on two CPUs: the first read of each brings a page into
/// the page cache, the others copy cached pages out (the kernel reads page-cache pages, a
/// defense's sensitive memory, then returns to user mode).
pub fn page_cache_read(
    machine: &MachineProfile,
    defenses: Vec<Box<dyn Defense>>,
    params: &Params,
) -> Result<Vec<Violation>> {
    let mut k = boot(machine, defenses, params, "page-cache-read")?;
    let buffer = crate::arch::x86::VirtAddr(crate::kernel::memory::layout::USER_DATA);
    for cpu in [0, 1] {
        let t = k.spawn_on(cpu, "reader", None);
        run_next(&mut k, cpu, t);
    }
    for _ in 0..3 {
        for cpu in [0, 1] {
            k.file_read(
                cpu,
                PageCacheFs::Disk,
                1,
                u32::from(k.page_cache.len() < 2),
                buffer,
            )?;
        }
    }
    Ok(k.violations)
}

/// Kernel text changes under running CPUs: after text_poke() returns, every CPU must
/// execute the new bytes, whichever copy of the text its node maps (kernel/memory/numa.rs checks
/// this as the poke returns), and no mapping may let a write reach any copy (the defenses'
/// own checks at every return to user mode).
pub fn text_poke(
    machine: &MachineProfile,
    defenses: Vec<Box<dyn Defense>>,
    params: &Params,
) -> Result<Vec<Violation>> {
    let mut k = boot(machine, defenses, params, "text-poke")?;
    let getppid = syscall::lookup(&k.paths, "getppid")
        .ok_or_else(|| Error::new("text-poke: getppid is not in the syscall table"))?;
    let mut cpus: Vec<CpuId> = (0..k.mem.nodes())
        .filter_map(|n| (0..k.cpus.len()).find(|&c| k.cpus[c].mmu.node() == n))
        .collect();
    if cpus.len() < 2 {
        cpus = vec![0, 1];
    }
    for &cpu in &cpus {
        let t = k.spawn_on(cpu, "runner", None);
        run_next(&mut k, cpu, t);
        k.syscall(cpu, &getppid)?;
    }
    let first_line = k.paths.get(getppid.path).text[0].1[0];
    let line =
        crate::arch::x86::VirtAddr(crate::kernel::memory::layout::KERNEL_TEXT + first_line * 64);
    k.text_poke(cpus[0], line)?;
    for &cpu in &cpus {
        k.syscall(cpu, &getppid)?;
    }
    Ok(k.violations)
}

fn boot(
    machine: &MachineProfile,
    defenses: Vec<Box<dyn Defense>>,
    params: &Params,
    name: &str,
) -> Result<Kernel> {
    if machine.threads() < 2 {
        return Err(Error::new(format!(
            "{}: the {name} scenario needs two CPUs",
            machine.name
        )));
    }
    Ok(Kernel::boot_with(
        machine.clone(),
        defenses,
        params,
        OracleMode::Every,
    ))
}

/// A kernel page P that the kernel on `on` writes (an interrupt in the running task's
/// context, so defenses see the kernel entry) and frees; P is then the next page handed out
/// on CPU `to`. P's direct-map region is split to 4 KiB first, so its alias is a TLB entry
/// of its own.
fn stale_kernel_alias(k: &mut Kernel, on: CpuId, to: CpuId) -> Result<Pfn> {
    let p = k.alloc_page(on, Gfp::Kernel, None);
    let neighbour = Pfn(p.0 ^ 1);
    k.set_direct_map_entry(on, neighbour, false);
    k.set_direct_map_entry(on, neighbour, true);
    k.flush_tlb_kernel_range(on, k.direct_map_addr(neighbour), tlbflush::FLUSH_ALL);
    k.in_kernel(on, 0.0, |k| {
        k.touch(on, k.direct_map_addr(p), Access::Write)
            .map(|_| ())
            .map_err(|f| Error::new(format!("kernel write to page {} faulted: {f:?}", p.0)))
    })?;
    k.free_page(on, p);
    k.cpus[on].pcp.retain(|&f| f != p);
    // Next out on `to` for a user allocation (from the user list where the allocator
    // keeps one: BootConfig::sensitive_freelists).
    if k.config.sensitive_freelists {
        k.cpus[to].pcp_sensitive.push(p);
    } else {
        k.cpus[to].pcp.push(p);
    }
    Ok(p)
}

/// Task `t`, running on `cpu`, takes an anonymous fault that must be served with page `p`.
fn fault_in(k: &mut Kernel, cpu: CpuId, t: TaskId, p: Pfn) -> Result<()> {
    k.anon_fault(cpu)?;
    if k.mms[k.tasks[t].mm].anon.last() != Some(&p) {
        return Err(Error::new("the fault did not get the handed-over page"));
    }
    Ok(())
}

/// Makes `cpu` switch to `task` (taken off any run queue) and return to user mode.
fn run_next(k: &mut Kernel, cpu: CpuId, task: TaskId) {
    for q in k.cpus.iter_mut().map(|c| &mut c.rq) {
        q.retain(|&x| x != task);
    }
    k.preempt(cpu);
    k.cpus[cpu].rq.clear();
    k.cpus[cpu].rq.push_back(task);
    k.schedule(cpu);
    k.enter_user(cpu);
}
