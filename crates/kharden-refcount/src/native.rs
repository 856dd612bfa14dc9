//! The real implementations compiled for this host, behind a safe interface.

use crate::ffi;
use crate::{Impl, Variant};
use std::ffi::CStr;
use std::sync::atomic::{AtomicI32, Ordering};

/// One implementation available on this host.
#[derive(Clone, Copy)]
pub struct Native {
    raw: &'static ffi::rc_impl,
    pub imp: Impl,
    pub variant: Variant,
}

// The C table is immutable static data and every operation is safe to call from any thread
// (counters are only touched atomically).
unsafe impl Send for Native {}
unsafe impl Sync for Native {}

/// What an implementation reports (the kernel's WARN / refcount_error_report cases).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Warning {
    Overflow = 0,
    IncrementOnZero = 1,
    Underflow = 2,
    DecrementHitZero = 3,
    Unexpected = 4,
}

/// A refcount_t: one counter an implementation operates on. Shared between threads by
/// reference (the C side does all accesses atomically).
#[repr(C)]
pub struct Counter(AtomicI32);

impl Counter {
    pub fn new(v: i32) -> Counter {
        Counter(AtomicI32::new(v))
    }
    fn ptr(&self) -> *mut ffi::rc_t {
        self.0.as_ptr() as *mut ffi::rc_t
    }
    pub fn value(&self) -> i32 {
        self.0.load(Ordering::SeqCst)
    }
}

impl Native {
    pub fn name(&self) -> &'static str {
        unsafe { CStr::from_ptr(self.raw.name) }
            .to_str()
            .unwrap_or("?")
    }
    /// The value a saturated counter holds (None for atomic_t, which has no saturation).
    pub fn saturated(&self) -> Option<i32> {
        (self.imp != Impl::Atomic).then_some(self.raw.saturated)
    }
    pub fn set(&self, c: &Counter, v: i32) {
        unsafe { (self.raw.set)(c.ptr(), v) }
    }
    pub fn read(&self, c: &Counter) -> i32 {
        unsafe { (self.raw.read)(c.ptr()) }
    }
    pub fn inc(&self, c: &Counter) {
        unsafe { (self.raw.inc)(c.ptr()) }
    }
    pub fn add(&self, i: i32, c: &Counter) {
        unsafe { (self.raw.add)(i, c.ptr()) }
    }
    pub fn inc_not_zero(&self, c: &Counter) -> bool {
        unsafe { (self.raw.inc_not_zero)(c.ptr()) }
    }
    pub fn dec(&self, c: &Counter) {
        unsafe { (self.raw.dec)(c.ptr()) }
    }
    pub fn dec_and_test(&self, c: &Counter) -> bool {
        unsafe { (self.raw.dec_and_test)(c.ptr()) }
    }
    pub fn sub_and_test(&self, i: i32, c: &Counter) -> bool {
        unsafe { (self.raw.sub_and_test)(i, c.ptr()) }
    }
    /// LKDTM's loop with INT_MAX replaced by `n` (n >= 1): n-1 increments from 1, then
    /// dec_and_test back to zero. Returns the loop index at which zero was reported (1).
    pub fn lkdtm_timing(&self, n: u32) -> u32 {
        unsafe { (self.raw.timing)(n.max(1)) }
    }
    /// n increments then n dec_and_test on a shared counter; how many reported zero.
    pub fn contended(&self, c: &Counter, n: u32) -> u64 {
        #[allow(clippy::unnecessary_cast)] // c_ulong is u64 on LP64 only
        unsafe {
            (self.raw.contended)(c.ptr(), n) as u64
        }
    }
}

/// Warnings raised by the calling thread since the last reset.
pub fn warnings(kind: Warning) -> u64 {
    #[cfg(not(kharden_no_native))]
    unsafe {
        ffi::rc_warnings(kind as i32) as u64
    }
    #[cfg(kharden_no_native)]
    {
        let _ = kind;
        0
    }
}

pub fn reset_warnings() {
    #[cfg(not(kharden_no_native))]
    unsafe {
        ffi::rc_reset_warnings()
    }
}

fn all_compiled() -> &'static [ffi::rc_impl] {
    #[cfg(not(kharden_no_native))]
    unsafe {
        let mut n = 0;
        let p = ffi::rc_impls(&mut n);
        std::slice::from_raw_parts(p, n as usize)
    }
    #[cfg(kharden_no_native)]
    {
        &[]
    }
}

/// Whether this CPU can run the LSE forms (arm64 HWCAP_ATOMICS).
pub fn host_has_lse() -> bool {
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("lse")
    }
    #[cfg(not(target_arch = "aarch64"))]
    {
        false
    }
}

/// Every implementation that runs on this host, in table order.
pub fn available() -> Vec<Native> {
    all_compiled()
        .iter()
        .filter_map(|raw| {
            let name = unsafe { CStr::from_ptr(raw.name) }.to_str().ok()?;
            let variant = unsafe { CStr::from_ptr(raw.variant) }.to_str().ok()?;
            let imp = Impl::from_name(name)?;
            let variant = Variant::from_name(variant)?;
            if variant == Variant::Arm64Lse && !host_has_lse() {
                return None;
            }
            Some(Native { raw, imp, variant })
        })
        .collect()
}

/// Runs the C functional tests (c/selftest.c) over every available implementation;
/// returns the number of failures (details on stderr).
pub fn selftest(threads: u32, per_thread: u32) -> i32 {
    #[cfg(not(kharden_no_native))]
    {
        // Run only what the CPU supports: copy the runnable entries into one array.
        let runnable = available();
        let mut table: Vec<ffi::rc_impl> = Vec::new();
        for n in &runnable {
            table.push(*n.raw);
        }
        unsafe {
            ffi::rc_selftest(
                table.as_ptr(),
                table.len() as u32,
                threads as i32,
                per_thread,
            )
        }
    }
    #[cfg(kharden_no_native)]
    {
        let _ = (threads, per_thread);
        0
    }
}
