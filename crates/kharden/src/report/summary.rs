//! `reproduce all`'s one screen: per experiment, how many of its published rows the model
//! predicts within tolerance, mechanism costs (added over a baseline) apart from absolute
//! rows, what was fitted, and its worst miss with the first clause of its reason.

use super::{table::Table, Reproduction, Row};

/// Counts over some rows, as the summary prints them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub published: usize,
    /// Mechanism rows (added cost over a baseline) that are predictions, and those within
    /// tolerance; a null model's passes are not among them.
    pub mechanism: usize,
    pub mechanism_ok: usize,
    /// Every other predicted row, judged by its absolute figure.
    pub absolute: usize,
    pub absolute_ok: usize,
    /// Predicted rows a model with no effect would pass too (counted apart).
    pub null: usize,
    pub fitted_rows: usize,
    pub derived_rows: usize,
    pub fitted_parameters: u32,
}

impl Counts {
    pub fn of(reps: &[Reproduction]) -> Counts {
        let mut c = Counts::default();
        for rep in reps {
            c.fitted_parameters += rep.fitted_parameters;
            for r in &rep.rows {
                c.add(r);
            }
        }
        c
    }

    fn add(&mut self, r: &Row) {
        if r.published.is_none() {
            return;
        }
        self.published += 1;
        if r.fitted {
            self.fitted_rows += 1;
        } else if r.derived.is_some() {
            self.derived_rows += 1;
        } else if r.null_passes {
            self.null += 1;
        } else if r.added.is_some() {
            self.mechanism += 1;
            self.mechanism_ok += usize::from(!r.misses());
        } else {
            self.absolute += 1;
            self.absolute_ok += usize::from(!r.misses());
        }
    }

    /// The closing line of `reproduce all`.
    pub fn line(&self, experiments: usize) -> String {
        format!(
            "summary: {experiments} experiments, {} published rows: mechanism costs {} of {} predicted within tolerance, absolute rows {} of {}; {} rows a null model also meets, {} rows derived from fits, {} rows fitted ({} fitted parameters)",
            self.published,
            self.mechanism_ok,
            self.mechanism,
            self.absolute_ok,
            self.absolute,
            self.null,
            self.derived_rows,
            self.fitted_rows,
            self.fitted_parameters
        )
    }
}

/// How many tolerances a row is off by (an added cost by the nearer of its two criteria).
fn tolerances_off(r: &Row) -> f64 {
    match &r.added {
        Some(a) => {
            (a.error_pct.abs() / a.tolerance_pct).min(a.difference_pp.abs() / a.tolerance_pp)
        }
        None => {
            let tolerance = r.tolerance_pct.or(r.tolerance_pp).unwrap_or(1.0);
            r.judged_error().map_or(0.0, |e| e.abs() / tolerance)
        }
    }
}

/// A row's error as the summary names it: an added cost's in percent of it, or in points
/// where the published cost is within a few points of nothing.
fn error_text(r: &Row) -> String {
    match &r.added {
        Some(a) => format!("added {}", a.error_text()),
        None if r.error_pct.is_none() => format!("{:+.1} pp", r.judged_error().unwrap_or(0.0)),
        None => format!("{:+.0}%", r.judged_error().unwrap_or(0.0)),
    }
}

/// The predicted row that misses worst, measured in tolerances.
fn worst_miss(rep: &Reproduction) -> Option<&Row> {
    let over = tolerances_off;
    rep.rows
        .iter()
        .filter(|r| r.is_prediction() && r.misses())
        .max_by(|a, b| over(a).total_cmp(&over(b)))
}

/// The first clause of a reason, cut to `width` characters.
fn first_clause(text: &str, width: usize) -> String {
    // A clause ends at a full stop, semicolon or colon followed by a space (not at 1.5x).
    let end = ["; ", ". ", ": "]
        .iter()
        .filter_map(|p| text.find(p))
        .min()
        .unwrap_or(text.len());
    let clause = text[..end].trim();
    if clause.chars().count() <= width {
        clause.to_string()
    } else {
        let cut: String = clause.chars().take(width.saturating_sub(3)).collect();
        format!("{cut}...")
    }
}

fn ratio(ok: usize, of: usize) -> String {
    if of == 0 {
        "-".into()
    } else {
        format!("{ok}/{of}")
    }
}

/// One table of every experiment, its worst misses and the totals, for a terminal `width`
/// columns wide.
pub fn one_screen(reps: &[Reproduction], width: usize) -> String {
    let mut t = Table::new(
        "",
        &[
            "experiment",
            "published",
            "mechanism costs ok",
            "absolute ok",
            "null too",
            "fitted rows",
            "derived",
            "fitted params",
            "worst miss",
        ],
    );
    let mut reasons = vec![];
    for rep in reps {
        let c = Counts::of(std::slice::from_ref(rep));
        let worst = worst_miss(rep);
        t.push(vec![
            rep.experiment.clone(),
            c.published.to_string(),
            ratio(c.mechanism_ok, c.mechanism),
            ratio(c.absolute_ok, c.absolute),
            c.null.to_string(),
            c.fitted_rows.to_string(),
            c.derived_rows.to_string(),
            c.fitted_parameters.to_string(),
            worst.map_or("-".into(), |r| {
                format!("{} ({})", short_label(&r.label), error_text(r))
            }),
        ]);
        if let Some(r) = worst {
            let why = r
                .known_miss
                .as_deref()
                .unwrap_or("not explained (a new miss)");
            let head = format!("  {}: ", rep.experiment);
            reasons.push(format!(
                "{head}{}",
                first_clause(why, width.saturating_sub(head.len()).max(20))
            ));
        }
    }
    let mut out = t.to_string();
    if !reasons.is_empty() {
        out.push_str(
            "worst misses, why (kharden reproduce NAME for every row and the full reasons):\n",
        );
        for r in reasons {
            out.push_str(&r);
            out.push('\n');
        }
    }
    out.push_str(&Counts::of(reps).line(reps.len()));
    out.push('\n');
    out
}

/// A row label short enough for the table: its part before the first comma or colon
/// where the label is long.
fn short_label(label: &str) -> String {
    if label.chars().count() <= 40 {
        return label.to_string();
    }
    let cut: String = label.chars().take(37).collect();
    format!("{cut}...")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_keep_mechanism_costs_apart_from_absolute_rows() {
        let mut rows = vec![
            Row::compared("base", "ns", 100.0, 100.0, 10.0),
            Row::compared("on", "ns", 150.0, 148.0, 10.0),
            Row::compared("small", "ns", 100.5, 103.0, 10.0),
            Row::compared("alone", "ns", 10.0, 20.0, 10.0),
        ];
        rows[0].fitted = true;
        rows[1].baseline = Some("base".into());
        rows[2].baseline = Some("base".into());
        let mut rep = Reproduction {
            rows,
            fitted_parameters: 1,
            fitted: vec!["p".into()],
            ..Reproduction::new("x", "")
        };
        rep.judge("t").unwrap();
        let c = Counts::of(std::slice::from_ref(&rep));
        assert_eq!(
            (
                c.published,
                c.mechanism,
                c.mechanism_ok,
                c.absolute,
                c.absolute_ok,
                c.null,
                c.fitted_rows
            ),
            (4, 1, 1, 1, 0, 1, 1)
        );
        let screen = one_screen(&[rep], 80);
        assert!(screen.contains("alone (+100%)"), "{screen}");
        assert!(screen.contains("x: not explained (a new miss)"), "{screen}");
        assert!(
            screen.ends_with("1 rows fitted (1 fitted parameters)\n"),
            "{screen}"
        );
    }

    #[test]
    fn reasons_are_cut_at_their_first_clause() {
        assert_eq!(first_clause("short 1.5x; and more", 80), "short 1.5x");
        assert_eq!(first_clause("abcdefghij", 8), "abcde...");
    }
}
