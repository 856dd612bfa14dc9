use super::{Asi, EPHMAP};
use crate::arch::x86::{paging, VirtAddr};
use crate::defense::{self, registry};
use crate::kernel::memory::layout::USER_DATA;
use crate::kernel::memory::page_alloc::Gfp;
use crate::kernel::paths::syscall;
use crate::kernel::{Kernel, OracleMode};
use crate::machine;
use crate::oracle::scenario;
use crate::params::Params;
use crate::sim::Counter;
use crate::workload::SyscallLoop;

fn boot(machine: &str, defenses: &str) -> Kernel {
    Kernel::boot_with(
        machine::load(machine).unwrap(),
        defense::parse_list(defenses).unwrap(),
        &Params::linux(),
        OracleMode::Every,
    )
}

/// Everything `kharden check` runs: every syscall loop and every staged scenario; the
/// first violation found.
fn first_violation(machine: &str, defenses: &str) -> Option<String> {
    let m = machine::load(machine).unwrap();
    for name in syscall::names() {
        let mut k = boot(machine, defenses);
        SyscallLoop::new(name, 20).unwrap().run(&mut k).unwrap();
        if let Some(v) = k.violations.first() {
            return Some(format!("{name}: {}", v.what));
        }
    }
    for s in scenario::ALL {
        let found = (s.run)(&m, defense::parse_list(defenses).unwrap(), &Params::linux()).unwrap();
        if let Some(v) = found.first() {
            return Some(format!("{}: {}", s.name, v.what));
        }
    }
    None
}

fn owned(k: &Kernel, name: &str) -> u64 {
    k.total_stats().owned(registry::counter(name))
}

/// A task of its own on `cpu`, back in user mode.
fn user_task(k: &mut Kernel, cpu: usize) -> usize {
    let t = k.spawn_on(cpu, "t", None);
    k.switch_to(cpu, t);
    k.enter_user(cpu);
    t
}

#[test]
fn the_published_variants_keep_sensitive_memory_unreachable_with_and_without_pcid() {
    for m in ["haswell-i7-4770", "nehalem-i7-920"] {
        for d in [
            "asi:rfcv2",
            "asi:prototype",
            "asi:prototype-noibpb",
            "asi:pcid",
        ] {
            assert_eq!(first_violation(m, d), None, "{d} on {m}");
        }
    }
}

#[test]
fn an_enter_that_keeps_the_full_tables_translations_is_caught() {
    let v = first_violation("haswell-i7-4770", "asi:broken-enter-keeps-tlb").expect("caught");
    assert!(
        v.contains("TLB entry") && v.contains("sensitive page"),
        "{v}"
    );
}

#[test]
fn a_page_cache_page_left_in_the_ephmap_is_caught() {
    let v = first_violation("haswell-i7-4770", "asi:broken-ephmap-leak").expect("caught");
    assert!(
        v.starts_with("page-cache-read") && v.contains("restricted tables map sensitive page"),
        "{v}"
    );
    let v = first_violation("haswell-i7-4770", "asi:broken-ephmap-no-invlpg").expect("caught");
    assert!(
        v.starts_with("page-cache-read") && v.contains("TLB entry"),
        "{v}"
    );
}

#[test]
fn pti_is_off_when_asi_is_on() {
    let e = defense::parse_list("asi:prototype,pti:linux")
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("asi turns pti off"), "{e}");
    assert!(defense::parse_list("asi:prototype,nopcid").is_ok());
}

/// A syscall that touches nothing sensitive runs on the restricted tables from entry to
/// exit: no CR3 write, no flush, no exit.
#[test]
fn a_syscall_touching_nothing_sensitive_never_leaves_the_restricted_tables() {
    let mut k = boot("haswell-i7-4770", "asi:prototype");
    user_task(&mut k, 0);
    let getppid = syscall::lookup(&k.paths, "getppid").unwrap();
    let cr3 = |k: &Kernel| {
        let s = k.total_stats();
        s.counter(Counter::Cr3WriteFlush) + s.counter(Counter::Cr3WriteNoflush)
    };
    let before = cr3(&k);
    for _ in 0..10 {
        k.syscall(0, &getppid).unwrap();
    }
    assert_eq!(cr3(&k), before);
    for c in [
        super::EXITS_PAGE_CACHE,
        super::EXITS_USER_PAGE,
        super::EXITS_OTHER,
        super::EXITS_TLB_FLUSH,
    ] {
        assert_eq!(owned(&k, c), 0, "{c}");
    }
}

/// RFC v2 leaves the restricted tables at every page-cache copy (the copy faults, asi_exit,
/// the copy is retried) and enters them again before the return, each CR3 write flushing
/// its PCID; the prototype copies through the ephmap and stays restricted.
#[test]
fn page_cache_reads_exit_without_the_ephmap_and_stay_restricted_with_it() {
    let buffer = VirtAddr(USER_DATA);
    let reads = 5;
    let run = |d: &str| {
        let mut k = boot("haswell-i7-4770", d);
        user_task(&mut k, 0);
        k.file_read(
            0,
            crate::kernel::paths::process::PageCacheFs::Disk,
            1,
            1,
            buffer,
        )
        .unwrap();
        let flushes = k.total_stats().counter(Counter::Cr3WriteFlush);
        let enters = owned(&k, "asi_enters");
        for _ in 0..reads {
            k.file_read(
                0,
                crate::kernel::paths::process::PageCacheFs::Disk,
                1,
                0,
                buffer,
            )
            .unwrap();
        }
        assert!(k.violations.is_empty(), "{d}: {:?}", k.violations);
        let flushes = k.total_stats().counter(Counter::Cr3WriteFlush) - flushes;
        (k, flushes, enters)
    };
    let (k, flushes, enters0) = run("asi:rfcv2");
    assert_eq!(owned(&k, super::EXITS_PAGE_CACHE), reads + 1);
    assert_eq!(owned(&k, "asi_enters") - enters0, reads);
    assert_eq!(
        flushes,
        2 * reads,
        "an exit and an enter per read, each flushing"
    );
    assert_eq!(
        owned(&k, "asi_control_flushes"),
        reads + 1,
        "IBPB + RSB at each exit"
    );
    let (k, flushes, _) = run("asi:prototype");
    assert_eq!(owned(&k, super::EXITS_PAGE_CACHE), 0);
    assert_eq!(owned(&k, "asi_ephmap_copies"), reads + 1);
    assert_eq!(flushes, 0);
    // The ephmap slot is empty again and its translation gone.
    let mm = k.current_mm(0);
    let asi_root = k.cpus[0].mmu.root();
    assert!(paging::translate(&k.mem, asi_root, Asi::ephmap_slot(0)).is_none());
    assert!(k.cpus[0].mmu.tlb_entries().all(|e| e.va().0 != EPHMAP));
    assert_ne!(
        asi_root, k.mms[mm].root,
        "user mode runs on the restricted tables"
    );
}

/// The 2022 design's transitions keep both PCIDs' entries: the same reads write CR3 with
/// the no-flush bit.
#[test]
fn no_flush_transitions_set_the_no_flush_bit_and_flush_nothing() {
    let mut k = boot("haswell-i7-4770", "asi:pcid");
    user_task(&mut k, 0);
    // Fault in anonymous pages: each zeroing leaves the restricted tables.
    k.anon_fault(0).unwrap();
    let s = k.total_stats();
    let (flush, noflush) = (
        s.counter(Counter::Cr3WriteFlush),
        s.counter(Counter::Cr3WriteNoflush),
    );
    for _ in 0..4 {
        k.anon_fault(0).unwrap();
    }
    let s = k.total_stats();
    assert_eq!(owned(&k, super::EXITS_USER_PAGE), 5);
    assert_eq!(s.counter(Counter::Cr3WriteFlush), flush);
    assert_eq!(s.counter(Counter::Cr3WriteNoflush) - noflush, 8);
    assert!(k.violations.is_empty(), "{:?}", k.violations);
}

/// The prototype leaves at every context switch, and an L1D flush follows the kernel's
/// sensitive phase only on a CPU affected by L1TF.
#[test]
fn context_switches_exit_and_l1d_flushes_follow_l1tf() {
    for (l1tf, flushes) in [(false, 0), (true, 2)] {
        let mut m = machine::load("haswell-i7-4770").unwrap();
        m.cpu.features.l1tf = l1tf;
        let mut k = Kernel::boot_with(
            m,
            defense::parse_list("asi:prototype").unwrap(),
            &Params::linux(),
            OracleMode::Every,
        );
        let a = k.spawn("a", None);
        let b = k.spawn("b", None);
        k.cpus[0].rq.push_back(a);
        k.schedule(0);
        k.enter_user(0);
        let l1d = owned(&k, "asi_l1d_flushes");
        k.preempt(0);
        k.cpus[0].rq.retain(|&t| t != a);
        k.cpus[0].rq.push_back(b);
        k.schedule(0);
        k.enter_user(0);
        k.anon_fault(0).unwrap();
        assert_eq!(owned(&k, super::EXITS_CONTEXT_SWITCH), 1);
        assert_eq!(owned(&k, "asi_l1d_flushes") - l1d, flushes, "l1tf {l1tf}");
    }
}

/// What the restricted tables map: the kernel heap, the image and kernel allocations, and
/// no user or page-cache frame; a kernel frame reused for user memory leaves them.
#[test]
fn the_restricted_tables_leave_out_exactly_the_sensitive_frames() {
    let mut k = boot("haswell-i7-4770", "asi:prototype");
    let t = user_task(&mut k, 0);
    let mm = k.tasks[t].mm;
    let restricted = k.cpus[0].mmu.root();
    let maps = |k: &Kernel, va: VirtAddr| paging::translate(&k.mem, restricted, va).is_some();
    let heap = crate::kernel::memory::layout::direct_map(k.kernel_heap[0]);
    assert!(maps(&k, heap), "the kernel heap");
    assert!(maps(&k, k.tasks[t].task_struct), "the task_struct");
    assert!(
        maps(&k, VirtAddr(crate::kernel::memory::layout::KERNEL_TEXT)),
        "kernel text"
    );
    k.anon_fault(0).unwrap();
    let user = *k.mms[mm].anon.last().unwrap();
    assert!(!maps(&k, k.direct_map_addr(user)), "a user page");
    assert!(paging::translate(&k.mem, k.mms[mm].root, k.direct_map_addr(user)).is_some());
    let pc = k.alloc_page(0, Gfp::PageCache, None);
    assert!(!maps(&k, k.direct_map_addr(pc)), "a page-cache page");
}
