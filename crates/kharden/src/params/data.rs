//! Parameter files: `kernels/linux.toml` gives every declared software parameter its value
//! and its source. Each entry is `name = { value = V, source = "..." }` inside the table of
//! its path's prefix, so `[kernel.sched] timeslice_ms = {...}` is `kernel.sched.timeslice_ms`.

use super::{parse_value, Decl, Param, Params, Provenance};
use crate::error::{Error, Result};
use std::collections::BTreeMap;

/// Reads a parameter file against the declarations: every declared path must have a value
/// and a non-empty source, and every entry must be declared.
pub(super) fn parse(place: &str, text: &str, decls: &[Decl]) -> Result<Params> {
    let table: toml::Table = toml::from_str(text)
        .map_err(|e| Error::at(place, crate::machine::toml_message(&e, text)))?;
    let mut entries = BTreeMap::new();
    collect(place, "", &table, &mut entries)?;
    let mut map = BTreeMap::new();
    for d in decls {
        let Some((value, source)) = entries.remove(d.path) else {
            return Err(Error::at(
                place,
                format!(
                    "{}: missing (expected {{ value = ..., source = \"...\" }}; {})",
                    d.path, d.help
                ),
            ));
        };
        let text = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => {
                return Err(Error::at(
                    place,
                    format!("{}: expected a number, bool or word, got {other}", d.path),
                ))
            }
        };
        let value = parse_value(place, d, &text)?;
        let provenance = Provenance::Source {
            file: place.to_string(),
            text: source,
        };
        map.insert(
            d.path,
            Param {
                decl: *d,
                value,
                provenance,
            },
        );
    }
    if let Some(extra) = entries.keys().next() {
        return Err(Error::at(
            place,
            format!("{extra}: not a declared parameter (see `kharden params`)"),
        ));
    }
    Ok(Params {
        map,
        recording: None,
    })
}

/// Walks the tables, collecting `{ value, source }` entries by dotted path.
fn collect(
    place: &str,
    prefix: &str,
    table: &toml::Table,
    out: &mut BTreeMap<String, (toml::Value, String)>,
) -> Result<()> {
    for (key, v) in table {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        let toml::Value::Table(t) = v else {
            return Err(Error::at(
                place,
                format!("{path}: expected {{ value = ..., source = \"...\" }} or a table of them"),
            ));
        };
        if !t.contains_key("value") {
            collect(place, &path, t, out)?;
            continue;
        }
        let source = match t.get("source") {
            Some(toml::Value::String(s)) if !s.trim().is_empty() => s.clone(),
            _ => {
                return Err(Error::at(
                    place,
                    format!(
                    "{path}.source: expected the value's source (a citation, or ESTIMATE and why)"
                ),
                ))
            }
        };
        if let Some(k) = t.keys().find(|k| *k != "value" && *k != "source") {
            return Err(Error::at(
                place,
                format!("{path}.{k}: unknown key (expected value and source)"),
            ));
        }
        out.insert(path, (t["value"].clone(), source));
    }
    Ok(())
}
