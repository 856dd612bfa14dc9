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
            fitted: false,
        }
    }
    /// True when the row has a target and misses it.
    pub fn misses(&self) -> bool {
        matches!((self.error_pct, self.tolerance_pct), (Some(e), Some(t)) if e.abs() > t)
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
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The resolved parameters the rows ran with (path -> value, unit, provenance), so any
    /// figure can be re-run from this output; `None` where the experiment has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub params: Option<serde_json::Value>,
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
                r.error_pct.map_or("-".into(), |e| format!("{e:+.1}")),
                r.tolerance_pct.map_or("-".into(), |t| format!("{t:.0}")),
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
