//! The cost model: cycles of LKDTM's loops (and of one refcount operation) on a core we
//! cannot run on.
//!
//! Instructions: the executed instruction sequence of one steady-state iteration of each
//! loop, from the cross-compiled code traced under qemu-user (`model/*.trace`, made by
//! [`crate::gen`]), each instruction decoded into the registers and memory it reads and
//! writes (`isa`). Cycles: an abstract out-of-order core runs the iteration over and over
//! (`overlap`): instructions dispatch in order at the core's width and issue when their
//! operands are ready, so independent work runs in the shadow of the long-latency chain (the
//! exclusive pair, the atomic) and only what lies on the chain, or what a barrier or a
//! non-speculative store makes wait, adds its latency. Each core's width, window, latencies
//! and ports come from `cores/*.toml`, every number with its source.
//!
//! A value the sources do not supply may be fitted to one published figure, once per core,
//! never per row; the reproduction lists it.
//!
//! By job: `trace` (the traced instruction sequences), `isa` (what each instruction does),
//! `overlap` (the schedule and its bounds), `core_table` (each core's pipeline, fits
//! resolved), `loops` (LKDTM's loops and one operation on a core or machine), `reproduce`
//! (seed 001's table and `kharden refcount model`), `explain` (a loop's schedule, instruction
//! by instruction), with `published` the seed's figures the fit and the table share.

mod core_table;
mod explain;
mod isa;
mod loops;
mod overlap;
mod published;
mod reproduce;
mod trace;

pub use core_table::{core_for, cores, variant_for, Core};
pub use explain::schedule_report;
pub use isa::{decode, Effect, Isa, Kind, Port};
pub use loops::{lkdtm, op_cycles, Modelled};
pub use overlap::{schedule, timing, Latencies, Pipeline, PortGroup, Timing};
pub use reproduce::{fitted_parameters, model_report, reproduce};
pub use trace::{loop_from_asm, traces, LoopTrace, TracedInsn};

/// LKDTM's loop bound: INT_MAX.
pub const LKDTM_BOUND: u64 = 2_147_483_647;

/// Tolerance of the reproduction rows (issue 5: within 10% for cycles and instructions).
pub const TOLERANCE_PCT: f64 = 10.0;
