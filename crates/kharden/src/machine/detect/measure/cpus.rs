//! Between CPUs and on one: atomic increments, cache-line transfers between pinned threads,
//! and the affinity calls they need.

use super::{median, now_ns};
use crate::machine::detect::topology::read_sysfs;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) fn atomic_increment() -> Option<f64> {
    let x = AtomicU64::new(0);
    let mut batches = vec![];
    for _ in 0..7 {
        let t = Instant::now();
        for _ in 0..5_000 {
            x.fetch_add(1, Ordering::SeqCst);
        }
        batches.push(now_ns(t) / 5_000.0);
    }
    black_box(x.load(Ordering::Relaxed));
    median(batches)
}

/// (package, core) of a CPU, from sysfs.
fn cpu_place(cpu: usize) -> Option<(String, String)> {
    let read = |f: &str| {
        read_sysfs(&format!("/sys/devices/system/cpu/cpu{cpu}/topology/{f}"))
            .map(|v| v.trim().to_string())
    };
    Some((read("physical_package_id")?, read("core_id")?))
}

/// Line transfers from the first allowed CPU to the first CPU at each distance (an SMT
/// sibling, another core of the package, another package), where the host has one.
pub(crate) fn line_transfers() -> [Option<(f64, usize, usize)>; 3] {
    let cpus = online_allowed_cpus();
    let mut out = [None; 3];
    let Some((&a, others)) = cpus.split_first() else {
        return out;
    };
    let Some(home) = cpu_place(a) else { return out };
    for (i, slot) in out.iter_mut().enumerate() {
        let at_distance = |c: &usize| {
            cpu_place(*c).is_some_and(|(pkg, core)| match i {
                0 => pkg == home.0 && core == home.1,
                1 => pkg == home.0 && core != home.1,
                _ => pkg != home.0,
            })
        };
        if let Some(&b) = others.iter().find(|c| at_distance(c)) {
            *slot = line_transfer(a, b).map(|ns| (ns, a, b));
        }
    }
    restore_affinity(&cpus);
    out
}

/// One modified cache line moved from CPU `a` to CPU `b`: two pinned threads take turns
/// incrementing one counter, each waiting for the other's write (the ping-pong of
/// github.com/nviennot/core-to-core-latency, whose figures the library profiles cite).
/// Half a round trip, median of 5 batches of 2000 round trips, in ns.
fn line_transfer(a: usize, b: usize) -> Option<f64> {
    const ROUNDS: u64 = 2_000;
    const BATCHES: usize = 5;
    let counter = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (c2, s2) = (counter.clone(), stop.clone());
    // The helper answers every odd value with the next even one.
    let helper = std::thread::spawn(move || {
        if !pin(b) {
            s2.store(true, Ordering::Release);
            return;
        }
        let mut next = 1;
        while next < 2 * ROUNDS * BATCHES as u64 && !s2.load(Ordering::Relaxed) {
            if c2.load(Ordering::Acquire) == next {
                c2.store(next + 1, Ordering::Release);
                next += 2;
            } else {
                std::hint::spin_loop();
            }
        }
    });
    let result = (|| {
        if !pin(a) {
            return None;
        }
        let start = Instant::now();
        let mut batches = vec![];
        let mut v = 0;
        for _ in 0..BATCHES {
            let t = Instant::now();
            for _ in 0..ROUNDS {
                counter.store(v + 1, Ordering::Release);
                let mut spins = 0u32;
                while counter.load(Ordering::Acquire) != v + 2 {
                    spins = spins.wrapping_add(1);
                    // Reading the clock on every spin would slow the loop it times.
                    if spins % 4096 == 0
                        && (stop.load(Ordering::Relaxed)
                            || start.elapsed() > Duration::from_secs(1))
                    {
                        return None;
                    }
                    std::hint::spin_loop();
                }
                v += 2;
            }
            batches.push(now_ns(t) / (2 * ROUNDS) as f64);
        }
        median(batches)
    })();
    stop.store(true, Ordering::Release);
    let _ = helper.join();
    result
}

pub(crate) fn online_allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 = this thread; size matches the set.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0
    {
        return vec![];
    }
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

pub(crate) fn pin(cpu: usize) -> bool {
    // SAFETY: as in online_allowed_cpus.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu, &mut set) };
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 }
}

pub(crate) fn restore_affinity(cpus: &[usize]) {
    // SAFETY: as in online_allowed_cpus.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
}
