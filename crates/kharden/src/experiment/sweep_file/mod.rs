//! Sweep files: a grid of simulations as data (`kharden sweep FILE`, docs/design/sweeps.md).
//! A TOML file names machines (profiles, optionally scaled to CPU counts), defense lists,
//! workloads and parameter values by path, as a cartesian product (`[grid]`) or a list
//! (`[[point]]`). Every point is resolved and checked before any runs; points run on all
//! cores, each independent of the others and of the thread that runs it, and each becomes
//! one row of a Parquet file (its inputs, then its outputs or its one-line error).

mod parquet;
mod point;
mod record;
mod run;
pub mod spec;

pub use parquet::{read, write};
pub use point::{Point, Prepared, Resolved};
pub use record::{Cell, Record};

use crate::defense::Extension;
use crate::error::{Error, Result};
use crate::params::{Overrides, Params, Provenance};
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// A checked sweep: its points, resolved, in file order.
pub struct Sweep {
    pub place: String,
    pub text: String,
    pub points: Vec<Prepared>,
    /// The parameters every point starts from (the built-in set, the file's `[set]` and
    /// the command line's `--set`), for the output's metadata.
    pub base: Params,
    pub overrides: Overrides,
}

/// Points in a sweep at most (each is a row kept in memory and a simulation).
pub const MAX_POINTS: usize = 100_000;

impl Sweep {
    /// Parses and checks a sweep file's text; `overrides` are the command line's `--set`,
    /// applied to every point before the file's own values.
    pub fn parse(
        place: &str,
        text: &str,
        overrides: &Overrides,
        extensions: &[Extension],
    ) -> Result<Sweep> {
        crate::machine::validate::finite_numbers(place, text)?;
        let file: spec::File = toml::from_str(text)
            .map_err(|e| Error::at(place, crate::machine::toml_message(&e, text)))?;
        let mut base = Params::linux();
        overrides.apply(&mut base)?;
        let mut machine_set: Vec<(String, String, std::ops::Range<usize>)> = overrides
            .machine
            .iter()
            .map(|(p, v)| (format!("machine.{p}"), v.clone(), 0..0))
            .collect();
        for (path, value, span) in spec::flatten_set(&file.set) {
            let v = spec::value_text(place, text, span.clone(), &path, &value)?;
            if path.starts_with("machine.") {
                machine_set.push((path, v, span));
            } else {
                let by = Provenance::Set {
                    by: format!("sweep file {place}"),
                };
                base.set_text("set", &path, &v, by)
                    .map_err(|e| spec::at(place, text, span, e))?;
            }
        }
        let points = point::expand(place, text, &file)?;
        let mut machines = point::Machines::default();
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut prepared = Vec::with_capacity(points.len());
        for (i, p) in points.iter().enumerate() {
            if let Some(first) = seen.insert(p.key(), i) {
                return Err(spec::at(
                    place,
                    text,
                    p.machine.1.clone(),
                    format!("point {i} repeats point {first} ({})", p.key()),
                ));
            }
            prepared.push(point::prepare(
                place,
                text,
                p,
                &base,
                &machine_set,
                &mut machines,
                extensions,
            )?);
        }
        Ok(Sweep {
            place: place.to_string(),
            text: text.to_string(),
            points: prepared,
            base,
            overrides: overrides.clone(),
        })
    }

    /// Reads and checks a sweep file.
    pub fn load(path: &str, overrides: &Overrides, extensions: &[Extension]) -> Result<Sweep> {
        let text = crate::machine::validate::read_bounded(path, "sweep file")?;
        Sweep::parse(path, &text, overrides, extensions)
    }

    /// Runs point `i` (any thread, any process: the row depends only on the point).
    pub fn run_point(&self, i: usize, extensions: &[Extension]) -> Record {
        run::record(&self.points[i], extensions)
    }

    /// The output file's key-value metadata: what produced it and from what.
    pub fn metadata(&self) -> Vec<(String, String)> {
        vec![
            ("kharden.version".into(), env!("CARGO_PKG_VERSION").into()),
            ("kharden.sweep_file".into(), self.place.clone()),
            ("kharden.sweep_text".into(), self.text.clone()),
            ("kharden.set".into(), self.overrides.to_json().to_string()),
            ("kharden.params".into(), self.base.to_json().to_string()),
        ]
    }
}

/// How a sweep is run.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Threads running points (0: one per core).
    pub threads: usize,
    /// How often the output is rewritten while points finish (a resumable checkpoint).
    pub checkpoint: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            threads: 0,
            checkpoint: Duration::from_secs(2),
        }
    }
}

/// What a run did, for the closing line.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub points: usize,
    pub skipped: usize,
    pub ran: usize,
    pub failed: usize,
}

/// The rows of a sweep's output: those already in the file (kept, their points skipped)
/// and those run now, in point order, then rows of points the file no longer names.
pub struct Book {
    rows: Vec<Option<Record>>,
    index: HashMap<String, usize>,
    foreign: Vec<Record>,
    /// Points whose rows were in the file when it was opened.
    pub skipped: usize,
}

impl Book {
    /// Opens `output` for `sweep`. An output written by another version or from other
    /// base parameters is refused rather than mixed.
    pub fn open(sweep: &Sweep, output: &Path) -> Result<Book> {
        let old = if output.exists() {
            let (records, meta) = read(output)?;
            let ours = sweep.metadata();
            for key in ["kharden.version", "kharden.params"] {
                let mine = ours.iter().find(|(k, _)| k == key).map(|(_, v)| v);
                let theirs = meta.iter().find(|(k, _)| k == key).map(|(_, v)| v);
                if mine != theirs {
                    return Err(Error::at(
                        output.display(),
                        format!("cannot resume: written with a different {key}; remove it or choose another output"),
                    ));
                }
            }
            records
        } else {
            vec![]
        };
        let index: HashMap<String, usize> = sweep
            .points
            .iter()
            .enumerate()
            .map(|(i, p)| (p.point.key(), i))
            .collect();
        let mut book = Book {
            rows: vec![None; sweep.points.len()],
            index,
            foreign: vec![],
            skipped: 0,
        };
        for r in old {
            match book.index.get(&r.key) {
                Some(&i) => book.rows[i] = Some(r),
                None => book.foreign.push(r),
            }
        }
        book.skipped = book.rows.iter().flatten().count();
        Ok(book)
    }

    /// Points without a row.
    pub fn todo(&self) -> Vec<usize> {
        (0..self.rows.len())
            .filter(|&i| self.rows[i].is_none())
            .collect()
    }

    /// Files a row under its point (found by key); a row of no point of the sweep is an error.
    pub fn put(&mut self, record: Record) -> Result<()> {
        let i = *self.index.get(&record.key).ok_or_else(|| {
            Error::new(format!("a row for no point of the sweep: {}", record.key))
        })?;
        self.rows[i] = Some(record);
        Ok(())
    }

    pub fn records(&self) -> Vec<Record> {
        let ours = self.rows.iter().flatten();
        ours.chain(self.foreign.iter()).cloned().collect()
    }

    pub fn write(&self, sweep: &Sweep, output: &Path) -> Result<()> {
        write(output, &self.records(), &sweep.metadata())
    }
}

/// Runs the sweep's points not yet in `output` and writes every row there, checkpointing
/// as points finish. `progress(done, total)` is called after each point.
pub fn run_to_file(
    sweep: &Sweep,
    output: &Path,
    options: Options,
    extensions: &[Extension],
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Summary> {
    let mut book = Book::open(sweep, output)?;
    let todo = book.todo();
    let total = sweep.points.len();
    let mut summary = Summary {
        points: total,
        skipped: book.skipped,
        ..Summary::default()
    };
    progress(summary.skipped, total);
    let mut last = Instant::now();
    let mut result = Ok(());
    par_run(sweep, &todo, options.threads, extensions, |_, record| {
        summary.ran += 1;
        summary.failed += record.error().is_some() as usize;
        if let Err(e) = book.put(record) {
            result = Err(e);
        }
        progress(summary.skipped + summary.ran, total);
        if result.is_ok() && last.elapsed() >= options.checkpoint && summary.ran < todo.len() {
            last = Instant::now();
            result = book.write(sweep, output);
        }
    });
    result?;
    book.write(sweep, output)?;
    Ok(summary)
}

/// Runs every point in memory (no file): the rows in point order.
pub fn run_all(sweep: &Sweep, threads: usize, extensions: &[Extension]) -> Vec<Record> {
    let mut rows: Vec<Option<Record>> = vec![None; sweep.points.len()];
    let all: Vec<usize> = (0..rows.len()).collect();
    par_run(sweep, &all, threads, extensions, |i, r| rows[i] = Some(r));
    rows.into_iter().flatten().collect()
}

/// Runs points `todo` on `threads` threads (0: one per core), handing each row to `done`
/// on this thread as it finishes. A row depends only on its point, never on the thread.
fn par_run(
    sweep: &Sweep,
    todo: &[usize],
    threads: usize,
    extensions: &[Extension],
    mut done: impl FnMut(usize, Record),
) {
    crate::sim::parallel::for_each_index(
        todo.len(),
        threads,
        |j| sweep.run_point(todo[j], extensions),
        |j, record| done(todo[j], record),
    );
}

#[cfg(test)]
mod tests;
