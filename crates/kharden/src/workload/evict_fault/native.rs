//! The benchmark of `super` on this host: operations timed one by one, each after a read of
//! every line of an eviction buffer.

use super::Op;
use crate::error::{Error, Result};
use crate::host_mem::Map;
use std::time::Instant;

/// `bytes` of fresh memory (a page at least), on 4 KiB pages as the model's are.
fn map(bytes: usize) -> Result<Map> {
    Map::new(bytes.max(4096), false).ok_or_else(|| {
        Error::new(format!(
            "evict-fault: mmap of {bytes} bytes: {}",
            std::io::Error::last_os_error()
        ))
    })
}

/// Bytes written once before a run: twice the largest LLC of the library's machines, so
/// the free pages the run's faults will get hold no line in any cache, as the model's
/// never-used pages do (a page freed just before would make its clear hit).
const FLUSH_BYTES: usize = 64 << 20;

/// One run of `op`; `i` numbers the runs (the fault stores to page `i` of `region`).
fn once(op: Op, region: &Map, i: usize) -> Result<()> {
    match op {
        // SAFETY: page i of the region, not yet touched: the store faults it in.
        Op::Fault => unsafe { std::ptr::write_volatile(region.ptr.add(i * 4096), 1) },
        Op::Getppid => {
            // SAFETY: a syscall without arguments.
            std::hint::black_box(unsafe { libc::syscall(libc::SYS_getppid) });
        }
        Op::OpenClose => {
            // SAFETY: a NUL-terminated path; the descriptor is closed at once.
            let fd = unsafe { libc::open(c"/dev/zero".as_ptr(), libc::O_RDONLY) };
            if fd < 0 {
                return Err(Error::new(format!(
                    "evict-fault: open /dev/zero: {}",
                    std::io::Error::last_os_error()
                )));
            }
            // SAFETY: our own descriptor.
            unsafe { libc::close(fd) };
        }
    }
    Ok(())
}

/// Each of `times` runs of `op`, in ns, after one untimed run; before each, every line of
/// an `evict_kib` KiB buffer (written once beforehand) is read.
pub fn op_times(op: Op, evict_kib: u64, runs: u32) -> Result<Vec<f64>> {
    let evict = map(evict_kib as usize * 1024)?;
    let region = map((runs as usize + 1) * 4096)?;
    {
        let flush = map(FLUSH_BYTES)?;
        // SAFETY: writes within our own mapping.
        unsafe { std::ptr::write_bytes(flush.ptr, 1, flush.len) };
    }
    // SAFETY: writes within our own mapping (populating the eviction buffer).
    unsafe { std::ptr::write_bytes(evict.ptr, 1, evict.len) };
    let lines = evict_kib as usize * 1024 / 64;
    let mut sum = 0u8;
    let mut times = Vec::with_capacity(runs as usize);
    for i in 0..=runs as usize {
        for l in 0..lines {
            // SAFETY: l * 64 < evict.len.
            sum = sum.wrapping_add(unsafe { std::ptr::read_volatile(evict.ptr.add(l * 64)) });
        }
        let t = Instant::now();
        once(op, &region, i)?;
        let ns = t.elapsed().as_nanos() as f64;
        if i > 0 {
            times.push(ns);
        }
    }
    std::hint::black_box(sum);
    Ok(times)
}
