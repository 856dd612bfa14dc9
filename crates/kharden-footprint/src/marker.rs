//! Window markers for an emulator watching the driver (scripts/kernel_memtrace/): a guest has
//! no clock an emulator plugin can read, so each window's start and end is a load the plugin
//! can recognise. It is a one-byte load with a redundant DS prefix (0x3e), which compilers do
//! not emit, from an address that names the window: `BASE + 64 * slot`, slot 0 for "no
//! window", slot `1 + scenario * SCENARIO_SLOTS + window` for a window's start, the slot
//! `OTHERS` further for the window's other path (what the driver's children and threads run
//! meanwhile, which they mark themselves on whichever vCPU they run), and the slot after the
//! last window's for each operation of a loop. The plugin charges every kernel memory access
//! of that vCPU to the window until the next marker, and counts per line the operations that
//! touched it.
//!
//! A load from byte 1 of a window's slot (OPEN_AND_TICK) opens the window and marks an
//! operation of it at once: a single-stepped child runs one instruction per operation.
//!
//! A marker's first load of a page faults (the zero page is mapped); the plugin charges that
//! fault to no window, so a forked child, which does not inherit the mapped pages, can mark.
//!
//! Off unless `KHARDEN_WINDOW_MARKERS` holds the scenario's number; x86-64 only.

use crate::shared::SharedWord;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Where the marker region starts (user space, far from anything the loader maps).
pub const BASE: usize = 0x3e00_0000_0000;
/// Windows one scenario run can mark: the first half its own, the second the others'.
pub const SCENARIO_SLOTS: usize = 1 << 16;
const OTHERS: usize = SCENARIO_SLOTS / 2;
/// Scenarios one guest run can mark.
const SCENARIOS: usize = 32;
const SLOT_BYTES: usize = 64;
/// The slot a loop's operation marks.
const TICK_SLOT: usize = 1 + SCENARIOS * SCENARIO_SLOTS;
/// Bytes of the marker region from BASE.
pub const REGION_BYTES: usize = SLOT_BYTES * (TICK_SLOT + 1);

/// Byte offset within a window's slot whose load also ticks an operation of the window.
const OPEN_AND_TICK: usize = 1;

/// The slot of the window open in this process (0: none): what an operation re-marks, and what
/// a child or thread marks the other path of.
static OPEN: AtomicUsize = AtomicUsize::new(0);

/// OPEN again, in a page shared with forked children: one that marks the parent's windows
/// long after the fork (a single-stepped tracee) reads the window open now. The others read
/// their copy of OPEN, the window open at the fork: a child's exit belongs to the window that
/// forked it, even when it runs after the parent's next window opened (with one shared word
/// the exits of a fork batch were split between the fork and wait4 windows, counted twice).
static SHARED_OPEN: std::sync::OnceLock<&'static SharedWord> = std::sync::OnceLock::new();

#[derive(Clone, Copy)]
pub struct Markers {
    scenario: usize,
}

impl Markers {
    /// Markers for the scenario `KHARDEN_WINDOW_MARKERS` names, or None when it is unset.
    pub fn from_env() -> std::io::Result<Option<Markers>> {
        let Ok(text) = std::env::var("KHARDEN_WINDOW_MARKERS") else {
            return Ok(None);
        };
        let scenario: usize = text
            .trim()
            .parse()
            .ok()
            .filter(|&s| s < SCENARIOS)
            .ok_or_else(|| {
                std::io::Error::other(format!(
                    "KHARDEN_WINDOW_MARKERS: expected a scenario number below {SCENARIOS}, got '{text}'"
                ))
            })?;
        if !cfg!(target_arch = "x86_64") {
            return Err(std::io::Error::other(
                "KHARDEN_WINDOW_MARKERS: window markers exist on x86-64 only",
            ));
        }
        // SAFETY: a fresh private read-only anonymous mapping at an address nothing else uses
        // (MAP_FIXED_NOREPLACE fails rather than replace a mapping).
        let got = unsafe {
            libc::mmap(
                BASE as *mut libc::c_void,
                REGION_BYTES,
                libc::PROT_READ,
                libc::MAP_PRIVATE
                    | libc::MAP_ANONYMOUS
                    | libc::MAP_NORESERVE
                    | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if got != BASE as *mut libc::c_void {
            return Err(std::io::Error::other(format!(
                "KHARDEN_WINDOW_MARKERS: cannot map the marker region at {BASE:#x}: {}",
                std::io::Error::last_os_error()
            )));
        }
        let shared = crate::shared::SharedWord::new().map_err(|e| {
            std::io::Error::other(format!(
                "KHARDEN_WINDOW_MARKERS: cannot map a shared page for the open window: {e}"
            ))
        })?;
        let _ = SHARED_OPEN.set(Box::leak(Box::new(shared)));
        Ok(Some(Markers { scenario }))
    }

    fn set_open(slot: usize) {
        OPEN.store(slot, Ordering::Relaxed);
        if let Some(shared) = SHARED_OPEN.get() {
            shared.store(slot as u64, Ordering::Relaxed);
        }
    }

    /// Marks the start of window number `window` of this scenario run.
    pub fn start(&self, window: usize) {
        let slot = 1 + self.scenario * SCENARIO_SLOTS + window % OTHERS;
        Self::set_open(slot);
        mark(slot);
    }

    /// Marks the start of the next operation of the current window's loop, naming the window
    /// again: a child or thread may have marked its own on this vCPU since.
    pub fn op(&self) {
        mark(OPEN.load(Ordering::Relaxed));
        mark(TICK_SLOT);
    }

    /// In a child or thread of the driver: marks the start of one operation of the open
    /// window's other path (no window: nothing is charged until the next marker).
    pub fn others_op(&self) {
        let (others, tick) = self.others_op_slots();
        mark(others);
        mark(tick);
    }

    /// The addresses others_op() loads, for a program of another image that marks them
    /// itself (exec_chain.c).
    pub fn others_op_addresses(&self) -> [usize; 2] {
        let (others, tick) = self.others_op_slots();
        [others, tick].map(|slot| BASE + slot * SLOT_BYTES)
    }

    fn others_op_slots(&self) -> (usize, usize) {
        (others_slot(OPEN.load(Ordering::Relaxed)), TICK_SLOT)
    }

    /// Marks the end of the current window.
    pub fn end(&self) {
        Self::set_open(0);
        mark(0);
    }

    /// In a forked child that its tracer single-steps: marks operations of the other path
    /// of whichever window the parent has open, one per instruction, forever. Each turn
    /// reads the window and then runs 256 markers, so about 2% of the steps (the turn's own
    /// instructions) are left to the window's own path.
    pub fn stepped_others_ops(&self) -> ! {
        let shared = SHARED_OPEN.get().expect("from_env mapped the shared page");
        loop {
            let addr = stepped_marker(shared.load(Ordering::Relaxed) as usize);
            #[cfg(target_arch = "x86_64")]
            // SAFETY: addr lies in the readable region from_env mapped (inherited at fork).
            unsafe {
                std::arch::asm!(".rept 256", ".byte 0x3e", "mov {0}, byte ptr [{1}]", ".endr",
                    out(reg_byte) _, in(reg) addr, options(nostack, readonly, preserves_flags));
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = addr;
        }
    }
}

/// What a loop inside a window marks each operation with (nothing without markers): a copy,
/// so the loop's closure need not borrow the driver.
#[derive(Clone, Copy)]
pub struct Ticker(pub Option<Markers>);

/// A loop whose operations are not marked (its touches do not each run the path).
pub const NO_TICKS: Ticker = Ticker(None);

impl Ticker {
    pub fn op(self) {
        if let Some(m) = self.0 {
            m.op();
        }
    }

    /// An operation of the other path, marked by the child or thread that runs it.
    pub fn others_op(self) {
        if let Some(m) = self.0 {
            m.others_op();
        }
    }

    /// A single-stepped child's loop: Markers::stepped_others_ops, or a plain spin.
    pub fn stepped_others_ops(self) -> ! {
        match self.0 {
            Some(m) => m.stepped_others_ops(),
            None => loop {
                std::hint::spin_loop();
            },
        }
    }
}

/// The slot of the other path of the window in slot `open` (0, no window, stays 0).
fn others_slot(open: usize) -> usize {
    if open == 0 {
        0
    } else {
        open + OTHERS
    }
}

/// What a single-stepped child loads to mark one operation of the other path of the window
/// in slot `open`: byte OPEN_AND_TICK of that path's slot.
fn stepped_marker(open: usize) -> usize {
    BASE + others_slot(open) * SLOT_BYTES + OPEN_AND_TICK
}

fn mark(slot: usize) {
    let addr = (BASE + slot * SLOT_BYTES) as *const u8;
    // SAFETY: addr lies in the readable region from_env mapped.
    unsafe {
        #[cfg(target_arch = "x86_64")]
        std::arch::asm!(".byte 0x3e", "mov {0}, byte ptr [{1}]", out(reg_byte) _, in(reg) addr,
            options(nostack, readonly, preserves_flags));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// memtrace.c reads byte 1 of a window's slot as the window and an operation of it, and
    /// slot 0 (no window) as nothing: the stepped child's loads are those, at the address
    /// others_op() marks the same window's other path with.
    #[test]
    fn a_stepped_marker_is_byte_one_of_the_other_paths_slot() {
        let window = 1 + 3 * SCENARIO_SLOTS + 7;
        let addr = stepped_marker(window);
        assert_eq!((addr - BASE) % SLOT_BYTES, 1);
        assert_eq!((addr - BASE) / SLOT_BYTES, window + OTHERS);
        assert!((addr - BASE) / SLOT_BYTES < TICK_SLOT);
        assert_eq!(stepped_marker(0), BASE + 1);
    }
}
