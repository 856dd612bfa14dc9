//! Reproductions of published tables. An experiment file (experiments/NAME.toml) names the
//! machine, the workload, each row's configuration and published figure, and the one
//! parameter it may fit; the runner simulates every row and reports published vs simulated.

pub mod asi_table;
pub mod evict_fault;
pub mod file;
pub mod flush_range;
pub mod kbuild_table;
pub mod kvm_kernel_guest;
pub mod kvm_spec;
pub mod kvm_table;
pub mod sweep;
pub mod sweep_file;
pub mod syscall_table;
pub mod text_replication;
pub mod validate;

use crate::error::{Error, Result};
use crate::params::Overrides;
use crate::report::Reproduction;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/experiments.rs"));
}

/// A parameter an experiment fits, by path, and the row whose published figure fixes it.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fit {
    pub parameter: String,
    /// Label of the row whose published figure the parameter is fitted to.
    pub row: String,
    /// Starting values of the search: two for secant steps (default: the parameter's value
    /// and four times it), or one for a cost charged per counted event (its declaration
    /// names the counter), whose first step is Newton's with the counted events as slope.
    #[serde(default)]
    pub start: Option<Vec<f64>>,
}

impl Fit {
    /// Checks that the parameter is one the runner can fit and that the row exists.
    pub fn check(&self, place: &str, parameters: &[&str], row_labels: &[&str]) -> Result<()> {
        if !parameters.contains(&self.parameter.as_str()) {
            return Err(Error::at(
                place,
                format!(
                    "fit.parameter: expected {}, got \"{}\"",
                    parameters
                        .iter()
                        .map(|p| format!("\"{p}\""))
                        .collect::<Vec<_>>()
                        .join(" or "),
                    self.parameter
                ),
            ));
        }
        if !row_labels.contains(&self.row.as_str()) {
            return Err(Error::at(
                place,
                format!("fit.row: no [[row]] labelled \"{}\"", self.row),
            ));
        }
        match self.start.as_deref() {
            Some([a, b]) if a == b => Err(Error::at(
                place,
                format!(
                    "fit.start of {}: the two starting values are equal ({a})",
                    self.parameter
                ),
            )),
            None | Some([_]) | Some([_, _]) => Ok(()),
            Some(other) => Err(Error::at(
                place,
                format!(
                    "fit.start of {}: expected one or two starting values, got {}",
                    self.parameter,
                    other.len()
                ),
            )),
        }
    }

    /// The two starting values of a secant search, `default` when none are given; an
    /// error for a single one (which only a per-event cost can start from).
    pub fn start_pair(&self, place: &str, default: [f64; 2]) -> Result<[f64; 2]> {
        match self.start.as_deref() {
            None => Ok(default),
            Some(&[a, b]) => Ok([a, b]),
            Some(_) => Err(Error::at(
                place,
                format!(
                    "fit.start of {}: expected two starting values (a secant search)",
                    self.parameter
                ),
            )),
        }
    }
}

/// Experiments this library runs (others, like refcount, are run by their own crates).
pub fn names() -> Vec<&'static str> {
    embedded::EXPERIMENT_FILES.iter().map(|(n, _)| *n).collect()
}

/// Parses and runs an experiment file's text with the command line's `--set` overrides.
pub fn run_text(place: &str, text: &str, overrides: &Overrides) -> Result<Reproduction> {
    validate::check(place, text)?;
    let mut rep = match file::header(place, text)?.kind.as_str() {
        "syscall-table" => syscall_table::run(&syscall_table::parse(place, text)?, overrides),
        "kbuild-table" => kbuild_table::run(&kbuild_table::parse(place, text)?, overrides),
        "kvm-table" => kvm_table::run(&kvm_spec::parse(place, text)?, overrides),
        "text-replication" => {
            text_replication::run(&text_replication::parse(place, text)?, overrides)
        }
        "flush-range" => flush_range::run(&flush_range::parse(place, text)?, overrides),
        "evict-fault" => evict_fault::run(&evict_fault::parse(place, text)?, overrides),
        "asi-table" => asi_table::run(&asi_table::parse(place, text)?, overrides),
        other => Err(Error::at(
            place,
            format!("kind: expected \"syscall-table\", \"kbuild-table\", \"kvm-table\", \"text-replication\", \"flush-range\", \"evict-fault\" or \"asi-table\", got \"{other}\""),
        )),
    }?;
    rep.judge(place)?;
    Ok(rep)
}

pub fn source_text(name: &str) -> Option<&'static str> {
    embedded::EXPERIMENT_FILES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
}

/// Runs the named experiment.
pub fn reproduce(name: &str, overrides: &Overrides) -> Result<Reproduction> {
    let text = source_text(name).ok_or_else(|| {
        Error::new(format!(
            "unknown experiment '{name}': expected one of {}",
            names().join(", ")
        ))
    })?;
    run_text(&format!("experiments/{name}.toml"), text, overrides)
}
