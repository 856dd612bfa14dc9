//! Cache, DRAM (local and remote node) and STLB-hit latencies.

use super::chase::{chase, chase_with};
use super::cpus::{online_allowed_cpus, pin, restore_affinity};
use super::median;
use super::now_ns;
use crate::host_mem::Map;
use crate::machine::detect::facts::HostFacts;
use std::time::Instant;

/// Load-to-use latency of a random pointer chase over `bytes` (one slot per 64-byte line,
/// on huge pages where the kernel grants them so TLB misses stay out of the number).
pub(crate) fn chase_latency(bytes: usize, steps: usize) -> Option<f64> {
    let lines = (bytes / 64).max(2);
    let len = (lines * 64 + (2 << 20)).next_multiple_of(2 << 20);
    let map = Map::new(len, true)?;
    chase(&map, lines, |i| i * 64, steps)
}

/// DRAM load-to-use latency: a cycle through one line in each of 16384 pages (64 MiB of
/// huge pages, so few TLB misses), pushed out of the caches by writing `evict_bytes`
/// elsewhere, then timed cold for 10000 loads.
pub(crate) fn dram_latency(evict_bytes: usize, node: Option<u32>) -> Option<f64> {
    const PAGES: usize = 16384;
    let map = Map::new(PAGES * 4096, true)?;
    if let Some(n) = node {
        bind_to_node(&map, n)?;
    }
    let evict = Map::new(evict_bytes, true)?;
    chase_with(
        &map,
        PAGES,
        |i| i * 4096 + (i % 64) * 64,
        10_000,
        false,
        Some(&evict),
    )
}

/// Page clears, cold and hot, in ns per 4 KiB page: `PAGES` distinct pages cleared once
/// each after writing `evict_bytes` elsewhere (their lines in no cache), then one page
/// cleared as often (in L1). The difference is what a cold clear waits for DRAM; 64 lines
/// times the DRAM latency over it is the lines the store stream keeps in flight.
pub(crate) fn page_clears(evict_bytes: usize) -> Option<(f64, f64)> {
    const PAGES: usize = 4096;
    let map = Map::new(PAGES * 4096, false)?;
    let evict = Map::new(evict_bytes, true)?;
    // SAFETY: writes within our own mappings (faulting every page in first).
    unsafe {
        std::ptr::write_bytes(map.ptr, 1, map.len);
        std::ptr::write_bytes(evict.ptr, 0x5a, evict.len);
    }
    // a stride coprime with PAGES: every page once, no two neighbours in a row (so the
    // prefetchers see one page's stream at a time, as a page fault's clear does)
    let page = |i: usize| map.ptr.wrapping_add((i * 1021 % PAGES) * 4096);
    let t = Instant::now();
    for i in 0..PAGES {
        clear_page(page(i));
    }
    let cold = now_ns(t) / PAGES as f64;
    let t = Instant::now();
    for _ in 0..PAGES {
        clear_page(map.ptr);
    }
    let hot = now_ns(t) / PAGES as f64;
    Some((cold, hot))
}

/// Zeroes the 4 KiB at `p` as Linux's clear_page_erms does (rep stosb) where the
/// architecture has it.
fn clear_page(p: *mut u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `p` is the start of a mapped, writable 4 KiB page of ours.
    unsafe {
        std::arch::asm!("rep stosb", inout("rdi") p => _, inout("rcx") 4096usize => _, in("al") 0u8, options(nostack));
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as above.
    unsafe {
        std::ptr::write_bytes(p, 0, 4096);
    }
    std::hint::black_box(p);
}

/// STLB hit penalty: a chase over one line in each of many 4 KiB pages (more than the first
/// level DTLB holds, fewer than the second level) minus the same over a few pages. Lines are
/// staggered across cache sets so both working sets stay in L1D.
pub(crate) fn stlb_hit(f: &HostFacts) -> Option<f64> {
    use crate::machine::profile::{PageSizeName, TlbServes};
    let covers_4k = |a: &crate::machine::profile::TlbArray| {
        a.page_sizes.contains(&PageSizeName::Size4K) && a.serves != TlbServes::Instruction
    };
    let l1 = f
        .tlbs
        .iter()
        .filter(|(a, _)| a.level == 1 && covers_4k(a))
        .map(|(a, _)| a.entries)
        .max()
        .unwrap_or(64);
    let l2 = f
        .tlbs
        .iter()
        .filter(|(a, _)| a.level == 2 && covers_4k(a))
        .map(|(a, _)| a.entries)
        .max()
        .unwrap_or(1024);
    // CPUID of some guests under-reports the second level; then try 4x the first level anyway
    let many = if l2 > 2 * l1 {
        (4 * l1).min(l2 / 2).min(512)
    } else {
        (4 * l1).min(512)
    } as usize;
    if many <= l1 as usize + 16 {
        return None;
    }
    let map = Map::new(many * 4096, false)?;
    let slot = |i: usize| i * 4096 + ((i * 7) % 64) * 64;
    let mut diffs = vec![];
    for _ in 0..3 {
        let a = chase(&map, many, slot, 20_000)?;
        let b = chase(&map, 8, slot, 20_000)?;
        diffs.push(a - b);
    }
    median(diffs)
}

fn bind_to_node(map: &Map, node: u32) -> Option<()> {
    if node >= 64 {
        return None;
    }
    let mask: u64 = 1 << node;
    const MPOL_BIND: libc::c_long = 2;
    // SAFETY: mbind on our own mapping with a one-word node mask.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            map.ptr as libc::c_long,
            map.len as libc::c_long,
            MPOL_BIND,
            &mask as *const u64 as libc::c_long,
            65 as libc::c_long,
            0 as libc::c_long,
        )
    };
    (r == 0).then_some(())
}

pub(crate) fn remote_dram(f: &HostFacts, bytes: usize) -> Option<f64> {
    let cpus = online_allowed_cpus();
    let cpu = *cpus.first()?;
    let here = std::fs::read_dir(format!("/sys/devices/system/cpu/cpu{cpu}"))
        .ok()?
        .filter_map(|e| e.ok())
        .find_map(|e| {
            e.file_name()
                .to_string_lossy()
                .strip_prefix("node")
                .and_then(|n| n.parse::<u32>().ok())
        })?;
    let other = (0..f.nodes).find(|&n| n != here)?;
    if !pin(cpu) {
        return None;
    }
    let v = dram_latency(bytes, Some(other));
    restore_affinity(&cpus);
    v
}
