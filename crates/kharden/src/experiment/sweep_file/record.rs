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
