//! The per-instruction cost model: cycles of LKDTM's loops (and of one refcount operation)
//! on a core we cannot run on.
//!
//! Instructions: the executed instruction sequence of one steady-state iteration of each
//! loop, from the cross-compiled code traced under qemu-user (`model/*.trace`, made by
//! [`crate::gen`]). Cycles: each executed instruction is charged by class from a per-core
//! table (`cores/*.toml`, every number with its source):
//!
//! - an exclusive pair (ld{a}xr ... st{l}xr on the same line, back to back): `exclusive_pair`,
//!   charged on the load, the store is part of it;
//! - an LSE atomic (ldadd, stadd, cas, ...): `lse_atomic`;
//! - an x86 LOCK-prefixed read-modify-write: `locked_rmw`;
//! - a barrier (dmb): `barrier`;
//! - anything else: `other` (dependent chain: its latency, 1 cycle on these cores).
//!
//! A value the sources do not supply may be fitted to one published figure, once per core,
//! never per row; the reproduction lists it.
//!
//! By job: `trace` (the traced instruction sequences and their classes), `core_table` (each
//! core's cycles per class, fits resolved), `loops` (LKDTM's loops and one operation on a
//! core or machine), `reproduce` (seed 001's table and `kharden refcount model`), with
//! `published` the seed's figures the fit and the table share.

mod core_table;
mod loops;
mod published;
mod reproduce;
mod trace;

pub use core_table::{core_for, cores, variant_for, Core};
pub use loops::{lkdtm, op_cycles, Modelled};
pub use reproduce::{fitted_parameters, model_report, reproduce};
pub use trace::{classify, traces, Class, LoopTrace, TracedInsn};

/// LKDTM's loop bound: INT_MAX.
pub const LKDTM_BOUND: u64 = 2_147_483_647;

/// Tolerance of the reproduction rows (issue 5: within 10% for cycles and instructions).
pub const TOLERANCE_PCT: f64 = 10.0;
