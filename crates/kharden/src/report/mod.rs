//! Reproduction reports: published vs simulated per table row, and the breakdown that explains it.

pub mod csv;
pub mod judge;
pub mod results_svg;
pub mod stats_json;
pub mod summary;
pub mod svg;
pub mod table;

pub use judge::{Added, Judging, KnownMiss};
use serde::Serialize;
use std::collections::BTreeMap;

/// One row of a reproduced table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub label: String,
    pub unit: String,
    /// The figure the source published; `None` for a prediction nobody published.
    pub published: Option<f64>,
    pub simulated: f64,
    /// (simulated - published) / published * 100; `None` for predictions.
    pub error_pct: Option<f64>,
    pub tolerance_pct: Option<f64>,
    /// Standard error of the simulated figure over independent samples (seeds), in percent
    /// of it; `None` when the row was simulated once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampling_pct: Option<f64>,
    /// Set when the experiment file records that this row misses, and why (its figures
    /// rendered from the run); the reproduction tests then require it to miss, with its
    /// judged error inside `known_miss_band` (a fixed or a worse model must update the file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub known_miss: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub known_miss_band: Option<[f64; 2]>,
    /// For rows compared in percentage points (gains): simulated - published, and the
    /// tolerance on it; `error_pct` is then `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub difference_pp: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tolerance_pp: Option<f64>,
    /// The simulated figure must have the published one's sign (a gain must be a gain).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub sign_required: bool,
    /// A parameter was fitted to this row's published figure: its error says how well the
    /// fit converged, not how well the model predicts, and it is never counted as a
    /// prediction.
    pub fitted: bool,
    /// Set when the row follows from a fitted one by construction (seconds that are fitted
    /// cycles over the clock, a row the model cannot tell from a fitted one): why. Such a
    /// row is never counted as a prediction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub derived: Option<String>,
    /// The label of the row this one is the same configuration of without its mechanism
    /// (same machine and workload): the row is then a mechanism row, judged by what it adds
    /// over that baseline (`added`), not by its absolute figure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub added: Option<Added>,
    /// A model with no effect at all (no gain, no added cost) would meet this row's target
    /// too, so meeting it tells nothing: counted apart from the predictions.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub null_passes: bool,
}

impl Row {
    pub fn compared(
        label: &str,
        unit: &str,
        published: f64,
        simulated: f64,
        tolerance_pct: f64,
    ) -> Row {
        Row {
            published: Some(published),
            error_pct: Some((simulated - published) / published * 100.0),
            tolerance_pct: Some(tolerance_pct),
            ..Row::predicted(label, unit, simulated)
        }
    }
    pub fn predicted(label: &str, unit: &str, simulated: f64) -> Row {
        Row {
            label: label.into(),
            unit: unit.into(),
            published: None,
            simulated,
            error_pct: None,
            tolerance_pct: None,
            sampling_pct: None,
            known_miss: None,
            known_miss_band: None,
            difference_pp: None,
            tolerance_pp: None,
            sign_required: false,
            fitted: false,
            derived: None,
            baseline: None,
            added: None,
            null_passes: false,
        }
    }
    /// A gain in percent compared in percentage points: it misses when it is more than
    /// `tolerance_pp` away from the published gain, or (`sign_required`) has another sign.
    pub fn compared_points(
        label: &str,
        published: f64,
        simulated: f64,
        tolerance_pp: f64,
        sign_required: bool,
    ) -> Row {
        Row {
            error_pct: None,
            tolerance_pct: None,
            difference_pp: Some(simulated - published),
            tolerance_pp: Some(tolerance_pp),
            sign_required,
            published: Some(published),
            ..Row::predicted(label, "% gain", simulated)
        }
    }

    /// True when the row has a target and misses it: a mechanism row its added cost's, any
    /// other row its absolute figure's.
    pub fn misses(&self) -> bool {
        if let Some(a) = &self.added {
            return a.misses();
        }
        let relative =
            matches!((self.error_pct, self.tolerance_pct), (Some(e), Some(t)) if e.abs() > t);
        let points =
            matches!((self.difference_pp, self.tolerance_pp), (Some(d), Some(t)) if d.abs() > t);
        // Zero has no sign: a gain of nothing is not the published gain's sign.
        let sign = self.sign_required
            && self.published.is_some_and(|p| {
                (p * self.simulated).partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
            });
        relative || points || sign
    }

    /// The error the verdict rests on, in the unit of its tolerance: the added cost's
    /// relative error (%) for a mechanism row, else the absolute error (%) or the
    /// difference in points of a gain.
    pub fn judged_error(&self) -> Option<f64> {
        match &self.added {
            Some(a) => Some(a.error_pct),
            None => self.error_pct.or(self.difference_pp),
        }
    }

    /// Compared with a published figure, and no parameter fitted to it or to what it
    /// follows from.
    pub fn is_prediction(&self) -> bool {
        self.published.is_some() && !self.fitted && self.derived.is_none()
    }

    /// The verdict column: what the row is and whether it meets its target.
    pub fn verdict(&self) -> &'static str {
        match (
            self.misses(),
            self.fitted,
            self.derived.is_some(),
            &self.known_miss,
        ) {
            (false, true, _, _) => "fitted",
            (true, true, _, _) => "MISS (fitted)",
            (false, false, true, _) => "derived",
            (true, false, true, _) => "MISS (derived)",
            (false, false, false, _) if self.null_passes => "ok (null too)",
            (false, false, false, _) => "ok",
            (true, false, false, None) => "MISS",
            (true, false, false, Some(_)) => "MISS (known)",
        }
    }
}

/// A whole reproduction: the rows, how many parameters were fitted, and free-form
/// breakdown tables that show where the time went.
#[derive(Debug, Clone, Serialize)]
pub struct Reproduction {
    pub experiment: String,
    /// Where the published figures come from.
    pub source: String,
    pub rows: Vec<Row>,
    pub fitted_parameters: u32,
    /// Named parameters that were fitted, with the figure each was fitted to and what the
    /// fit absorbed.
    pub fitted: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub predictions: Vec<Row>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub breakdowns: Vec<table::Table>,
    /// Charts (SVG) the reproduction drew; `kharden reproduce --figures DIR` writes them.
    #[serde(skip)]
    pub figures: Vec<Figure>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Figures of the run a known-miss text may quote by name (`{coverage_pct}`), so that
    /// its explanation cannot go stale.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub values: BTreeMap<String, f64>,
    /// The resolved parameters the rows ran with (path -> value, unit, provenance), so any
    /// figure can be re-run from this output; `None` where the experiment has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub params: Option<serde_json::Value>,
}

/// A chart of a reproduction, as SVG text, named for its file (NAME.svg).
#[derive(Debug, Clone)]
pub struct Figure {
    pub name: String,
    pub svg: String,
}

impl Reproduction {
    /// An empty reproduction of `experiment`, for its runner to fill.
    pub fn new(experiment: &str, source: &str) -> Self {
        Reproduction {
            experiment: experiment.into(),
            source: source.into(),
            rows: vec![],
            fitted_parameters: 0,
            fitted: vec![],
            predictions: vec![],
            breakdowns: vec![],
            figures: vec![],
            notes: vec![],
            values: BTreeMap::new(),
            params: None,
        }
    }

    /// Rows that have a target and miss it.
    pub fn misses(&self) -> usize {
        self.rows.iter().filter(|r| r.misses()).count()
    }

    /// Rows compared with a published figure that no parameter was fitted to, nor to what
    /// they follow from (see `Row::is_prediction`), including those a null model passes.
    pub fn predicted_rows(&self) -> impl Iterator<Item = &Row> {
        self.rows.iter().filter(|r| r.is_prediction())
    }

    /// Rows a parameter was fitted to.
    pub fn fitted_rows(&self) -> usize {
        self.rows.iter().filter(|r| r.fitted).count()
    }
}

fn fmt_num(v: f64) -> String {
    if v.abs() >= 1e6 {
        format!("{v:.4e}")
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

impl std::fmt::Display for Reproduction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "== {} ==", self.experiment)?;
        writeln!(f, "source: {}", self.source)?;
        let mechanism = self.rows.iter().any(|r| r.added.is_some());
        let mut header = vec![
            "row",
            "unit",
            "published",
            "simulated",
            "sampling ± %",
            "error %",
        ];
        if mechanism {
            header.extend(["added: published", "simulated", "error"]);
        }
        header.extend(["tolerance", "verdict"]);
        let mut t = table::Table::new("", &header);
        for r in &self.rows {
            let mut cells = vec![
                r.label.clone(),
                r.unit.clone(),
                r.published.map_or("-".into(), fmt_num),
                fmt_num(r.simulated),
                r.sampling_pct.map_or("-".into(), |e| format!("{e:.1}")),
                match (r.error_pct, r.difference_pp) {
                    (Some(e), _) => format!("{e:+.1}"),
                    (None, Some(d)) => format!("{d:+.1} pp"),
                    (None, None) => "-".into(),
                },
            ];
            if mechanism {
                match &r.added {
                    Some(a) => cells.extend([
                        judge::fmt_added(a.published_pct),
                        judge::fmt_added(a.simulated_pct),
                        a.error_text(),
                    ]),
                    None => cells.extend(["-".into(), "-".into(), "-".into()]),
                }
            }
            cells.push(match (&r.added, r.tolerance_pct, r.tolerance_pp) {
                (Some(a), _, _) => format!("{:.0}% or {:.0} pp", a.tolerance_pct, a.tolerance_pp),
                (None, Some(t), _) => format!("{t:.0}%"),
                (None, None, Some(t)) => format!("{t:.0} pp"),
                (None, None, None) => "-".into(),
            });
            cells.push(r.verdict().into());
            t.push(cells);
        }
        write!(f, "{t}")?;
        let baselines: Vec<String> = self
            .rows
            .iter()
            .filter_map(|r| Some(format!("\"{}\" over \"{}\"", r.label, r.baseline.as_ref()?)))
            .collect();
        if !baselines.is_empty() {
            writeln!(
                f,
                "added = mechanism row / its baseline - 1, judged within {:.0}% of the published added cost or {:.0} points of it: {}",
                judge::ADDED_TOLERANCE_PCT,
                judge::ADDED_TOLERANCE_PP,
                baselines.join("; ")
            )?;
        }
        writeln!(f, "fitted parameters: {}", self.fitted_parameters)?;
        for p in &self.fitted {
            writeln!(f, "  fitted: {p}")?;
        }
        for r in self.rows.iter() {
            if let Some(why) = &r.derived {
                writeln!(f, "derived, {}: {why}", r.label)?;
            }
        }
        let null: Vec<&str> = self
            .rows
            .iter()
            .filter(|r| r.null_passes && r.is_prediction())
            .map(|r| r.label.as_str())
            .collect();
        if !null.is_empty() {
            writeln!(
                f,
                "a model with no effect at all would meet these rows' targets too (counted apart): {}",
                null.join("; ")
            )?;
        }
        if !self.predictions.is_empty() {
            let mut p = table::Table::new(
                "\npredictions (nobody published these):",
                &["row", "unit", "simulated"],
            );
            for r in &self.predictions {
                p.push(vec![r.label.clone(), r.unit.clone(), fmt_num(r.simulated)]);
            }
            write!(f, "{p}")?;
        }
        for b in &self.breakdowns {
            writeln!(f)?;
            write!(f, "{b}")?;
        }
        for r in self.rows.iter().filter(|r| r.misses()) {
            if let Some(why) = &r.known_miss {
                writeln!(f, "known miss, {}: {why}", r.label)?;
            }
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        Ok(())
    }
}
