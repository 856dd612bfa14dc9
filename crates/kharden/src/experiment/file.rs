//! Reading an experiment file. Every kind's file opens with the same header (`Header`) and
//! judges its [[row]]s the same way (`report::Judging`); a kind's struct declares its own
//! fields and embeds those two as the fields `header` and `judging`. The file itself stays
//! flat, so the reader moves their keys under those names before the typed parse: every
//! value keeps its place in the text, so an error still names its line, and an unknown key
//! still lists every key the place expects. (serde's `flatten` would lose both.)

use crate::error::{Error, Result};
use crate::machine::toml_message;
use crate::report::Reproduction;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::ops::Range;
use toml::de::{DeString, DeTable, DeValue, Deserializer};
use toml::Spanned;

/// What every experiment file starts with, whatever its kind.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub name: String,
    /// Which runner reads the file (`run_text`), e.g. "syscall-table".
    pub kind: String,
    pub title: String,
    /// Where the published figures come from.
    pub source: String,
}

impl Header {
    /// An empty reproduction of this experiment, for its runner to fill.
    pub fn reproduction(&self) -> Reproduction {
        Reproduction::new(&self.name, &self.source)
    }
}

/// The keys each embedded struct takes from the flat file, in its declared order.
const HEADER: (&str, &[&str]) = ("header", &["name", "kind", "title", "source"]);
const JUDGING: (&str, &[&str]) = ("judging", &["baseline", "known_miss", "derived"]);

/// Parses `text` (the file at `place`) as the experiment `E`.
pub fn read<E: DeserializeOwned>(place: &str, text: &str) -> Result<E> {
    let message = |e: toml::de::Error| {
        let m = toml_message(&e, text);
        Error::at(place, unnest(&unnest(&m, HEADER), JUDGING))
    };
    let doc = DeTable::parse(text).map_err(message)?;
    let span = doc.span();
    let mut doc = nest(doc.into_inner(), HEADER, span.clone(), true);
    if let Some(DeValue::Array(rows)) = doc.get_mut("row").map(Spanned::get_mut) {
        for row in rows.iter_mut() {
            let at = row.span();
            if let DeValue::Table(row) = row.get_mut() {
                *row = nest(std::mem::take(row), JUDGING, at, false);
            }
        }
    }
    E::deserialize(Deserializer::from(Spanned::new(span, doc))).map_err(message)
}

/// Just the header of an experiment file, to learn which runner reads it.
pub fn header(place: &str, text: &str) -> Result<Header> {
    #[derive(Deserialize)]
    struct Probe {
        header: Header,
        #[serde(flatten)]
        _rest: toml::Table,
    }
    Ok(read::<Probe>(place, text)?.header)
}

/// `table` with its keys of `keys` moved into a table under `name` spanning `at` (always,
/// or only where one is present), in the place of the first of them, so the parse meets
/// the keys in the file's order. A key of that name in the file is kept under a name no
/// struct has, so the parse reports it as the unknown key it is (`unnest` names it back).
fn nest<'i>(
    table: DeTable<'i>,
    (name, keys): (&'static str, &[&str]),
    at: Range<usize>,
    always: bool,
) -> DeTable<'i> {
    let mut out = DeTable::new();
    let mut nested = DeTable::new();
    let key = |at: Range<usize>, k: String| Spanned::new(at, DeString::Owned(k));
    for (k, v) in table {
        if keys.contains(&k.get_ref().as_ref()) {
            if nested.is_empty() {
                out.insert(
                    key(at.clone(), name.into()),
                    Spanned::new(at.clone(), DeValue::Table(DeTable::new())),
                );
            }
            nested.insert(k, v);
        } else if k.get_ref() == name {
            out.insert(key(k.span(), format!("{name}{TAKEN}")), v);
        } else {
            out.insert(k, v);
        }
    }
    match out.get_mut(name) {
        Some(slot) => *slot.get_mut() = DeValue::Table(nested),
        None if always => {
            out.insert(
                key(at.clone(), name.into()),
                Spanned::new(at, DeValue::Table(nested)),
            );
        }
        None => {}
    }
    out
}

/// Marks a file's own key that has the name of a nested struct.
const TAKEN: char = '\u{0}';

/// An unknown-key error with a nested struct's name in its list of expected keys, that
/// name put back as the keys the file has in its place, and a file's own key of that name
/// as it wrote it; any other message as it is.
fn unnest(message: &str, (name, keys): (&str, &[&str])) -> String {
    let Some((unknown, expected)) = message.rsplit_once(", expected ") else {
        return message.into();
    };
    if !unknown.contains("unknown field `") {
        return message.into();
    }
    let listed = keys
        .iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "{}, expected {}",
        unknown.replace(&format!("`{name}{TAKEN}`"), &format!("`{name}`")),
        expected.replace(&format!("`{name}`"), &listed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::{names, source_text, syscall_table};
    use crate::report::Judging;

    /// The header and every row's judging keys of every experiment file reach their structs
    /// with the values the file gives them.
    #[test]
    fn every_file_reads_its_header_and_judging() {
        #[derive(Deserialize)]
        struct Row {
            #[serde(default)]
            judging: Judging,
            #[serde(flatten)]
            _rest: toml::Table,
        }
        #[derive(Deserialize)]
        struct Probe {
            header: Header,
            #[serde(default)]
            row: Vec<Row>,
            #[serde(flatten)]
            _rest: toml::Table,
        }
        let judged = |r: &toml::Table, key: &str| r.get(key).map(|v| v.to_string());
        for name in names() {
            let text = source_text(name).unwrap();
            let raw: toml::Table = text.parse().unwrap();
            let read: Probe = read(name, text).unwrap();
            let h = &read.header;
            let header = [&h.name, &h.kind, &h.title, &h.source].map(|s| Some(s.as_str()));
            let keys: Vec<_> = HEADER.1.iter().map(|k| raw[*k].as_str()).collect();
            assert_eq!(header.to_vec(), keys, "{name}");
            let rows = raw.get("row").and_then(|r| r.as_array()).cloned();
            let rows = rows.unwrap_or_default();
            assert_eq!(rows.len(), read.row.len(), "{name}");
            for (r, typed) in rows.iter().map(|r| r.as_table().unwrap()).zip(&read.row) {
                let j = &typed.judging;
                let as_toml = |s: &Option<String>| {
                    s.as_ref()
                        .map(|s| toml::Value::from(s.as_str()).to_string())
                };
                assert_eq!(judged(r, "baseline"), as_toml(&j.baseline), "{name}");
                assert_eq!(judged(r, "derived"), as_toml(&j.derived), "{name}");
                let band = j.known_miss.as_ref().map(|k| k.band);
                let raw_band = r
                    .get("known_miss")
                    .map(|k| k["band"].clone().try_into::<[f64; 2]>().unwrap());
                assert_eq!(raw_band, band, "{name}");
            }
        }
    }

    /// Errors in the keys the reader moves read as they did when every kind declared them
    /// itself: the same line, the same message, every key the place expects listed.
    #[test]
    fn errors_name_the_line_and_every_key_expected() {
        let text = source_text("pti-pcid").unwrap();
        let line = |p: &str| text.lines().find(|l| l.starts_with(p)).unwrap();
        let row = |key: &str| text.replacen("[[row]]\n", &format!("[[row]]\n{key}\n"), 1);
        let top = "`name`, `kind`, `title`, `source`, `machine`, `syscall`, `iterations`, `tolerance_pct`, `fit`, `row`, `prediction`, `pti_on_every_profile`";
        let in_row =
            "`label`, `baseline`, `known_miss`, `derived`, `defense`, `published`, `machine`";
        for (bad, expect) in [
            (
                text.replacen(line("source"), &format!("{}\nbogus = 1", line("source")), 1),
                format!("line 5: unknown field `bogus`, expected one of {top}"),
            ),
            (
                text.replacen(line("title"), "title = 3", 1),
                "line 4: invalid type: integer `3`, expected a string".into(),
            ),
            (
                text.replacen(&format!("{}\n", line("source")), "", 1),
                "line 1: missing field `source`".into(),
            ),
            (
                text.replacen(line("title"), &format!("{}\nheader = 1", line("title")), 1),
                format!("line 4: unknown field `header`, expected one of {top}"),
            ),
            (
                row("bogus = 1"),
                format!("line 20: unknown field `bogus`, expected one of {in_row}"),
            ),
            (
                row("judging = 1"),
                format!("line 20: unknown field `judging`, expected one of {in_row}"),
            ),
            (
                row("derived = 3"),
                "line 21: invalid type: integer `3`, expected a string".into(),
            ),
            (
                row("known_miss = 3"),
                "line 21: invalid type: integer `3`, expected struct KnownMiss".into(),
            ),
            (
                row("known_miss = { band = [1, 2], whyy = \"x\" }"),
                "line 21: unknown field `whyy`, expected `why` or `band`".into(),
            ),
        ] {
            let e = syscall_table::parse("e.toml", &bad)
                .unwrap_err()
                .to_string();
            assert_eq!(e, format!("e.toml: {expect}"));
        }
    }
}
