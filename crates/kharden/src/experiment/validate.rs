//! Checks of an experiment file before it runs (issue 18): finite numbers everywhere, a
//! tolerance and published figures that can be compared against, job counts the simulated
//! memory holds, and prediction machines that exist and load. Called by a one-line hook
//! from `run_text`; each runner's `parse` keeps its own checks.

use crate::error::{Error, Result};
use crate::machine::validate::finite_numbers;

/// Jobs per row at most: simulated memory ran out at about 2,250 compile jobs on a
/// one-node machine (issue 18); 1024 keeps every library machine well inside it.
pub const MAX_JOBS: i64 = 1024;

pub fn check(place: &str, text: &str) -> Result<()> {
    finite_numbers(place, text)?;
    let Ok(t) = text.parse::<toml::Table>() else {
        return Ok(()); // the typed parse reports syntax errors with their line
    };
    let bad = |key: String, msg: String| Err(Error::at(place, format!("{key}: {msg}")));
    if let Some(v) = t.get("tolerance_pct").and_then(number) {
        if !(v > 0.0 && v <= 100.0) {
            return bad(
                "tolerance_pct".into(),
                format!("expected 0 < % <= 100, got {v}"),
            );
        }
    }
    let tables = |name: &str| {
        t.get(name)
            .and_then(|v| v.as_array())
            .map(|a| a.iter().filter_map(|v| v.as_table()).collect::<Vec<_>>())
            .unwrap_or_default()
    };
    for (i, row) in tables("row").iter().enumerate() {
        let label = row.get("label").and_then(|v| v.as_str()).unwrap_or("?");
        if let Some(p) = row.get("published").and_then(number) {
            if p.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
                return bad(
                    format!("row[{i}] \"{label}\" published"),
                    format!("expected a positive figure, got {p}"),
                );
            }
        }
        if let Some(j) = row.get("jobs").and_then(|v| v.as_integer()) {
            if !(1..=MAX_JOBS).contains(&j) {
                return bad(
                    format!("row[{i}] \"{label}\" jobs"),
                    format!("expected 1..{MAX_JOBS}, got {j}"),
                );
            }
        }
    }
    for (i, p) in tables("prediction").iter().enumerate() {
        if let Some(m) = p.get("machine").and_then(|v| v.as_str()) {
            let label = p.get("label").and_then(|v| v.as_str()).unwrap_or("?");
            crate::machine::load(m).map_err(|e| {
                Error::at(place, format!("prediction[{i}] \"{label}\" machine: {e}"))
            })?;
        }
    }
    Ok(())
}

fn number(v: &toml::Value) -> Option<f64> {
    v.as_float().or_else(|| v.as_integer().map(|i| i as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 18's experiment-file defects, one each: every one is a one-line error.
    #[test]
    fn hostile_experiments_are_one_line_errors() {
        // An experiment with a tolerance and published rows (flush-range has neither).
        let text = crate::experiment::source_text("pti-pcid").unwrap();
        let tol = text
            .lines()
            .find(|l| l.starts_with("tolerance_pct"))
            .unwrap();
        let publ = text.lines().find(|l| l.starts_with("published")).unwrap();
        for (from, to, expect) in [
            (
                tol,
                "tolerance_pct = nan",
                "tolerance_pct: expected a finite number",
            ),
            (tol, "tolerance_pct = 0", "tolerance_pct: expected 0 < %"),
            (publ, "published = 0", "expected a positive figure"),
            (publ, "published = inf", "expected a finite number"),
            (publ, "published = -1.5", "expected a positive figure"),
        ] {
            let e = check("e.toml", &text.replacen(from, to, 1))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(expect) && e.starts_with("e.toml") && !e.contains('\n'),
                "{to}: {e}"
            );
        }
        let jobs = "[[row]]\nlabel = \"x\"\njobs = 4096\n";
        assert!(check("e.toml", jobs)
            .unwrap_err()
            .to_string()
            .contains("expected 1..1024"));
        let pred = "[[prediction]]\nlabel = \"p\"\nmachine = \"no-such-machine\"\n";
        assert!(check("e.toml", pred)
            .unwrap_err()
            .to_string()
            .contains("unknown machine"));
        let path = "[[prediction]]\nlabel = \"p\"\nmachine = \"/dev/zero\"\n";
        assert!(check("e.toml", path)
            .unwrap_err()
            .to_string()
            .contains("larger than"));
    }
}
