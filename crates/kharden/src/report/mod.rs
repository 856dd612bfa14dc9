//! Reproduction reports: published vs simulated per table row, and the breakdown that explains it.

pub mod csv;
pub mod stats_json;
pub mod svg;
pub mod table;

use serde::Serialize;

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
    /// Set when the experiment file records that this row misses, and why; the reproduction
    /// tests then require it to miss (a fixed model must update the file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub known_miss: Option<String>,
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
            label: label.into(),
            unit: unit.into(),
            published: Some(published),
            simulated,
            error_pct: Some((simulated - published) / published * 100.0),
            tolerance_pct: Some(tolerance_pct),
            sampling_pct: None,
            known_miss: None,
            difference_pp: None,
            tolerance_pp: None,
            sign_required: false,
            fitted: false,
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
            difference_pp: None,
            tolerance_pp: None,
            sign_required: false,
            fitted: false,
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

    /// True when the row has a target and misses it.
    pub fn misses(&self) -> bool {
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
    /// Named parameters that were fitted, with the figure each was fitted to.
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
    /// Rows that have a target and miss it.
    pub fn misses(&self) -> usize {
        self.rows.iter().filter(|r| r.misses()).count()
    }

    /// Rows compared with a published figure that no parameter was fitted to.
    pub fn predicted_rows(&self) -> impl Iterator<Item = &Row> {
        self.rows
            .iter()
            .filter(|r| r.published.is_some() && !r.fitted)
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
        let mut t = table::Table::new(
            "",
            &[
                "row",
                "unit",
                "published",
                "simulated",
                "sampling ± %",
                "error %",
                "tolerance %",
                "verdict",
            ],
        );
        for r in &self.rows {
            t.push(vec![
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
                match (r.tolerance_pct, r.tolerance_pp) {
                    (Some(t), _) => format!("{t:.0}"),
                    (None, Some(t)) => format!("{t:.0} pp"),
                    (None, None) => "-".into(),
                },
                match (r.misses(), r.fitted, &r.known_miss) {
                    (false, true, _) => "fitted".into(),
                    (false, false, _) => "ok".into(),
                    (true, true, _) => "MISS (fitted)".into(),
                    (true, false, None) => "MISS".into(),
                    (true, false, Some(_)) => "MISS (known)".into(),
                },
            ]);
        }
        write!(f, "{t}")?;
        writeln!(f, "fitted parameters: {}", self.fitted_parameters)?;
        for p in &self.fitted {
            writeln!(f, "  fitted: {p}")?;
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
