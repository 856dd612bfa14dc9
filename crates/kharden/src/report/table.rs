//! A plain text table: the default human output of every command.

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

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.len()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        if !self.title.is_empty() {
            writeln!(f, "{}", self.title)?;
        }
        // Numbers right-aligned, text left-aligned; a column's kind comes from its first row.
        let numeric: Vec<bool> = (0..widths.len())
            .map(|i| {
                self.rows
                    .first()
                    .and_then(|r| r.get(i))
                    .is_some_and(|c| looks_numeric(c))
            })
            .collect();
        let line = |f: &mut fmt::Formatter<'_>, cells: &[String]| -> fmt::Result {
            let mut s = String::new();
            for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
                let sep = if i == 0 { "" } else { "  " };
                if numeric[i] {
                    s += &format!("{sep}{cell:>w$}");
                } else {
                    s += &format!("{sep}{cell:<w$}");
                }
            }
            writeln!(f, "{}", s.trim_end())
        };
        line(f, &self.header)?;
        let total: usize = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
        writeln!(f, "{}", "-".repeat(total))?;
        for row in &self.rows {
            line(f, row)?;
        }
        Ok(())
    }
}

fn looks_numeric(cell: &str) -> bool {
    let t = cell.trim_start_matches(['+', '-']);
    t.starts_with(|c: char| c.is_ascii_digit()) || cell == "-"
}
