//! A point's row: named cells in a fixed order (its inputs, then its error or its
//! outputs). The Parquet writer makes one column per name over all rows.

/// One value of a row.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Int(i64),
    Float(f64),
    Text(String),
}

impl Cell {
    /// A JSON number or string as a cell (other JSON values have no column type).
    pub fn from_json(v: &serde_json::Value) -> Option<Cell> {
        match v {
            serde_json::Value::Number(n) => Some(match n.as_i64() {
                Some(i) => Cell::Int(i),
                None => Cell::Float(n.as_f64()?),
            }),
            serde_json::Value::String(s) => Some(Cell::Text(s.clone())),
            _ => None,
        }
    }
}

/// One row: the point's key and its cells, by column name.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub key: String,
    pub cells: Vec<(String, Cell)>,
}

impl Record {
    pub fn get(&self, column: &str) -> Option<&Cell> {
        self.cells.iter().find(|(c, _)| c == column).map(|(_, v)| v)
    }

    /// The one-line error of a point that failed.
    pub fn error(&self) -> Option<&str> {
        match self.get("error") {
            Some(Cell::Text(e)) => Some(e),
            _ => None,
        }
    }
}

impl Record {
    /// The row as JSON that keeps each cell's order, type and exact value, for moving rows
    /// between processes (Ray tasks): `{"key": K, "cells": [[name, "i"|"f"|"s", value]]}`,
    /// a real as its IEEE-754 bits (a JSON number may not parse back to the same double).
    pub fn to_json(&self) -> serde_json::Value {
        let cells: Vec<serde_json::Value> = self
            .cells
            .iter()
            .map(|(n, c)| match c {
                Cell::Int(i) => serde_json::json!([n, "i", i]),
                Cell::Float(f) => serde_json::json!([n, "f", f.to_bits()]),
                Cell::Text(s) => serde_json::json!([n, "s", s]),
            })
            .collect();
        serde_json::json!({ "key": self.key, "cells": cells })
    }

    /// The inverse of `to_json`.
    pub fn from_json(v: &serde_json::Value) -> Option<Record> {
        let key = v.get("key")?.as_str()?.to_string();
        let mut cells = vec![];
        for c in v.get("cells")?.as_array()? {
            let name = c.get(0)?.as_str()?.to_string();
            let value = c.get(2)?;
            let cell = match c.get(1)?.as_str()? {
                "i" => Cell::Int(value.as_i64()?),
                "f" => Cell::Float(f64::from_bits(value.as_u64()?)),
                "s" => Cell::Text(value.as_str()?.to_string()),
                _ => return None,
            };
            cells.push((name, cell));
        }
        Some(Record { key, cells })
    }
}
