//! One parameter system. Every model parameter is declared once by its owner (a `Decl`:
//! path, unit, allowed range, help) and gets its value and provenance from data: the
//! software side of the model from `kernels/linux.toml`, hardware facts from the machine
//! profile (`machine.*`, see machine_params.rs). Experiments fit parameters and the command
//! line sets them (`--set PATH=VALUE`), both by path; a run boots with the resolved set and
//! records it in its JSON output, so any figure can be re-run from its output.

mod data;
pub mod machine_params;

use crate::error::{Error, Result};
use crate::kernel::paths::recording::Recording;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What a parameter's number means. `--set` accepts a matching suffix ("374cycles").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Cycles,
    Ns,
    Ms,
    /// A whole number of things (pages, entries, operations).
    Count,
    /// A dimensionless real (a factor).
    Ratio,
    Bool,
    /// One of the listed words.
    Choice(&'static [&'static str]),
}

impl Unit {
    pub fn name(self) -> &'static str {
        match self {
            Unit::Cycles => "cycles",
            Unit::Ns => "ns",
            Unit::Ms => "ms",
            Unit::Count => "count",
            Unit::Ratio => "ratio",
            Unit::Bool => "bool",
            Unit::Choice(_) => "choice",
        }
    }
}

/// A parameter's declaration, written once by the code that reads it.
#[derive(Debug, Clone, Copy)]
pub struct Decl {
    /// Dotted path: `kernel.irq_path_cycles`, `xpfo.page_cycles`.
    pub path: &'static str,
    pub unit: Unit,
    /// Inclusive bounds of a credible value (numbers only); anything outside is an error.
    pub range: (f64, f64),
    pub help: &'static str,
    /// For a cost charged once per event of a counter (a registry counter name): the
    /// counter. A fit then knows the slope from one run (kbuild_table/fit.rs).
    pub per_event: Option<&'static str>,
}

impl Decl {
    pub const fn num(
        path: &'static str,
        unit: Unit,
        range: (f64, f64),
        help: &'static str,
    ) -> Decl {
        Decl {
            path,
            unit,
            range,
            help,
            per_event: None,
        }
    }
    /// The same, charged once per event counted by the registry counter `counter`.
    pub const fn charged_per(self, counter: &'static str) -> Decl {
        Decl {
            per_event: Some(counter),
            ..self
        }
    }
    pub const fn choice(
        path: &'static str,
        words: &'static [&'static str],
        help: &'static str,
    ) -> Decl {
        Decl {
            path,
            unit: Unit::Choice(words),
            range: (0.0, 0.0),
            help,
            per_event: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Num(f64),
    Bool(bool),
    Word(String),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Num(v) => write!(f, "{v}"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Word(w) => f.write_str(w),
        }
    }
}

/// Where a value comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Provenance {
    /// A data file's source text for it (a citation, or ESTIMATE with its reasoning).
    Source { file: String, text: String },
    /// Fitted by an experiment to a published row.
    Fitted { experiment: String, row: String },
    /// Set on the command line or in a sweep or what-if row.
    Set { by: String },
}

impl std::fmt::Display for Provenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Provenance::Source { file, text } if text.is_empty() => write!(f, "{file}"),
            Provenance::Source { file, text } => write!(f, "{file}: {text}"),
            Provenance::Fitted { experiment, row } => {
                write!(f, "fitted by experiment {experiment} to \"{row}\"")
            }
            Provenance::Set { by } => write!(f, "set by {by}"),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Param {
    pub decl: Decl,
    pub value: Value,
    pub provenance: Provenance,
}

impl Param {
    pub fn is_fitted(&self) -> bool {
        matches!(self.provenance, Provenance::Fitted { .. })
    }
}

/// The resolved software parameters of a run (machine parameters live in the profile and
/// are set through machine_params), with the kernel recording it runs. Cheap to clone; read
/// at boot, never on a hot path.
#[derive(Debug, Clone)]
pub struct Params {
    map: BTreeMap<&'static str, Param>,
    /// The kernel paths' recording (None: the committed one).
    recording: Option<Arc<Recording>>,
}

impl Params {
    /// The kernel recording the run simulates: the committed one unless one was set.
    pub fn recording(&self) -> &Arc<Recording> {
        self.recording
            .as_ref()
            .unwrap_or_else(|| Recording::committed())
    }

    /// These parameters, simulating `recording`.
    pub fn with_recording(mut self, recording: Arc<Recording>) -> Params {
        self.recording = Some(recording);
        self
    }

    /// Reads a parameter file (the format of kernels/linux.toml) against `decls`: every
    /// declared path must have a value and a source, and every entry must be declared.
    pub fn parse(place: &str, text: &str, decls: &[Decl]) -> Result<Params> {
        data::parse(place, text, decls)
    }

    /// These parameters with one set from text (for tests and what-if runs).
    pub fn with(mut self, path: &str, text: &str) -> Result<Params> {
        self.set_text("with", path, text, Provenance::Set { by: "code".into() })?;
        Ok(self)
    }

    pub fn get(&self, path: &str) -> Option<&Param> {
        self.map.get(path)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Param> {
        self.map.values()
    }

    /// A number, by a path its owner declared (a missing path is a bug in the owner).
    pub fn num(&self, path: &str) -> f64 {
        match self.map.get(path).map(|p| &p.value) {
            Some(Value::Num(v)) => *v,
            other => panic!("parameter {path} is not a declared number ({other:?})"),
        }
    }

    pub fn flag(&self, path: &str) -> bool {
        match self.map.get(path).map(|p| &p.value) {
            Some(Value::Bool(b)) => *b,
            other => panic!("parameter {path} is not a declared bool ({other:?})"),
        }
    }

    pub fn word(&self, path: &str) -> &str {
        match self.map.get(path).map(|p| &p.value) {
            Some(Value::Word(w)) => w,
            other => panic!("parameter {path} is not a declared choice ({other:?})"),
        }
    }

    /// Sets a declared parameter from text ("374", "374cycles", "tick", "true"), checking
    /// its unit and range. `place` names where the text came from, for the error.
    pub fn set_text(
        &mut self,
        place: &str,
        path: &str,
        text: &str,
        provenance: Provenance,
    ) -> Result<()> {
        let p = self
            .map
            .get(path)
            .ok_or_else(|| unknown(place, path, &self.map))?;
        let value = parse_value(place, &p.decl, text)?;
        self.put(path, value, provenance);
        Ok(())
    }

    /// Sets a declared number, checking its range.
    pub fn set_num(
        &mut self,
        place: &str,
        path: &str,
        v: f64,
        provenance: Provenance,
    ) -> Result<()> {
        let p = self
            .map
            .get(path)
            .ok_or_else(|| unknown(place, path, &self.map))?;
        check_number(place, &p.decl, v)?;
        self.put(path, Value::Num(v), provenance);
        Ok(())
    }

    fn put(&mut self, path: &str, value: Value, provenance: Provenance) {
        let p = self.map.get_mut(path).expect("checked by the caller");
        p.value = value;
        p.provenance = provenance;
    }

    /// The values of the parameters `keep` selects, as a sortable key: two runs whose keys
    /// are equal simulate the same thing.
    pub fn fingerprint(&self, keep: impl Fn(&str) -> bool) -> Vec<(&'static str, String)> {
        self.map
            .iter()
            .filter(|(path, _)| keep(path))
            .map(|(path, p)| (*path, p.value.to_string()))
            .collect()
    }

    /// Paths a fit set, with their values, for reports.
    pub fn fitted(&self) -> impl Iterator<Item = &Param> {
        self.map.values().filter(|p| p.is_fitted())
    }

    /// The resolved values as JSON: path -> {value, unit, provenance}.
    pub fn to_json(&self) -> serde_json::Value {
        let mut out = serde_json::Map::new();
        for (path, p) in &self.map {
            let value = match &p.value {
                Value::Num(v) => serde_json::json!(v),
                Value::Bool(b) => serde_json::json!(b),
                Value::Word(w) => serde_json::json!(w),
            };
            out.insert(
                path.to_string(),
                serde_json::json!({ "value": value, "unit": p.decl.unit.name(), "provenance": p.provenance.to_string() }),
            );
        }
        serde_json::Value::Object(out)
    }
}

fn unknown(place: &str, path: &str, declared: &BTreeMap<&'static str, Param>) -> Error {
    let near: Vec<&str> = declared
        .keys()
        .copied()
        .filter(|p| p.split('.').next() == path.split('.').next())
        .collect();
    let hint = if near.is_empty() {
        "see `kharden params`".to_string()
    } else {
        format!("expected one of {}", near.join(", "))
    };
    Error::at(place, format!("unknown parameter '{path}': {hint}"))
}

fn check_number(place: &str, d: &Decl, v: f64) -> Result<()> {
    let (lo, hi) = d.range;
    let whole = d.unit != Unit::Count || v.fract() == 0.0;
    if !v.is_finite() || v < lo || v > hi || !whole {
        let kind = if d.unit == Unit::Count {
            "a whole number"
        } else {
            "a number"
        };
        return Err(Error::at(
            place,
            format!(
                "{}: expected {kind} of {} from {lo} to {hi}, got {v}",
                d.path,
                d.unit.name()
            ),
        ));
    }
    Ok(())
}

/// Reads a value for `d`: a number with an optional unit suffix equal to its unit, a bool,
/// or one of its words.
fn parse_value(place: &str, d: &Decl, text: &str) -> Result<Value> {
    let text = text.trim();
    match d.unit {
        Unit::Bool => match text {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err(Error::at(
                place,
                format!("{}: expected true or false, got '{text}'", d.path),
            )),
        },
        Unit::Choice(words) => match words.iter().find(|w| **w == text) {
            Some(w) => Ok(Value::Word(w.to_string())),
            None => Err(Error::at(
                place,
                format!(
                    "{}: expected one of {}, got '{text}'",
                    d.path,
                    words.join(", ")
                ),
            )),
        },
        unit => {
            // A bare number, or a number followed by the unit's name ("374cycles").
            let (number, suffix) = match text.parse::<f64>() {
                Ok(_) => (text, ""),
                Err(_) => {
                    let split = text
                        .find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
                        .unwrap_or(text.len());
                    (text[..split].trim(), text[split..].trim())
                }
            };
            if !suffix.is_empty() && suffix != unit.name() {
                return Err(Error::at(
                    place,
                    format!(
                        "{}: expected a value in {}, got '{text}' (in {suffix})",
                        d.path,
                        unit.name()
                    ),
                ));
            }
            let v: f64 = number.parse().map_err(|_| {
                Error::at(
                    place,
                    format!(
                        "{}: expected a number of {}, got '{text}'",
                        d.path,
                        unit.name()
                    ),
                )
            })?;
            check_number(place, d, v)?;
            Ok(Value::Num(v))
        }
    }
}

/// Splits "PATH=VALUE" of `--set`.
pub fn split_assignment(spec: &str) -> Result<(&str, &str)> {
    spec.split_once('=')
        .map(|(p, v)| (p.trim(), v.trim()))
        .filter(|(p, v)| !p.is_empty() && !v.is_empty())
        .ok_or_else(|| Error::new(format!("--set: expected PATH=VALUE, got '{spec}'")))
}

/// What `--set` assignments change, split by where they land, and the recording
/// `--footprints` gives.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// (path, value text) of software parameters.
    pub software: Vec<(String, String)>,
    /// (path below `machine.`, value text) of machine-profile fields.
    pub machine: Vec<(String, String)>,
    /// The kernel recording to simulate instead of the committed one.
    pub recording: Option<Arc<Recording>>,
}

impl Overrides {
    /// Applies the software assignments and the recording.
    pub fn apply(&self, params: &mut Params) -> Result<()> {
        for (path, value) in &self.software {
            params.set_text("--set", path, value, Provenance::Set { by: "--set".into() })?;
        }
        if let Some(r) = &self.recording {
            params.recording = Some(r.clone());
        }
        Ok(())
    }

    /// Applies the machine assignments to a profile.
    pub fn apply_machine(
        &self,
        m: &crate::machine::MachineProfile,
    ) -> Result<crate::machine::MachineProfile> {
        let mut m = m.clone();
        for (path, value) in &self.machine {
            m = machine_params::set(&m, "--set", path, value)?;
        }
        Ok(m)
    }

    /// The assignments as given, for JSON output.
    pub fn to_json(&self) -> serde_json::Value {
        let all: serde_json::Map<String, serde_json::Value> = self
            .software
            .iter()
            .map(|(p, v)| (p.clone(), serde_json::json!(v)))
            .chain(
                self.machine
                    .iter()
                    .map(|(p, v)| (format!("machine.{p}"), serde_json::json!(v))),
            )
            .collect();
        serde_json::Value::Object(all)
    }
}

#[cfg(test)]
mod tests;
