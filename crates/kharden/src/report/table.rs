//! A plain text table (laid out by comfy-table): the default human output of every command.

use serde::Serialize;
use std::fmt;

#[derive(Debug, Clone, Default, Serialize)]
pub struct Table {
    pub title: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(title: impl Into<String>, header: &[&str]) -> Table {
        Table {
            title: title.into(),
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: vec![],
        }
    }
    pub fn push(&mut self, row: Vec<String>) {
        debug_assert_eq!(row.len(), self.header.len());
        self.rows.push(row);
    }
    /// Comma-separated values with a header line, quoted and escaped by the `csv` crate.
    pub fn to_csv(&self) -> String {
        let mut w = super::csv::writer();
        for line in std::iter::once(&self.header).chain(&self.rows) {
            super::csv::record(&mut w, line);
        }
        super::csv::finish(w)
    }
}

/// Header, a dash rule, rows; no borders. Columns are two spaces apart: one of padding and a
/// blank column separator, which also makes comfy-table 7.1 (the last with MSRV <= 1.80) join
/// the rule with a dash where it would otherwise leave a gap.
const RULE_UNDER_HEADER_ONLY: &str = "     --            ";

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.title.is_empty() {
            writeln!(f, "{}", self.title)?;
        }
        let mut t = comfy_table::Table::new();
        t.load_preset(RULE_UNDER_HEADER_ONLY)
            .set_header(&self.header);
        for row in &self.rows {
            t.add_row(row);
        }
        let last = self.header.len().saturating_sub(1);
        for (i, column) in t.column_iter_mut().enumerate() {
            column.set_padding((0, u16::from(i != last)));
            // Numbers right-aligned, text left-aligned; a column's kind comes from its first row.
            let numeric = self
                .rows
                .first()
                .and_then(|r| r.get(i))
                .is_some_and(|c| looks_numeric(c));
            if numeric {
                column.set_cell_alignment(comfy_table::CellAlignment::Right);
            }
        }
        writeln!(f, "{}", t.trim_fmt())
    }
}

fn looks_numeric(cell: &str) -> bool {
    let t = cell.trim_start_matches(['+', '-']);
    t.starts_with(|c: char| c.is_ascii_digit()) || cell == "-"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_two_space_columns_under_a_rule() {
        let mut t = Table::new("title", &["row", "± %", "verdict"]);
        t.push(vec!["a".into(), "-1.5".into(), "ok".into()]);
        t.push(vec!["longer row".into(), "12.0".into(), "".into()]);
        assert_eq!(
            t.to_string(),
            "title\n\
             row          ± %  verdict\n\
             -------------------------\n\
             a           -1.5  ok\n\
             longer row  12.0\n"
        );
    }

    #[test]
    fn empty_table_keeps_header_and_rule() {
        assert_eq!(
            Table::new("", &["a", "bb"]).to_string(),
            "a  bb
-----
"
        );
    }
}
