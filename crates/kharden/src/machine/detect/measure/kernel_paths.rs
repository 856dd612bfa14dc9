//! Costs of kernel paths user space can drive: the syscall round trip, a minor fault, and the
//! cross-CPU TLB shootdown behind mprotect.

use super::cpus::{online_allowed_cpus, pin, restore_affinity};
use super::{measure_diff, median, now_ns, percentile};
use crate::host_mem::Map;
use crate::machine::detect::facts::HostFacts;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A syscall number with no handler: do_syscall_64 returns -ENOSYS after the entry code,
/// which is all the call runs (the footprints' `syscall-entry-exit` times the same).
pub(crate) const EMPTY_SYSCALL: libc::c_long = 1000;

/// Round trip of syscall `nr` (getppid, or the empty one), which takes no arguments: the
/// 10th percentile of 41 batches' time per call, the statistic the footprints' native
/// latencies take (kharden-footprint's latency.rs: the low percentile of windows of at most
/// 1000 calls), so a detected profile's round trip is what the recorded paths' work was
/// derived against.
pub(crate) fn syscall_roundtrip(nr: libc::c_long) -> Option<f64> {
    let mut batches = vec![];
    for _ in 0..41 {
        let t = Instant::now();
        for _ in 0..400 {
            // SAFETY: getppid takes no arguments and cannot fail; EMPTY_SYSCALL has no handler.
            black_box(unsafe { libc::syscall(nr) });
        }
        batches.push(now_ns(t) / 400.0);
    }
    percentile(batches, 0.1)
}

pub(crate) fn minor_fault() -> Option<f64> {
    const PAGES: usize = 128;
    let mut per = vec![];
    for _ in 0..3 {
        let map = Map::new(PAGES * 4096, false)?;
        let t = Instant::now();
        for i in 0..PAGES {
            // SAFETY: within the mapping.
            unsafe { std::ptr::write_volatile(map.ptr.add(i * 4096), 1u8) };
        }
        per.push(now_ns(t) / PAGES as f64);
    }
    median(per)
}

/// mprotect toggles of one page, per change, in ns.
fn toggle(page: *mut u8, n: usize) -> Option<f64> {
    let t = Instant::now();
    for _ in 0..n {
        for prot in [libc::PROT_READ, libc::PROT_READ | libc::PROT_WRITE] {
            // SAFETY: page is a page of our own mapping.
            if unsafe { libc::mprotect(page as *mut libc::c_void, 4096, prot) } != 0 {
                return None;
            }
        }
    }
    Some(now_ns(t) / (2 * n) as f64)
}

/// Cross-CPU shootdown: the cost of an mprotect downgrade/upgrade on this CPU while another
/// thread of the process reads the page on another CPU, minus the same with that thread idle.
pub(crate) fn shootdown(_f: &HostFacts) -> (Option<f64>, Option<String>) {
    let cpus = online_allowed_cpus();
    if cpus.len() < 2 {
        return (
            None,
            Some("fewer than two CPUs allowed to this process".into()),
        );
    }
    let (a, b) = (cpus[0], cpus[cpus.len() - 1]);
    if !pin(a) {
        return (None, Some("sched_setaffinity refused".into()));
    }
    let result = (|| {
        let map = Map::new(4096, false)?;
        // SAFETY: within the mapping.
        unsafe { std::ptr::write_volatile(map.ptr, 1u8) };
        let mut base = vec![];
        for _ in 0..3 {
            base.push(toggle(map.ptr, 100)?);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicBool::new(false));
        let addr = map.ptr as usize;
        let (s2, st2) = (stop.clone(), started.clone());
        let helper = std::thread::spawn(move || {
            let pinned = pin(b);
            st2.store(true, Ordering::Release);
            let t = Instant::now();
            while !s2.load(Ordering::Acquire) && t.elapsed() < Duration::from_millis(300) {
                // SAFETY: the page stays mapped (readable) until the main thread joins us.
                black_box(unsafe { std::ptr::read_volatile(addr as *const u8) });
            }
            pinned
        });
        let t = Instant::now();
        while !started.load(Ordering::Acquire) && t.elapsed() < Duration::from_millis(100) {
            std::hint::spin_loop();
        }
        let mut remote = vec![];
        for _ in 0..3 {
            if let Some(v) = toggle(map.ptr, 100) {
                remote.push(v);
            }
        }
        stop.store(true, Ordering::Release);
        let pinned = helper.join().unwrap_or(false);
        if !pinned {
            return None;
        }
        Some(measure_diff(median(remote)?, median(base)?))
    })();
    restore_affinity(&cpus);
    match result {
        Some(Some(v)) => (
            Some(v),
            Some(format!(
                "CPU {a} changes protection while CPU {b} reads the page"
            )),
        ),
        Some(None) => (
            None,
            Some("no measurable difference over the single-CPU case".into()),
        ),
        None => (None, Some("mapping, mprotect or pinning failed".into())),
    }
}
