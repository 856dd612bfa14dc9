//! CSV output of reproductions, written by the `csv` crate so that labels with commas, quotes
//! or line breaks are quoted and escaped as RFC 4180 says.

use super::Reproduction;

/// One line per row and prediction of every reproduction, under a header line.
pub fn reproductions(reps: &[Reproduction]) -> String {
    let mut w = writer();
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
    record(
        &mut w,
        [
            "experiment",
            "label",
            "unit",
            "published",
            "simulated",
            "error_pct",
            "tolerance_pct",
            "fitted",
            "difference_pp",
            "tolerance_pp",
            "baseline",
            "added_published_pct",
            "added_simulated_pct",
            "added_error_pct",
            "verdict",
        ]
        .map(String::from),
    );
    for rep in reps {
        for r in rep.rows.iter().chain(&rep.predictions) {
            record(
                &mut w,
                [
                    rep.experiment.clone(),
                    r.label.clone(),
                    r.unit.clone(),
                    opt(r.published),
                    r.simulated.to_string(),
                    opt(r.error_pct),
                    opt(r.tolerance_pct),
                    r.fitted.to_string(),
                    opt(r.difference_pp),
                    opt(r.tolerance_pp),
                    r.baseline.clone().unwrap_or_default(),
                    opt(r.added.as_ref().map(|a| a.published_pct)),
                    opt(r.added.as_ref().map(|a| a.simulated_pct)),
                    opt(r.added.as_ref().map(|a| a.error_pct)),
                    if r.published.is_some() {
                        r.verdict().to_string()
                    } else {
                        "prediction".into()
                    },
                ],
            );
        }
    }
    finish(w)
}

/// A CSV writer into memory.
pub(crate) fn writer() -> csv::Writer<Vec<u8>> {
    csv::Writer::from_writer(vec![])
}

/// Appends one record (writing into memory cannot fail).
pub(crate) fn record<I, T>(w: &mut csv::Writer<Vec<u8>>, fields: I)
where
    I: IntoIterator<Item = T>,
    T: AsRef<[u8]>,
{
    w.write_record(fields)
        .expect("writing CSV into memory cannot fail");
}

/// The text written so far (the fields were `String`s, so it is UTF-8).
pub(crate) fn finish(w: csv::Writer<Vec<u8>>) -> String {
    let bytes = w
        .into_inner()
        .expect("flushing CSV into memory cannot fail");
    String::from_utf8(bytes).expect("CSV of UTF-8 fields is UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{table::Table, Row};

    #[test]
    fn labels_with_commas_and_quotes_are_escaped() {
        let rep = Reproduction {
            rows: vec![Row::compared("a, \"b\"", "%", 2.0, 2.5, 10.0)],
            predictions: vec![Row::predicted("plain", "s", 1.5)],
            ..Reproduction::new("x", "")
        };
        assert_eq!(
            reproductions(&[rep]),
            "experiment,label,unit,published,simulated,error_pct,tolerance_pct,fitted,difference_pp,tolerance_pp,baseline,added_published_pct,added_simulated_pct,added_error_pct,verdict\n\
             x,\"a, \"\"b\"\"\",%,2,2.5,25,10,false,,,,,,,MISS\n\
             x,plain,s,,1.5,,,false,,,,,,,prediction\n"
        );
    }

    #[test]
    fn tables_quote_what_needs_it() {
        let mut t = Table::new("t", &["k", "v"]);
        t.push(vec!["a\nb".into(), "1".into()]);
        assert_eq!(t.to_csv(), "k,v\n\"a\nb\",1\n");
    }
}
