//! A machine profile's fields as parameters: `machine.costs.interrupt_entry_cycles` is the
//! `interrupt_entry_cycles` key of the profile's `[costs]` table, and its provenance is the
//! comment the profile writes beside it. Setting or scaling a field goes through the
//! profile's own TOML form, so every check of a profile applies to the result.

use crate::error::{Error, Result};
use crate::machine::MachineProfile;

/// One field of a profile, flattened: path below `machine.`, value, and the source comment.
#[derive(Debug, Clone)]
pub struct Leaf {
    pub path: String,
    pub value: toml::Value,
    pub source: String,
}

fn as_toml(m: &MachineProfile) -> toml::Value {
    toml::Value::try_from(m).expect("a profile always serialises")
}

fn from_toml(place: &str, v: toml::Value) -> Result<MachineProfile> {
    let text = toml::to_string(&v).map_err(|e| Error::at(place, e.to_string()))?;
    crate::machine::parse(place, &text)
}

/// Every scalar field of `m`, in file order of tables, with the source comment found for it
/// in `text` (the profile's file) when given.
pub fn leaves(m: &MachineProfile, text: Option<&str>) -> Vec<Leaf> {
    let mut out = vec![];
    flatten("", &as_toml(m), &mut out);
    if let Some(text) = text {
        for leaf in &mut out {
            leaf.source = comment_for(text, &leaf.path).unwrap_or_default();
        }
    }
    out
}

fn flatten(prefix: &str, v: &toml::Value, out: &mut Vec<Leaf>) {
    let join = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    match v {
        toml::Value::Table(t) => t.iter().for_each(|(k, v)| flatten(&join(k), v, out)),
        toml::Value::Array(a) if a.iter().all(|x| x.is_table()) => a
            .iter()
            .enumerate()
            .for_each(|(i, v)| flatten(&join(&i.to_string()), v, out)),
        _ => out.push(Leaf {
            path: prefix.to_string(),
            value: v.clone(),
            source: String::new(),
        }),
    }
}

/// The comment beside (or, failing that, just above) `key = ` inside the profile table the
/// path names. Arrays of tables are matched by position.
fn comment_for(text: &str, path: &str) -> Option<String> {
    let parts: Vec<&str> = path.split('.').collect();
    let (key, tables) = parts.split_last()?;
    let mut header = String::new();
    let mut index: Vec<usize> = vec![];
    let mut above: Vec<&str> = vec![];
    let want_header: Vec<&str> = tables
        .iter()
        .copied()
        .filter(|p| p.parse::<usize>().is_err())
        .collect();
    let want_index: Vec<usize> = tables.iter().filter_map(|p| p.parse().ok()).collect();
    for line in text.lines() {
        let t = line.trim();
        if let Some(h) = t.strip_prefix("[[").and_then(|h| h.strip_suffix("]]")) {
            let count = if header == h {
                index.last().map_or(0, |i| i + 1)
            } else {
                0
            };
            header = h.to_string();
            index = vec![count];
            above.clear();
            continue;
        }
        if let Some(h) = t.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            header = h.to_string();
            index.clear();
            above.clear();
            continue;
        }
        if let Some(c) = t.strip_prefix('#') {
            above.push(c.trim());
            continue;
        }
        let here: Vec<&str> = if header.is_empty() {
            vec![]
        } else {
            header.split('.').collect()
        };
        let k = t.split('=').next().unwrap_or("").trim();
        if k == *key && here == want_header && (want_index.is_empty() || index == want_index) {
            let beside = line.split_once('#').map(|(_, c)| c.trim().to_string());
            return beside.or_else(|| (!above.is_empty()).then(|| above.join(" ")));
        }
        if !t.is_empty() {
            above.clear();
        }
    }
    None
}

/// `m` with the field at `path` (below `machine.`) set from text; `place` names the setter.
pub fn set(m: &MachineProfile, place: &str, path: &str, text: &str) -> Result<MachineProfile> {
    let mut v = as_toml(m);
    let slot = slot(&mut v, place, path)?;
    let new = match slot {
        toml::Value::Integer(_) => text.parse::<i64>().ok().map(toml::Value::Integer),
        toml::Value::Float(_) => text
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .map(toml::Value::Float),
        toml::Value::Boolean(_) => text.parse::<bool>().ok().map(toml::Value::Boolean),
        toml::Value::String(_) => Some(toml::Value::String(text.to_string())),
        _ => None,
    };
    let kind = slot.type_str();
    *slot = new.ok_or_else(|| {
        Error::at(
            place,
            format!("machine.{path}: expected {kind}, got '{text}'"),
        )
    })?;
    from_toml(&format!("{place} machine.{path}={text}"), v)
}

/// `m` with every number at or below `path` multiplied by `factor` (whole numbers rounded).
pub fn scale(m: &MachineProfile, place: &str, path: &str, factor: f64) -> Result<MachineProfile> {
    let mut v = as_toml(m);
    scale_value(slot(&mut v, place, path)?, factor);
    from_toml(&format!("{place} machine.{path} x{factor}"), v)
}

fn scale_value(v: &mut toml::Value, factor: f64) {
    match v {
        toml::Value::Integer(i) => *i = (*i as f64 * factor).round() as i64,
        toml::Value::Float(f) => *f *= factor,
        toml::Value::Table(t) => t.iter_mut().for_each(|(_, v)| scale_value(v, factor)),
        toml::Value::Array(a) => a.iter_mut().for_each(|v| scale_value(v, factor)),
        _ => {}
    }
}

fn slot<'a>(v: &'a mut toml::Value, place: &str, path: &str) -> Result<&'a mut toml::Value> {
    let mut here = v;
    for part in path.split('.') {
        let next = match here {
            toml::Value::Table(t) => t.get_mut(part),
            toml::Value::Array(a) => part.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
            _ => None,
        };
        here = next.ok_or_else(|| {
            Error::at(place, format!("machine.{path}: the profile has no such field (see `kharden params --machine M`)"))
        })?;
    }
    Ok(here)
}
