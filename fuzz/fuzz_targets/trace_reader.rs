//! Feeds arbitrary bytes to the trace reader: it must return events or one error, never panic,
//! and never allocate without bound.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = kharden_trace::fuzz::trace_reader(data);
});
