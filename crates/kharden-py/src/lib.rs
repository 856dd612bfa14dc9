//! `kharden._native`: the simulator for Python. Each function takes and returns plain
//! strings (TOML, JSON) so that the Python side (python/kharden/__init__.py) builds the
//! DataFrames; a kharden error becomes `kharden.KhardenError` with the same one-line
//! message the command line prints. Simulations release the GIL.

use kharden::defense::{self, Extension};
use kharden::experiment::sweep_file::{self, Book, Options, Record, Sweep};
use kharden::kernel::paths::recording::{Portable, Recording};
use kharden::params::{machine_params, Overrides, Params};
use kharden::{experiment, machine};
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::path::Path;
use std::sync::{Arc, Mutex};

create_exception!(
    _native,
    KhardenError,
    PyValueError,
    "A kharden error: one line naming the place and what was expected."
);

const EXTENSIONS: &[Extension] = &[kharden_refcount::plugin::EXTENSION];

fn err(e: impl std::fmt::Display) -> PyErr {
    KhardenError::new_err(e.to_string())
}

fn json(v: &impl serde::Serialize) -> PyResult<String> {
    serde_json::to_string(v).map_err(err)
}

/// The `--set` assignments of a call, with the footprints chosen for this module.
fn overrides(set: Vec<String>) -> PyResult<Overrides> {
    let mut o = Overrides::parse(&set).map_err(err)?;
    o.recording = Option::clone(&chosen());
    Ok(o)
}

/// The footprints use_footprints chose for this module's later calls (None: the
/// committed recording). Held here, the Python API's state: the kernel library takes its
/// recording from each run's parameters.
fn chosen() -> std::sync::MutexGuard<'static, Option<Arc<Recording>>> {
    static CHOSEN: Mutex<Option<Arc<Recording>>> = Mutex::new(None);
    CHOSEN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Makes the recording `read` gives the one of later calls, unless `portable`'s texts are
/// chosen already (a Ray worker receives its recording with every task).
fn choose(
    portable: Option<&Portable>,
    read: impl FnOnce() -> kharden::Result<Recording>,
) -> PyResult<()> {
    let mut now = chosen();
    if portable.is_some() && now.as_ref().and_then(|r| r.portable.as_ref()) == portable {
        return Ok(());
    }
    *now = Some(Arc::new(read().map_err(err)?));
    Ok(())
}

/// The machine library: name -> profile (as its TOML fields), JSON.
#[pyfunction]
fn machines() -> PyResult<String> {
    let mut out = serde_json::Map::new();
    for name in machine::names() {
        let m = machine::load(name).map_err(err)?;
        out.insert(name.to_string(), serde_json::to_value(&m).map_err(err)?);
    }
    json(&out)
}

/// The defenses: [[name, description, broken], ...], JSON.
#[pyfunction]
fn defenses() -> PyResult<String> {
    let extra = EXTENSIONS.iter().flat_map(|e| e.catalogue.iter().copied());
    let all: Vec<_> = defense::catalogue().into_iter().chain(extra).collect();
    json(&all)
}

/// The resolved parameters (path -> value, unit, provenance), with a machine's profile
/// fields as `machine.*` when one is named, JSON.
#[pyfunction]
#[pyo3(signature = (machine=None, set=vec![]))]
fn parameters(machine: Option<String>, set: Vec<String>) -> PyResult<String> {
    let o = overrides(set)?;
    let mut params = Params::linux();
    o.apply(&mut params).map_err(err)?;
    let mut all = params.to_json();
    if let Some(name) = machine {
        let m = o
            .apply_machine(&machine::load(&name).map_err(err)?)
            .map_err(err)?;
        let text = machine::source_text(&name)
            .map(str::to_string)
            .or_else(|| std::fs::read_to_string(&name).ok());
        let map = all.as_object_mut().expect("an object");
        for leaf in machine_params::leaves(&m, text.as_deref()) {
            map.insert(
                format!("machine.{}", leaf.path),
                serde_json::json!({ "value": serde_json::to_value(&leaf.value).unwrap_or_default(),
                                    "unit": "", "provenance": leaf.source }),
            );
        }
    }
    json(&all)
}

/// A reproduction (an experiment name, or "refcount"), JSON.
#[pyfunction]
#[pyo3(signature = (name, set=vec![]))]
fn reproduce(py: Python<'_>, name: String, set: Vec<String>) -> PyResult<String> {
    let o = overrides(set)?;
    let rep = py
        .allow_threads(|| match name.as_str() {
            "refcount" => kharden_refcount::reproduce(),
            _ if name.ends_with(".toml") => {
                let text = machine::validate::read_bounded(&name, "experiment file")?;
                experiment::run_text(&name, &text, &o)
            }
            _ => experiment::reproduce(&name, &o),
        })
        .map_err(err)?;
    json(&rep)
}

/// Makes the footprint file at `path` the kernel recording of every later simulation of
/// this module (kernel/paths/recording.rs; the CLI's `--footprints`).
#[pyfunction]
fn use_footprints(path: &str) -> PyResult<()> {
    choose(None, || Recording::read(path))
}

/// The footprints chosen for this module (use_footprints), as the JSON of their texts
/// that use_footprints_portable takes in another process; None for the committed ones.
#[pyfunction]
fn chosen_footprints() -> PyResult<Option<String>> {
    chosen()
        .as_ref()
        .and_then(|r| r.portable.as_ref())
        .map(|p| serde_json::to_string(p).map_err(|e| err(e.to_string())))
        .transpose()
}

/// use_footprints of a recording chosen in another process (chosen_footprints' JSON): a
/// Ray worker gets the texts, not the files.
#[pyfunction]
fn use_footprints_portable(json: &str) -> PyResult<()> {
    let p: Portable = serde_json::from_str(json)
        .map_err(|e| err(format!("footprints sent to this worker: {e}")))?;
    choose(Some(&p), || Recording::from_portable(p.clone()))
}

/// Names the reproductions `reproduce` takes.
#[pyfunction]
fn experiments() -> Vec<&'static str> {
    let mut names = experiment::names();
    names.push("refcount");
    names
}

fn sweep_of(place: &str, text: &str, set: Vec<String>) -> PyResult<Sweep> {
    Sweep::parse(place, text, &overrides(set)?, EXTENSIONS).map_err(err)
}

/// A sweep given as JSON (a dict from Python) in the sweep file's TOML form; errors name
/// `place`, what the caller gave (`sweep dict`, `run`).
#[pyfunction]
fn toml_of_json(place: &str, text: &str) -> PyResult<String> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| err(format!("{place}: {e}")))?;
    let t: toml::Value = serde_json::from_value(v).map_err(|e| err(format!("{place}: {e}")))?;
    toml::to_string(&t).map_err(|e| err(format!("{place}: {e}")))
}

/// Checks a sweep and returns its points' keys, JSON.
#[pyfunction]
#[pyo3(signature = (place, text, set=vec![]))]
fn sweep_keys(place: &str, text: &str, set: Vec<String>) -> PyResult<String> {
    let s = sweep_of(place, text, set)?;
    json(&s.points.iter().map(|p| p.point.key()).collect::<Vec<_>>())
}

/// Runs every point in memory; the rows as JSON (see `Record::to_json`).
#[pyfunction]
#[pyo3(signature = (place, text, set=vec![], threads=0))]
fn sweep_rows(
    py: Python<'_>,
    place: &str,
    text: &str,
    set: Vec<String>,
    threads: usize,
) -> PyResult<String> {
    let s = sweep_of(place, text, set)?;
    let rows = py.allow_threads(|| sweep_file::run_all(&s, threads, EXTENSIONS));
    json(&rows.iter().map(Record::to_json).collect::<Vec<_>>())
}

/// Runs the points not yet in `output` on local threads and writes the file; the summary
/// (points, skipped, ran, failed), JSON.
#[pyfunction]
#[pyo3(signature = (place, text, output, set=vec![], threads=0))]
fn sweep_to_file(
    py: Python<'_>,
    place: &str,
    text: &str,
    output: &str,
    set: Vec<String>,
    threads: usize,
) -> PyResult<String> {
    let s = sweep_of(place, text, set)?;
    let options = Options {
        threads,
        ..Options::default()
    };
    let summary = py
        .allow_threads(|| {
            sweep_file::run_to_file(&s, Path::new(output), options, EXTENSIONS, &mut |_, _| {})
        })
        .map_err(err)?;
    Ok(format!(
        "{{\"points\": {}, \"skipped\": {}, \"ran\": {}, \"failed\": {}}}",
        summary.points, summary.skipped, summary.ran, summary.failed
    ))
}

/// Indices of the points `output` does not hold yet (for a cluster to run), JSON.
#[pyfunction]
#[pyo3(signature = (place, text, output, set=vec![]))]
fn sweep_pending(place: &str, text: &str, output: &str, set: Vec<String>) -> PyResult<String> {
    let s = sweep_of(place, text, set)?;
    let book = Book::open(&s, Path::new(output)).map_err(err)?;
    json(&book.todo())
}

/// Runs point `index` of a sweep (in a Ray task), its row as JSON.
#[pyfunction]
#[pyo3(signature = (place, text, index, set=vec![]))]
fn sweep_point(
    py: Python<'_>,
    place: &str,
    text: &str,
    index: usize,
    set: Vec<String>,
) -> PyResult<String> {
    let s = sweep_of(place, text, set)?;
    if index >= s.points.len() {
        return Err(err(format!(
            "{place}: point {index}: the sweep has {} points",
            s.points.len()
        )));
    }
    let row = py.allow_threads(|| s.run_point(index, EXTENSIONS));
    json(&row.to_json())
}

/// Files rows computed elsewhere (JSON list of `Record::to_json`) into `output` beside
/// those already there, as the local run writes them.
#[pyfunction]
#[pyo3(signature = (place, text, output, rows, set=vec![]))]
fn sweep_write(
    place: &str,
    text: &str,
    output: &str,
    rows: &str,
    set: Vec<String>,
) -> PyResult<()> {
    let s = sweep_of(place, text, set)?;
    let mut book = Book::open(&s, Path::new(output)).map_err(err)?;
    let rows: Vec<serde_json::Value> = serde_json::from_str(rows).map_err(err)?;
    for r in &rows {
        let record = Record::from_json(r).ok_or_else(|| err("a malformed row"))?;
        book.put(record).map_err(err)?;
    }
    book.write(&s, Path::new(output)).map_err(err)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("KhardenError", m.py().get_type::<KhardenError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(machines, m)?)?;
    m.add_function(wrap_pyfunction!(defenses, m)?)?;
    m.add_function(wrap_pyfunction!(parameters, m)?)?;
    m.add_function(wrap_pyfunction!(reproduce, m)?)?;
    m.add_function(wrap_pyfunction!(experiments, m)?)?;
    m.add_function(wrap_pyfunction!(use_footprints, m)?)?;
    m.add_function(wrap_pyfunction!(chosen_footprints, m)?)?;
    m.add_function(wrap_pyfunction!(use_footprints_portable, m)?)?;
    m.add_function(wrap_pyfunction!(toml_of_json, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_keys, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_rows, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_to_file, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_pending, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_point, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_write, m)?)?;
    Ok(())
}
