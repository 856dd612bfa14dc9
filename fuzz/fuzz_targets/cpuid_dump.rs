//! Arbitrary bytes through kharden_trace::fuzz::cpuid_dump: Ok or one one-line error, never a
//! panic, never unbounded memory or time.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = kharden_trace::fuzz::cpuid_dump(data);
});
