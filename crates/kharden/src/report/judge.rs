//! How a reproduction's rows are judged once simulated: a mechanism row by what it adds over
//! its own baseline row (M/B - 1, published against simulated), any other row by its absolute
//! figure; which rows a model with no effect at all would pass too; and known-miss texts,
//! whose figures come from the run (docs/design/mechanism-cost.md).

use super::{Reproduction, Row};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// An added cost is within tolerance when its relative error is at most this...
pub const ADDED_TOLERANCE_PCT: f64 = 20.0;
/// ...or when it is at most this many percentage points from the published one (an added
/// cost of a few percent has no meaningful relative error).
pub const ADDED_TOLERANCE_PP: f64 = 2.0;

/// What a mechanism row adds over its baseline, published and simulated, in percent of the
/// baseline (M/B - 1).
#[derive(Debug, Clone, Serialize)]
pub struct Added {
    #[serde(rename = "added_published_pct")]
    pub published_pct: f64,
    #[serde(rename = "added_simulated_pct")]
    pub simulated_pct: f64,
    /// (simulated - published) / |published| * 100.
    #[serde(rename = "added_error_pct")]
    pub error_pct: f64,
    /// simulated - published, in percentage points of the baseline.
    #[serde(rename = "added_difference_pp")]
    pub difference_pp: f64,
    /// Standard error of the simulated added cost in points, from both rows' sampling
    /// errors; `None` when neither was sampled.
    #[serde(rename = "added_sampling_pp", skip_serializing_if = "Option::is_none")]
    pub sampling_pp: Option<f64>,
    #[serde(rename = "added_tolerance_pct")]
    pub tolerance_pct: f64,
    #[serde(rename = "added_tolerance_pp")]
    pub tolerance_pp: f64,
}

impl Added {
    /// `mechanism` over `baseline`, both with published figures.
    pub fn between(mechanism: &Row, baseline: &Row) -> Option<Added> {
        let (pm, pb) = (mechanism.published?, baseline.published?);
        let published_pct = (pm / pb - 1.0) * 100.0;
        let ratio = mechanism.simulated / baseline.simulated;
        let simulated_pct = (ratio - 1.0) * 100.0;
        let sampling_pp = match (mechanism.sampling_pct, baseline.sampling_pct) {
            (None, None) => None,
            (m, b) => Some(ratio * m.unwrap_or(0.0).hypot(b.unwrap_or(0.0))),
        };
        Some(Added {
            published_pct,
            simulated_pct,
            error_pct: (simulated_pct - published_pct) / published_pct.abs() * 100.0,
            difference_pp: simulated_pct - published_pct,
            sampling_pp,
            tolerance_pct: ADDED_TOLERANCE_PCT,
            tolerance_pp: ADDED_TOLERANCE_PP,
        })
    }

    pub fn misses(&self) -> bool {
        !(self.error_pct.abs() <= self.tolerance_pct
            || self.difference_pp.abs() <= self.tolerance_pp)
    }

    /// The error as a reader weighs it: in points where the published cost is within a few
    /// points of nothing (a percent of a near-zero cost says nothing), else in percent of it.
    pub fn error_text(&self) -> String {
        if self.published_pct.abs() < 5.0 * self.tolerance_pp {
            format!("{:+.1} pp", self.difference_pp)
        } else {
            format!("{:+.1}%", self.error_pct)
        }
    }

    /// A model that adds nothing (0%) would be within tolerance of the published cost.
    fn null_passes(&self) -> bool {
        self.published_pct.abs() <= self.tolerance_pp
    }
}

/// An added cost as a reader says it: +41.0% below a doubling, +25.4x above.
pub fn fmt_added(pct: f64) -> String {
    if pct.abs() >= 100.0 {
        format!("{:+.1}x", pct / 100.0)
    } else {
        format!("{pct:+.1}%")
    }
}

/// An experiment file's `known_miss = { band = [LO, HI], why = "..." }`: the row misses,
/// here is why, and its judged error (`Row::judged_error`, in its tolerance's unit) stays
/// within the band; a fix or a regression must update the file. `why` may quote the run's
/// figures by name: `{error}`, `{simulated}`, `{published}`, `{added}`, `{published_added}`
/// and the reproduction's `values` (`{coverage_pct}`, `{jobs:.0}`); `{{` is a brace.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnownMiss {
    pub why: String,
    pub band: [f64; 2],
}

/// How an experiment file's [[row]] is judged, whatever the experiment's kind: `baseline`,
/// the row without the mechanism, whose added cost this row is judged by; `known_miss =
/// { band, why }`; `derived`, why the row follows from a fitted one.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Judging {
    pub baseline: Option<String>,
    pub known_miss: Option<KnownMiss>,
    pub derived: Option<String>,
}

impl Judging {
    /// Sets what the file says on the row its runner built.
    pub fn mark(&self, row: &mut Row) {
        row.baseline = self.baseline.clone();
        row.known_miss = self.known_miss.as_ref().map(|k| k.why.clone());
        row.known_miss_band = self.known_miss.as_ref().map(|k| k.band);
        row.derived = self.derived.clone();
    }
}

impl Reproduction {
    /// Judges every row once all are simulated: added costs over baselines, the null
    /// model's verdict, known-miss texts rendered from the run's figures. `place` names the
    /// experiment file for errors.
    pub fn judge(&mut self, place: &str) -> Result<()> {
        for i in 0..self.rows.len() {
            let Some(base) = self.rows[i].baseline.clone() else {
                continue;
            };
            let row = &self.rows[i];
            let b = self.rows.iter().find(|r| r.label == base).ok_or_else(|| {
                Error::at(
                    place,
                    format!(
                        "row \"{}\": baseline: no row labelled \"{base}\"",
                        row.label
                    ),
                )
            })?;
            if b.baseline.is_some() || b.label == row.label {
                return Err(Error::at(
                    place,
                    format!(
                        "row \"{}\": baseline \"{base}\" is a mechanism row itself: expected a row without a baseline",
                        row.label
                    ),
                ));
            }
            let added = Added::between(row, b).ok_or_else(|| {
                Error::at(
                    place,
                    format!(
                        "row \"{}\": a baseline needs both rows published",
                        row.label
                    ),
                )
            })?;
            self.rows[i].added = Some(added);
        }
        for r in &mut self.rows {
            r.null_passes = match (&r.added, r.difference_pp, r.tolerance_pp) {
                (Some(a), _, _) => a.null_passes(),
                (None, Some(_), Some(t)) => {
                    !r.sign_required && r.published.is_some_and(|p| p.abs() <= t)
                }
                _ => false,
            };
        }
        for i in 0..self.rows.len() {
            if let Some(text) = self.rows[i].known_miss.clone() {
                let rendered = render(&text, &self.rows[i], self).map_err(|e| {
                    Error::at(
                        place,
                        format!("row \"{}\": known_miss: {e}", self.rows[i].label),
                    )
                })?;
                self.rows[i].known_miss = Some(rendered);
            }
        }
        Ok(())
    }
}

impl Reproduction {
    /// What the reproduction tests hold every experiment to (`Err` says what fails): each
    /// fitted parameter named and marking the row it was fitted to; every row within its
    /// tolerance unless it records a known miss; every known miss still missing, with its
    /// judged error inside the band it records (so neither a fix nor a regression goes
    /// unnoticed).
    pub fn check_rows(&self) -> std::result::Result<(), String> {
        let name = &self.experiment;
        if self.fitted.len() as u32 != self.fitted_parameters {
            return Err(format!(
                "{name}: {} fitted parameters, {} named",
                self.fitted_parameters,
                self.fitted.len()
            ));
        }
        if self.fitted_rows() as u32 != self.fitted_parameters {
            return Err(format!(
                "{name}: {} fitted parameters mark {} rows: each fit marks the row it was fitted to",
                self.fitted_parameters,
                self.fitted_rows()
            ));
        }
        for r in &self.rows {
            let e = r
                .judged_error()
                .ok_or(format!("{name}: \"{}\" has no target", r.label))?;
            match (&r.known_miss, r.known_miss_band) {
                (None, _) if r.misses() => {
                    return Err(format!("{name}: \"{}\" misses ({e:+.1}) and records no known miss", r.label))
                }
                (None, _) => {}
                (Some(_), _) if !r.misses() => {
                    return Err(format!("{name}: \"{}\" is within tolerance ({e:+.1}) but recorded as a known miss", r.label))
                }
                (Some(_), Some([lo, hi])) if !(lo..=hi).contains(&e) => {
                    return Err(format!("{name}: \"{}\" misses by {e:+.1}, outside its known band [{lo}, {hi}]: update the experiment's known_miss", r.label))
                }
                (Some(_), Some(_)) => {}
                (Some(_), None) => return Err(format!("{name}: \"{}\": a known miss without its band", r.label)),
            }
        }
        Ok(())
    }
}

/// `text` with every `{name}` or `{name:.N}` replaced by the run's figure of that name.
fn render(text: &str, row: &Row, rep: &Reproduction) -> std::result::Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find(['{', '}']) {
        out.push_str(&rest[..open]);
        let brace = rest.as_bytes()[open];
        if rest[open + 1..].starts_with(brace as char) {
            out.push(brace as char);
            rest = &rest[open + 2..];
            continue;
        }
        if brace == b'}' {
            return Err("a lone '}': write '}}' for a brace".into());
        }
        let close = rest[open..]
            .find('}')
            .ok_or("a '{' without its '}': write '{{' for a brace")?
            + open;
        let spec = &rest[open + 1..close];
        // NAME, NAME:.DIGITS or NAME:+.DIGITS (with the sign).
        let (name, format) = spec.split_once(':').unwrap_or((spec, ""));
        let (sign, digits) = match format.strip_prefix('+').unwrap_or(format) {
            "" => (format.starts_with('+'), None),
            d => match d.strip_prefix('.').and_then(|d| d.parse::<usize>().ok()) {
                Some(d) => (format.starts_with('+'), Some(d)),
                None => {
                    return Err(format!(
                        "{{{spec}}}: expected {{name}}, {{name:.DIGITS}} or {{name:+.DIGITS}}"
                    ))
                }
            },
        };
        let text = figure(name, digits, row, rep)?;
        // A plain figure asked for with its sign gets one (signed figures already have it).
        if sign && !text.starts_with(['+', '-']) {
            out.push('+');
        }
        out.push_str(&text);
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn figure(
    name: &str,
    digits: Option<usize>,
    row: &Row,
    rep: &Reproduction,
) -> std::result::Result<String, String> {
    let plain = |v: f64| match digits {
        Some(d) => format!("{v:.d$}"),
        None => super::fmt_num(v),
    };
    let signed = |v: f64, unit: &str| format!("{v:+.prec$}{unit}", prec = digits.unwrap_or(1));
    let added = |f: fn(&super::Added) -> f64| {
        row.added
            .as_ref()
            .map(|a| fmt_added(f(a)))
            .ok_or(format!("{{{name}}}: the row has no baseline"))
    };
    Ok(match name {
        "error" => match (&row.added, row.error_pct, row.difference_pp) {
            (Some(a), _, _) => signed(a.error_pct, "%"),
            (None, Some(e), _) => signed(e, "%"),
            (None, None, Some(d)) => signed(d, " points"),
            _ => return Err("{error}: the row has no target".into()),
        },
        "simulated" => plain(row.simulated),
        "published" => plain(row.published.ok_or("{published}: the row has none")?),
        "added" => added(|a| a.simulated_pct)?,
        "published_added" => added(|a| a.published_pct)?,
        // The row's own figure of that name first (`ROW/NAME` in the values), then the
        // reproduction's.
        other => match rep
            .values
            .get(&format!("{}/{other}", row.label))
            .or(rep.values.get(other))
        {
            Some(&v) => plain(v),
            None => {
                let own = format!("{}/", row.label);
                let known: Vec<&str> = [
                    "error",
                    "simulated",
                    "published",
                    "added",
                    "published_added",
                ]
                .into_iter()
                .chain(rep.values.keys().map(|k| k.strip_prefix(&own).unwrap_or(k)))
                .collect();
                return Err(format!(
                    "{{{other}}}: no such figure: expected one of {}",
                    known.join(", ")
                ));
            }
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rep(rows: Vec<Row>) -> Reproduction {
        Reproduction {
            rows,
            values: [("jobs".to_string(), 14249.4)].into(),
            ..Reproduction::new("x", "")
        }
    }

    fn with_baseline(mut r: Row, b: &str) -> Row {
        r.baseline = Some(b.into());
        r
    }

    #[test]
    fn a_mechanism_row_is_judged_by_what_it_adds() {
        // Published 339 -> 478 ns (+41%); simulated 339 -> 406 (+19.8%): the absolute row
        // is 15% off, its added cost half the published one.
        let mut r = rep(vec![
            Row::compared("off", "ns", 339.0, 339.0, 10.0),
            with_baseline(Row::compared("on", "ns", 478.0, 406.0, 30.0), "off"),
        ]);
        r.judge("t").unwrap();
        let a = r.rows[1].added.as_ref().unwrap();
        assert!((a.published_pct - 41.0).abs() < 0.1);
        assert!((a.simulated_pct - 19.76).abs() < 0.01);
        assert!((a.error_pct + 51.8).abs() < 0.1);
        // Within the absolute tolerance of 30%, but the verdict is the added cost's.
        assert!(r.rows[1].error_pct.unwrap().abs() < 30.0);
        assert!(r.rows[1].misses());
        assert_eq!(r.rows[1].judged_error(), Some(a.error_pct));
        assert!(!r.rows[1].null_passes);
    }

    #[test]
    fn a_small_added_cost_is_judged_in_points_and_the_null_model_meets_it() {
        // -0.2% published, +1.5% simulated: 850% off relatively, 1.7 points absolutely.
        let mut r = rep(vec![
            Row::compared("atomic", "cycles", 100.0, 100.0, 10.0),
            with_baseline(Row::compared("fast", "cycles", 99.8, 101.5, 10.0), "atomic"),
        ]);
        r.judge("t").unwrap();
        assert!(!r.rows[1].misses());
        assert!(
            r.rows[1].null_passes,
            "a model adding nothing meets -0.2% too"
        );
        assert_eq!(r.rows[1].verdict(), "ok (null too)");
    }

    #[test]
    fn a_gain_the_null_model_meets_is_marked() {
        let mut r = rep(vec![
            Row::compared_points("small", 2.0, 2.5, 3.0, false),
            Row::compared_points("large", 20.0, 18.0, 3.0, false),
            Row::compared_points("small, sign required", 2.0, 2.5, 3.0, true),
        ]);
        r.judge("t").unwrap();
        let null: Vec<bool> = r.rows.iter().map(|r| r.null_passes).collect();
        assert_eq!(null, [true, false, false]);
    }

    #[test]
    fn sampling_errors_combine_into_the_added_cost() {
        let mut base = Row::compared("b", "s", 100.0, 100.0, 15.0);
        base.sampling_pct = Some(3.0);
        let mut m = with_baseline(Row::compared("m", "s", 200.0, 200.0, 15.0), "b");
        m.sampling_pct = Some(4.0);
        let mut r = rep(vec![base, m]);
        r.judge("t").unwrap();
        // M/B = 2 with 5% relative error: 10 points.
        assert!((r.rows[1].added.as_ref().unwrap().sampling_pp.unwrap() - 10.0).abs() < 1e-9);
    }

    #[test]
    fn bad_baselines_are_one_line_errors() {
        let mut r = rep(vec![with_baseline(
            Row::compared("m", "s", 2.0, 2.0, 15.0),
            "nope",
        )]);
        let e = r.judge("experiments/x.toml").unwrap_err().to_string();
        assert!(
            e.starts_with("experiments/x.toml: row \"m\": baseline: no row labelled \"nope\""),
            "{e}"
        );
        let mut r = rep(vec![
            Row::compared("a", "s", 1.0, 1.0, 15.0),
            with_baseline(Row::compared("b", "s", 2.0, 2.0, 15.0), "a"),
            with_baseline(Row::compared("c", "s", 3.0, 3.0, 15.0), "b"),
        ]);
        let e = r.judge("t").unwrap_err().to_string();
        assert!(e.contains("is a mechanism row itself"), "{e}");
    }

    #[test]
    fn known_miss_texts_quote_the_run() {
        let mut m = with_baseline(Row::compared("m", "s", 200.0, 300.0, 15.0), "b");
        m.known_miss = Some("adds {added} where {published_added} was published ({error}); {jobs:.0} jobs ({jobs:+.1}), {{braces}}".into());
        let mut r = rep(vec![Row::compared("b", "s", 100.0, 100.0, 15.0), m]);
        r.judge("t").unwrap();
        assert_eq!(
            r.rows[1].known_miss.as_deref(),
            Some("adds +2.0x where +1.0x was published (+100.0%); 14249 jobs (+14249.4), {braces}")
        );
    }

    #[test]
    fn a_known_miss_naming_an_unknown_figure_is_an_error() {
        let mut m = Row::compared("m", "s", 200.0, 300.0, 15.0);
        m.known_miss = Some("was {stale_figure}".into());
        let mut r = rep(vec![m]);
        let e = r.judge("experiments/x.toml").unwrap_err().to_string();
        assert!(
            e.contains("known_miss: {stale_figure}: no such figure: expected one of error,"),
            "{e}"
        );
        assert!(e.contains("jobs"), "{e}");
        for bad in ["a { b", "a } b", "{added}", "{jobs:.x}", "{jobs:x}"] {
            let mut m = Row::compared("m", "s", 2.0, 3.0, 15.0);
            m.known_miss = Some(bad.into());
            assert!(rep(vec![m]).judge("t").is_err(), "{bad}");
        }
    }
}
