//! kharden: what does a memory-protection hardening mechanism cost on a given machine and
//! workload, and does it still protect what it claims to?
//!
//! Data flows one way: experiment -> (machine, kernel + defenses, workload) -> engine ->
//! stats -> report. `arch` and `kernel` are mechanism; `defense` plugs policy into named hooks.

pub mod arch;
pub mod defense;
pub mod error;
pub mod experiment;
pub(crate) mod host_mem;
pub mod kernel;
pub mod machine;
pub mod model;
pub mod oracle;
pub mod params;
pub mod report;
pub mod sim;
pub mod virt;
pub mod workload;

pub use error::{Error, Result};
