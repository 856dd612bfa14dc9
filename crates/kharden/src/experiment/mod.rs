//! Reproductions of published tables. An experiment file (experiments/NAME.toml) names the
//! machine, the workload, each row's configuration and published figure, and the one
//! parameter it may fit; the runner simulates every row and reports published vs simulated.

pub mod syscall_table;

use crate::error::{Error, Result};
use crate::report::Reproduction;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/experiments.rs"));
}

/// Experiments this library runs (others, like refcount, are run by their own crates).
pub fn names() -> Vec<&'static str> {
    embedded::EXPERIMENT_FILES.iter().map(|(n, _)| *n).filter(|n| syscall_table::is_syscall_table(n)).collect()
}

pub fn source_text(name: &str) -> Option<&'static str> {
    embedded::EXPERIMENT_FILES.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// Runs the named experiment.
pub fn reproduce(name: &str) -> Result<Reproduction> {
    let text = source_text(name).ok_or_else(|| Error::new(format!("unknown experiment '{name}': expected one of {}", names().join(", "))))?;
    let exp = syscall_table::parse(&format!("experiments/{name}.toml"), text)?;
    syscall_table::run(&exp)
}
