//! Hardware mechanism: what the MMU and caches do, independent of any kernel policy.

pub mod caches;
pub mod x86;
