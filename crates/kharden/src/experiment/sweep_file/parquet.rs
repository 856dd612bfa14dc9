//! The sweep's Parquet file: one row per point, one column per cell name over all rows
//! (integers as INT64, reals as DOUBLE, text as UTF-8 strings; a cell a row lacks is
//! null), and the sweep's provenance in the file's key-value metadata. Written to a
//! temporary file beside the output and renamed into place, so a reader (or an interrupted
//! sweep) sees the old file or the new one, never half of one.

use super::record::{Cell, Record};
use crate::error::{Error, Result};
use parquet::basic::{LogicalType, Repetition, Type as Physical};
use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use parquet::format::KeyValue;
use parquet::record::Field;
use parquet::schema::types::Type;
use std::path::Path;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Int,
    Float,
    Text,
}

fn kind(c: &Cell) -> Kind {
    match c {
        Cell::Int(_) => Kind::Int,
        Cell::Float(_) => Kind::Float,
        Cell::Text(_) => Kind::Text,
    }
}

/// Columns in order of first appearance; a column with integers and reals is real, one
/// with text and numbers is text.
fn columns(records: &[Record]) -> Vec<(String, Kind)> {
    let mut cols: Vec<(String, Kind)> = vec![];
    for r in records {
        for (name, cell) in &r.cells {
            let k = kind(cell);
            match cols.iter_mut().find(|(n, _)| n == name) {
                None => cols.push((name.clone(), k)),
                Some((_, have)) if *have == k => {}
                Some((_, have)) => {
                    *have = if *have != Kind::Text && k != Kind::Text {
                        Kind::Float
                    } else {
                        Kind::Text
                    }
                }
            }
        }
    }
    cols
}

fn pq(place: &Path, e: impl std::fmt::Display) -> Error {
    Error::at(place.display(), e)
}

/// Writes `records` with `metadata` to `path` (through a temporary file and a rename).
pub fn write(path: &Path, records: &[Record], metadata: &[(String, String)]) -> Result<()> {
    let cols = columns(records);
    let fields = cols
        .iter()
        .map(|(name, k)| {
            let (physical, logical) = match k {
                Kind::Int => (Physical::INT64, None),
                Kind::Float => (Physical::DOUBLE, None),
                Kind::Text => (Physical::BYTE_ARRAY, Some(LogicalType::String)),
            };
            Type::primitive_type_builder(name, physical)
                .with_repetition(Repetition::OPTIONAL)
                .with_logical_type(logical)
                .build()
                .map(Arc::new)
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| pq(path, e))?;
    let schema = Type::group_type_builder("sweep")
        .with_fields(fields)
        .build()
        .map_err(|e| pq(path, e))?;
    let props = WriterProperties::builder()
        .set_created_by(format!("kharden {}", env!("CARGO_PKG_VERSION")))
        .set_key_value_metadata(Some(
            metadata
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
                .collect(),
        ))
        .build();
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = tempfile::Builder::new()
        .prefix(".kharden-sweep-")
        .tempfile_in(dir)
        .map_err(|e| pq(path, format!("cannot create a file beside it: {e}")))?;
    let file = tmp.reopen().map_err(|e| pq(path, e))?;
    let mut w = SerializedFileWriter::new(file, Arc::new(schema), Arc::new(props))
        .map_err(|e| pq(path, e))?;
    let mut rg = w.next_row_group().map_err(|e| pq(path, e))?;
    for (name, k) in &cols {
        let mut col = rg
            .next_column()
            .map_err(|e| pq(path, e))?
            .ok_or_else(|| pq(path, "parquet writer has fewer columns than the schema"))?;
        let cells: Vec<Option<&Cell>> = records.iter().map(|r| r.get(name)).collect();
        let levels: Vec<i16> = cells.iter().map(|c| c.is_some() as i16).collect();
        let written = match k {
            Kind::Int => {
                let v: Vec<i64> = cells
                    .iter()
                    .flatten()
                    .map(|c| match c {
                        Cell::Int(i) => *i,
                        _ => unreachable!("an integer column holds integers"),
                    })
                    .collect();
                col.typed::<Int64Type>()
                    .write_batch(&v, Some(&levels), None)
            }
            Kind::Float => {
                let v: Vec<f64> = cells
                    .iter()
                    .flatten()
                    .map(|c| match c {
                        Cell::Int(i) => *i as f64,
                        Cell::Float(f) => *f,
                        Cell::Text(_) => unreachable!("a real column holds numbers"),
                    })
                    .collect();
                col.typed::<DoubleType>()
                    .write_batch(&v, Some(&levels), None)
            }
            Kind::Text => {
                let v: Vec<ByteArray> = cells
                    .iter()
                    .flatten()
                    .map(|c| match c {
                        Cell::Int(i) => ByteArray::from(i.to_string().as_str()),
                        Cell::Float(f) => ByteArray::from(f.to_string().as_str()),
                        Cell::Text(s) => ByteArray::from(s.as_str()),
                    })
                    .collect();
                col.typed::<ByteArrayType>()
                    .write_batch(&v, Some(&levels), None)
            }
        };
        written.map_err(|e| pq(path, e))?;
        col.close().map_err(|e| pq(path, e))?;
    }
    rg.close().map_err(|e| pq(path, e))?;
    w.close().map_err(|e| pq(path, e))?;
    // A results file, readable like any other (the temporary file was private).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = tmp
            .as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644));
    }
    tmp.persist(path)
        .map_err(|e| pq(path, format!("cannot rename into place: {e}")))?;
    Ok(())
}

/// A Parquet file's key-value metadata, in file order.
pub type Metadata = Vec<(String, String)>;

/// A sweep's Parquet file as written: its rows (by the `key` column) and its metadata.
pub fn read(path: &Path) -> Result<(Vec<Record>, Metadata)> {
    let file = std::fs::File::open(path).map_err(|e| pq(path, e))?;
    let reader = SerializedFileReader::new(file)
        .map_err(|e| pq(path, format!("not a Parquet file: {e}")))?;
    let metadata = reader
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .map(|kv| {
            kv.iter()
                .map(|k| (k.key.clone(), k.value.clone().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    let mut records = vec![];
    for (i, row) in reader
        .get_row_iter(None)
        .map_err(|e| pq(path, e))?
        .enumerate()
    {
        let row = row.map_err(|e| pq(path, format!("row {i}: {e}")))?;
        let mut cells = vec![];
        for (name, field) in row.get_column_iter() {
            let cell = match field {
                Field::Null => continue,
                Field::Long(v) => Cell::Int(*v),
                Field::Double(v) => Cell::Float(*v),
                Field::Str(s) => Cell::Text(s.clone()),
                other => {
                    return Err(pq(
                        path,
                        format!("row {i} column {name}: unexpected value {other}"),
                    ))
                }
            };
            cells.push((name.clone(), cell));
        }
        let key = match cells.iter().find(|(n, _)| n == "key") {
            Some((_, Cell::Text(k))) => k.clone(),
            _ => return Err(pq(path, format!("row {i}: no key column"))),
        };
        records.push(Record { key, cells });
    }
    Ok((records, metadata))
}
