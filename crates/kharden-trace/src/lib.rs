//! kharden's workload traces: recording a command's kernel activity with `perf record -a`,
//! kharden's own compact, versioned, streaming trace format (FORMAT.md), statistics over a
//! trace, and the derivation of workload profiles (the kbuild profile) from recordings.
//!
//! A trace is a time-ordered stream of per-task operations (task creation, exec, exit,
//! switch in/out, migration, syscalls, page allocations and frees, TLB flushes, page faults),
//! so a replayer can demultiplex it by tid into one stream of operations per task.

pub mod calibrate;
pub mod format;
#[doc(hidden)]
pub mod fuzz;
pub mod gfp;
pub mod perf;
pub mod profile;
pub mod progress;
pub mod replay;
pub mod scratch;
pub mod stats;

pub use format::{open, Event, GfpClass, Meta, Op, TraceError, TraceReader, TraceWriter};
