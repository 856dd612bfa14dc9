//! Pointer chasing over an anonymous mapping: the load-to-use latency probe behind the cache,
//! DRAM and STLB figures.

use super::now_ns;
use std::hint::black_box;
use std::time::Instant;

use crate::host_mem::Map;

/// xorshift64*: a fixed, seeded order so runs are comparable.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Builds a random cycle through `slots` (byte offsets in `map`) and chases it `steps` times;
/// returns ns per load.
pub(crate) fn chase(
    map: &Map,
    n: usize,
    slot: impl Fn(usize) -> usize,
    steps: usize,
) -> Option<f64> {
    chase_with(map, n, slot, steps, true, None)
}

/// As `chase`; without `warm` the cycle is not walked before timing, and `evict` (a second
/// mapping) is written through after the cycle is built, to push it out of every cache.
pub(crate) fn chase_with(
    map: &Map,
    n: usize,
    slot: impl Fn(usize) -> usize,
    steps: usize,
    warm: bool,
    evict: Option<&Map>,
) -> Option<f64> {
    if n < 2 {
        return None;
    }
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for i in (1..order.len()).rev() {
        let j = rng.below(i + 1);
        order.swap(i, j);
    }
    for w in 0..order.len() {
        let from = slot(order[w]);
        let to = slot(order[(w + 1) % order.len()]);
        // SAFETY: both offsets are inside the mapping and 8-byte aligned.
        unsafe {
            std::ptr::write_volatile(map.ptr.add(from) as *mut usize, map.ptr.add(to) as usize)
        };
    }
    let mut p = map.ptr.wrapping_add(slot(order[0])) as *const usize;
    if let Some(e) = evict {
        // SAFETY: writing within the eviction mapping.
        unsafe { std::ptr::write_bytes(e.ptr, 0x5a, e.len) };
    }
    if warm {
        // once around the cycle (bounded)
        p = chase_loop(p, n.min(steps));
    }
    let t = Instant::now();
    p = chase_loop(p, steps);
    let ns = now_ns(t) / steps as f64;
    black_box(p);
    Some(ns)
}

/// `steps` dependent loads starting at `p`. In assembly where we can, so the number does not
/// depend on the optimisation level kharden was built with.
pub(crate) fn chase_loop(mut p: *const usize, steps: usize) -> *const usize {
    if steps == 0 {
        return p;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: every slot on the cycle holds the address of the next slot, so each load reads
    // mapped memory; the loop touches no other state.
    unsafe {
        std::arch::asm!("2:", "mov {p}, qword ptr [{p}]", "dec {n}", "jnz 2b", p = inout(reg) p, n = inout(reg) steps => _, options(nostack, readonly));
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as above.
    unsafe {
        std::arch::asm!("2:", "ldr {p}, [{p}]", "subs {n}, {n}, #1", "b.ne 2b", p = inout(reg) p, n = inout(reg) steps => _, options(nostack, readonly));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    for _ in 0..steps {
        // SAFETY: as above.
        p = unsafe { std::ptr::read_volatile(p) } as *const usize;
    }
    p
}
