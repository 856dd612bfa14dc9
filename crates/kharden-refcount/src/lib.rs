//! Refcount hardening (seed 001, issue 5): the real implementations, a native LKDTM-style
//! benchmark and a cost model for cores we cannot run on.
//!
//! - [`native`]: the C implementations (c/) compiled for this host: atomic_t, fast checked
//!   refcount (x86-64 lock add + js; arm64 LL/SC and LSE flag-setting forms), REFCOUNT_FULL's
//!   cmpxchg loop and the later fetch_add-based generic version, with the kernel's saturation
//!   and warning semantics.
//! - [`bench`]: LKDTM's ATOMIC_TIMING / REFCOUNT_TIMING loops, timed natively.
//! - [`model`]: cycles of those loops on a machine: the instruction sequences actually
//!   executed by the cross-compiled code (traced under qemu-user, `model/*.trace`) run on an
//!   out-of-order core model whose width, window, latencies and pipes come from a per-core
//!   table (`cores/*.toml`).
//! - [`reproduce`]: seed 001's table, published vs modelled.
//! - [`op_cycles`]: the cost of one refcount operation on a machine, for the simulator.

pub mod bench;
mod ffi;
pub mod gen;
pub mod model;
pub mod native;
mod perf;
pub mod plugin;

use serde::Serialize;

/// A refcount implementation (which kernel configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Impl {
    /// Plain atomic_t (LKDTM's ATOMIC_TIMING baseline): no checks.
    Atomic,
    /// Fast refcount checking (x86 v4.14, arm64 v4.15): flags + out-of-line handler.
    Fast,
    /// CONFIG_REFCOUNT_FULL (v4.13 lib/refcount.c): cmpxchg loops.
    Full,
    /// The generic fetch_add-based refcount_t of v5.5 onward.
    FetchAdd,
}

impl Impl {
    pub const ALL: [Impl; 4] = [Impl::Atomic, Impl::Fast, Impl::Full, Impl::FetchAdd];
    pub fn name(self) -> &'static str {
        match self {
            Impl::Atomic => "atomic_t",
            Impl::Fast => "fast",
            Impl::Full => "full",
            Impl::FetchAdd => "fetch_add",
        }
    }
    pub fn from_name(s: &str) -> Option<Impl> {
        Impl::ALL.into_iter().find(|i| i.name() == s)
    }
}

/// The instruction-set form an implementation is compiled to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Variant {
    X86_64,
    Arm64Llsc,
    Arm64Lse,
}

impl Variant {
    pub const ALL: [Variant; 3] = [Variant::X86_64, Variant::Arm64Llsc, Variant::Arm64Lse];
    pub fn name(self) -> &'static str {
        match self {
            Variant::X86_64 => "x86-64",
            Variant::Arm64Llsc => "arm64-llsc",
            Variant::Arm64Lse => "arm64-lse",
        }
    }
    pub fn from_name(s: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|v| v.name() == s)
    }
}

/// A refcount operation, as the kernel's get/put paths use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Op {
    /// refcount_inc / atomic_inc.
    Inc,
    /// refcount_dec_and_test / atomic_dec_and_test.
    DecAndTest,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Inc => "inc",
            Op::DecAndTest => "dec",
        }
    }
}

pub use model::{op_cycles, reproduce};
