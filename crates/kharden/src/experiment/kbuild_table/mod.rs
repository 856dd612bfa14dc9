//! Kernel-build tables (seed 000): rows of (machine, make -jN, defenses) whose system time is
//! compared with published seconds.
//!
//! Each row simulates a window of the build's steady state (workload::kbuild_run) and
//! measures system time per cycle of user work; the whole build's system time is that ratio
//! times the build's total user work, a number the source does not give and which is fitted
//! to one row (`build_user_cycles`). An experiment may also fit declared parameters no source
//! gives, each to one row, after which they apply to every row and machine (for example
//! `kernel.irq_path_cycles`, `xpfo.page_cycles`); they are fitted one after another, in the
//! file's order, each with those before it at their fitted values (fit.rs).

mod fit;
mod report;

use super::file::Header;
use super::Fit;
use crate::defense;
use crate::error::{Error, Result};
use crate::machine::{self, MachineProfile};
use crate::params::{Overrides, Params, Provenance};
use crate::report::{Judging, Reproduction, Row};
use crate::workload::kbuild_profile::JobProfile;
use crate::workload::kbuild_run::simulate;
use fit::Rows;
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    pub header: Header,
    pub tolerance_pct: f64,
    pub warmup_ms: f64,
    /// CPU time of the build to measure per row; the window is this divided by the jobs, so
    /// small and large machines see samples of the same size.
    pub window_cpu_ms: f64,
    /// Independent windows (seeds) pooled per simulation; their spread is reported as each
    /// row's sampling error.
    #[serde(default = "single")]
    pub samples: u32,
    /// Parameters this experiment sets for every row, by path (`kernel.irq_time = "tick"`).
    #[serde(default)]
    pub set: toml::Table,
    /// `build_user_cycles` first; then, optionally and each at most once, declared
    /// numeric parameters by path.
    pub fit: Vec<Fit>,
    pub row: Vec<RowSpec>,
    /// What-if runs of a row with some parameters scaled, to show how much the result
    /// depends on them (reported as predictions, never compared).
    #[serde(default)]
    pub sensitivity: Vec<Sensitivity>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sensitivity {
    /// Label of the row to rerun.
    pub row: String,
    /// Parameter path -> factor; a machine path scales every number below it
    /// (`machine.costs.ipi_latency_ns = 2.0` scales all three distances).
    pub scale: toml::Table,
}

fn single() -> u32 {
    1
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowSpec {
    pub label: String,
    #[serde(default)]
    pub judging: Judging,
    pub machine: String,
    pub jobs: u32,
    pub defense: String,
    pub published: f64,
}

impl Experiment {
    /// The row labelled `label`; fit and sensitivity rows name rows `parse` has checked.
    fn row_named(&self, label: &str) -> &RowSpec {
        self.row
            .iter()
            .find(|r| r.label == label)
            .expect("rows named by fits and sensitivities are checked by parse")
    }

    /// The parameters every row runs with: the built-in ones, the experiment's `[set]`,
    /// then the command line's.
    fn params(&self, place: &str, overrides: &Overrides) -> Result<Params> {
        let mut p = Params::linux();
        for (path, value) in flatten(&self.set) {
            let by = Provenance::Set {
                by: format!("experiment {}", self.header.name),
            };
            p.set_text(&format!("{place}: set"), &path, &value_text(&value), by)?;
        }
        overrides.apply(&mut p)?;
        Ok(p)
    }
}

/// A table of dotted keys, flattened to (path, value).
pub(super) fn flatten(t: &toml::Table) -> Vec<(String, toml::Value)> {
    fn walk(prefix: &str, t: &toml::Table, out: &mut Vec<(String, toml::Value)>) {
        for (k, v) in t {
            let path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                toml::Value::Table(inner) => walk(&path, inner, out),
                other => out.push((path, other.clone())),
            }
        }
    }
    let mut out = vec![];
    walk("", t, &mut out);
    out
}

/// A sensitivity's factor: a TOML float or integer.
fn as_factor(v: &toml::Value) -> Option<f64> {
    v.as_float().or(v.as_integer().map(|i| i as f64))
}

fn value_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub fn parse(place: &str, text: &str) -> Result<Experiment> {
    let e: Experiment = super::file::read(place, text)?;
    e.params(place, &Overrides::default())?;
    let parameters: Vec<&str> = e.fit.iter().map(|f| f.parameter.as_str()).collect();
    let fitted = parameters.get(1..).unwrap_or_default();
    let declared = Params::linux();
    let numeric = fitted.iter().all(|p| {
        declared
            .get(p)
            .is_some_and(|d| matches!(d.value, crate::params::Value::Num(_)))
    });
    let distinct = fitted
        .iter()
        .enumerate()
        .all(|(i, p)| !fitted[..i].contains(p));
    if parameters.first() != Some(&"build_user_cycles") || !numeric || !distinct {
        return Err(Error::at(place, format!("[[fit]] parameters: expected \"build_user_cycles\", optionally followed by declared numeric parameters (see `kharden params`) each at most once, got {parameters:?}")));
    }
    let labels: Vec<&str> = e.row.iter().map(|r| r.label.as_str()).collect();
    for f in &e.fit {
        f.check(place, &parameters, &labels)?;
        // A mechanism's parameter is fitted to what the mechanism adds, never to an
        // absolute row whose baseline error it would absorb (report::judge).
        let mechanism = f.parameter != "build_user_cycles"
            && !crate::defense::registry::param_applies(&f.parameter, &[]);
        if mechanism && e.row_named(&f.row).judging.baseline.is_none() {
            return Err(Error::at(
                place,
                format!(
                    "fit {}: a mechanism parameter is fitted to an added cost: row \"{}\" needs a baseline",
                    f.parameter, f.row
                ),
            ));
        }
        let per_event = declared.get(&f.parameter).and_then(|p| p.decl.per_event);
        if f.start.as_ref().is_some_and(|s| s.len() == 1) && per_event.is_none() {
            return Err(Error::at(
                place,
                format!(
                    "fit.start of {}: one starting value needs a cost charged per counted event; give two",
                    f.parameter
                ),
            ));
        }
    }
    if !(e.warmup_ms >= 0.0
        && e.warmup_ms <= 1000.0
        && e.window_cpu_ms > 0.0
        && e.window_cpu_ms <= 100_000.0)
    {
        return Err(Error::at(place, "warmup_ms, window_cpu_ms: expected 0 <= warmup_ms <= 1000 and 0 < window_cpu_ms <= 100000"));
    }
    if !(1..=16).contains(&e.samples) {
        return Err(Error::at(
            place,
            format!("samples: expected 1 to 16, got {}", e.samples),
        ));
    }
    for s in &e.sensitivity {
        if !e.row.iter().any(|r| r.label == s.row) {
            return Err(Error::at(
                place,
                format!("sensitivity.row: no [[row]] labelled \"{}\"", s.row),
            ));
        }
        for (path, factor) in flatten(&s.scale) {
            if !as_factor(&factor).is_some_and(|f| (0.0..=100.0).contains(&f)) {
                return Err(Error::at(
                    place,
                    format!(
                        "sensitivity.scale.{path}: expected a factor from 0 to 100, got {factor}"
                    ),
                ));
            }
        }
    }
    for r in &e.row {
        defense::parse_list(&r.defense)
            .map_err(|err| Error::at(place, format!("row \"{}\": {err}", r.label)))?;
        if r.jobs == 0 || r.jobs > 4096 {
            return Err(Error::at(
                place,
                format!(
                    "row \"{}\": jobs: expected 1..4096, got {}",
                    r.label, r.jobs
                ),
            ));
        }
    }
    Ok(e)
}

pub fn run(e: &Experiment, overrides: &Overrides) -> Result<Reproduction> {
    let mut machines = BTreeMap::new();
    for r in &e.row {
        if !machines.contains_key(&r.machine) {
            let m = machine::load(&r.machine)?;
            machines.insert(r.machine.clone(), overrides.apply_machine(&m)?);
        }
    }
    let params = e.params(&format!("experiments/{}.toml", e.header.name), overrides)?;
    let mut rows = Rows::new(e, JobProfile::builtin(), machines, params);
    let base_label = e.fit[0].row.clone();
    let base_published = e.row_named(&base_label).published;
    let mut fitted = vec![];
    let mut fitted_rows = vec![base_label.clone()];
    for f in &e.fit[1..] {
        // A parameter the command line sets is not fitted: the run is a what-if.
        if overrides.software.iter().any(|(p, _)| *p == f.parameter) {
            continue;
        }
        let (v, error) = rows.fit(f, &base_label)?;
        let error = error.map_or(String::new(), |se| format!(" ± {se:.0}"));
        let decl = rows.params.get(&f.parameter).map(|p| p.decl);
        let help = decl.map_or("", |d| d.help);
        // A fit stopped at its range's end leaves the row off its figure (its table shows by
        // how much): what the parameter stands for is not there to fit.
        let bound = match decl.map(|d| d.range) {
            Some((lo, _)) if v <= lo => {
                ", at its lower bound: the row is over its figure without it"
            }
            Some((_, hi)) if v >= hi => ", at its upper bound: the row is under its figure",
            _ => "",
        };
        fitted.push(format!(
            "{} = {v:.0}{error} ({help}), fitted to \"{}\"{bound}",
            f.parameter, f.row
        ));
        fitted_rows.push(f.row.clone());
    }
    let mut measured = vec![];
    for r in &e.row {
        measured.push(rows.measure(r)?);
    }
    let base_index = e.row.iter().position(|r| r.label == base_label).unwrap();
    let build_user_cycles = base_published / measured[base_index].system_per_user_cycle();
    let jobs_in_build = build_user_cycles / rows.profile.user_cycles();
    fitted.insert(0, format!("build_user_cycles = {build_user_cycles:.4e} (the build's total user work, {jobs_in_build:.0} compile jobs of the recorded kind), fitted to \"{base_label}\" = {base_published} s"));
    let compared: Vec<Row> = e
        .row
        .iter()
        .zip(&measured)
        .map(|(r, m)| {
            let mut row = Row::compared(
                &r.label,
                "s",
                r.published,
                m.system_per_user_cycle() * build_user_cycles,
                e.tolerance_pct,
            );
            r.judging.mark(&mut row);
            row.sampling_pct = m.sampling_error().map(|e| 100.0 * e);
            row.fitted = fitted_rows.contains(&r.label);
            row
        })
        .collect();
    let mut breakdowns = vec![report::ratios(&e.header.title, &e.row, &compared)];
    breakdowns.extend(report::breakdown(
        &e.header.title,
        &measured,
        build_user_cycles,
        rows.profile.user_cycles(),
    ));
    let mut predictions = vec![];
    for sens in &e.sensitivity {
        let r = e.row_named(&sens.row).clone();
        let (m, params, describe) = what_if(&rows.machines[&r.machine], &rows.params, sens)?;
        let one = simulate(
            &m,
            &r.defense,
            r.jobs,
            &rows.profile,
            rows.sampling(&r),
            &params,
        )?;
        predictions.push(Row::predicted(
            &format!("what if: {} {describe}", r.label),
            "s",
            one.system_per_user_cycle() * build_user_cycles,
        ));
    }
    let values = figures(e, &compared, &rows.kernel_shares(), jobs_in_build);
    let mut notes = rows.kernel_share_notes();
    notes.push(report::EVENT_COLUMNS.to_string());
    notes.push(format!("each row simulates {} ms of warm-up, then {} CPU-ms of the build's steady state (window = that / jobs), and scales by the build's user work; {} independent windows (seeds) are pooled per row, and sampling ± is the standard error of their mean; a fitted parameter's ± is the standard error of the values each seed's windows give it on their own (that seed's fitted row against its baseline)", e.warmup_ms, e.window_cpu_ms, e.samples));
    notes.push("IPI delivery latency comes from one published measurement, a Skylake-SP server's (the Xeon 8160's own microarchitecture, the nearest measured part for the other Intel profiles); the ICR write and interrupt-entry costs are unsourced estimates; see the profiles' comments".into());
    Ok(Reproduction {
        rows: compared,
        fitted_parameters: fitted.len() as u32,
        fitted,
        predictions,
        breakdowns,
        notes,
        values,
        params: Some(rows.params.to_json()),
        ..e.header.reproduction()
    })
}

/// The run's figures a known-miss text may quote (report::judge): the build's compile jobs;
/// per machine, the share of the recorded job's kernel time its modelled paths give
/// (`coverage_pct/MACHINE`); per mechanism row, its added cost were the build fitted by a
/// model giving all of it (`ROW/added_if_complete_pct`: the build's size is fitted to the
/// baseline's system time, so a model giving a share s of the kernel time fits 1/s times the
/// jobs, and a cost per job is that much too high; the baseline's unmodelled time is taken
/// to be unchanged by the mechanism).
fn figures(
    e: &Experiment,
    rows: &[Row],
    shares: &BTreeMap<String, f64>,
    jobs: f64,
) -> BTreeMap<String, f64> {
    let mut v = BTreeMap::from([("jobs".to_string(), jobs)]);
    for (machine, share) in shares {
        v.insert(format!("coverage_pct/{machine}"), 100.0 * share);
    }
    for (spec, row) in e.row.iter().zip(rows) {
        let Some(base) = &spec.judging.baseline else {
            continue;
        };
        let Some(base_row) = rows.iter().find(|r| &r.label == base) else {
            continue;
        };
        if let Some(share) = shares.get(&spec.machine) {
            let added = (row.simulated / base_row.simulated - 1.0) * 100.0;
            v.insert(
                format!("{}/added_if_complete_pct", row.label),
                added * share,
            );
        }
    }
    v
}
/// A sensitivity's machine and parameters, and its description ("with X x2 and Y x0").
fn what_if(
    m: &MachineProfile,
    params: &Params,
    sens: &Sensitivity,
) -> Result<(MachineProfile, Params, String)> {
    let (mut m, mut params) = (m.clone(), params.clone());
    let mut knobs = vec![];
    for (path, factor) in flatten(&sens.scale) {
        let factor = as_factor(&factor).unwrap_or(1.0);
        if factor == 1.0 {
            continue;
        }
        if let Some(field) = path.strip_prefix("machine.") {
            m = crate::params::machine_params::scale(&m, "sensitivity", field, factor)?;
        } else {
            let v = params
                .get(&path)
                .map(|p| &p.value)
                .and_then(|v| {
                    if let crate::params::Value::Num(v) = v {
                        Some(*v)
                    } else {
                        None
                    }
                })
                .ok_or_else(|| {
                    Error::new(format!(
                        "sensitivity.scale.{path}: not a declared numeric parameter"
                    ))
                })?;
            params.set_num(
                "sensitivity",
                &path,
                v * factor,
                Provenance::Set {
                    by: "a what-if row".into(),
                },
            )?;
        }
        knobs.push(format!("{path} x{factor}"));
    }
    let describe = if knobs.is_empty() {
        "as fitted".to_string()
    } else {
        format!("with {}", knobs.join(" and "))
    };
    Ok((m, params, describe))
}

#[cfg(test)]
mod tests;
