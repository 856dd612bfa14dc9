//! The security oracle: each defense's property as an invariant checked during a run.

pub mod pti;

use serde::Serialize;

/// How often invariants are checked at returns to user mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OracleMode {
    Off,
    /// The first 16 returns, then every n-th (cheap enough for long runs).
    Sampled(u64),
    /// Every return (what `kharden check` uses).
    Every,
}

impl OracleMode {
    pub fn due(self, returns: u64) -> bool {
        match self {
            OracleMode::Off => false,
            OracleMode::Every => true,
            OracleMode::Sampled(n) => returns <= 16 || returns % n == 0,
        }
    }
}

/// A broken security property, with enough detail to find the cause.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub defense: String,
    pub cpu: usize,
    pub what: String,
}
