//! The profile text: TOML written line by line through `toml_writer` (which encodes keys,
//! strings and numbers), each value followed by a `# machine detect:` comment saying how it was
//! obtained. A document model (`toml_edit`) would hold the same comments as decor; writing in
//! order keeps the layout of the file obvious from the code that emits it.

use toml_writer::{TomlStringBuilder, TomlWrite, WriteTomlValue};

#[derive(Debug, Clone)]
pub(crate) enum Val {
    Str(String),
    Int(u64),
    /// Written with at most three decimals (a non-finite reading is written as 0.0).
    Float(f64),
    Bool(bool),
    List(Vec<String>),
}

/// A TOML writer that puts a `# machine detect:` comment on every value line.
pub(crate) struct Writer {
    pub out: String,
}

impl Writer {
    pub(crate) fn new() -> Writer {
        Writer { out: String::new() }
    }
    /// A blank line and `[a.b]`.
    pub(crate) fn table(&mut self, path: &[&str]) {
        self.header(path, false);
    }
    /// A blank line and `[[a.b]]`.
    pub(crate) fn array_of_tables(&mut self, path: &[&str]) {
        self.header(path, true);
    }
    fn header(&mut self, path: &[&str], array: bool) {
        let o = &mut self.out;
        // Writing into a String cannot fail.
        let _ = o.newline();
        let _ = if array {
            o.open_array_of_tables_header()
        } else {
            o.open_table_header()
        };
        for (i, k) in path.iter().enumerate() {
            if i > 0 {
                let _ = o.key_sep();
            }
            let _ = o.key(*k);
        }
        let _ = if array {
            o.close_array_of_tables_header()
        } else {
            o.close_table_header()
        };
        let _ = o.newline();
    }
    pub(crate) fn comment(&mut self, c: &str) {
        for line in c.lines() {
            let o = &mut self.out;
            let _ = o.open_comment();
            let _ = o.space();
            o.push_str(line);
            let _ = o.newline();
        }
    }
    pub(crate) fn kv(&mut self, key: &str, v: Val, how: &str) {
        let o = &mut self.out;
        let _ = o.key(key);
        let _ = o.space();
        let _ = o.keyval_sep();
        let _ = o.space();
        let _ = match v {
            Val::Str(s) => o.value(TomlStringBuilder::new(&s).as_basic()),
            Val::Int(i) => o.value(i),
            Val::Float(f) => o.value(three_decimals(f)),
            Val::Bool(b) => o.value(b),
            Val::List(l) => {
                let items: Vec<_> = l
                    .iter()
                    .map(|s| TomlStringBuilder::new(s).as_basic())
                    .collect();
                items.write_toml_value(o)
            }
        };
        o.push_str("  # machine detect: ");
        o.push_str(&how.replace('\n', " "));
        let _ = o.newline();
    }
}

/// `f` rounded to three decimals (readings are not more precise than that), 0.0 if not finite.
fn three_decimals(f: f64) -> f64 {
    if f.is_finite() {
        (f * 1000.0).round() / 1000.0
    } else {
        0.0
    }
}

/// Nanoseconds at `ghz` as whole cycles (at least one).
pub(crate) fn cycles(ns: f64, ghz: f64) -> u64 {
    (ns * ghz).round().max(1.0) as u64
}

/// A profile name from a CPU brand string: "Intel(R) Xeon(R) ... 8160 CPU @ 2.10GHz" ->
/// "intel-xeon-platinum-8160".
pub(crate) fn slug(s: &str) -> String {
    let mut o = String::new();
    let s = s.split('@').next().unwrap_or(s);
    for w in s
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let w = w.to_ascii_lowercase();
        if ["r", "tm", "cpu", "processor", "core"].contains(&w.as_str()) || w.ends_with("ghz") {
            continue;
        }
        if !o.is_empty() {
            o.push('-');
        }
        o.push_str(&w);
    }
    o.truncate(40);
    let o = o.trim_end_matches('-').to_string();
    if o.is_empty() {
        "host".into()
    } else {
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_strings_are_escaped_and_names_slugged() {
        let mut w = Writer::new();
        w.kv("s", Val::Str("a\"b\\c\n".into()), "x");
        assert_eq!(w.out, "s = \"a\\\"b\\\\c\\n\"  # machine detect: x\n");
        assert_eq!(
            slug("Intel(R) Xeon(R) Platinum 8160 CPU @ 2.10GHz"),
            "intel-xeon-platinum-8160"
        );
        assert_eq!(slug("!!!"), "host");
    }

    #[test]
    fn values_are_written_as_before() {
        let mut w = Writer::new();
        w.table(&["costs", "ipi_latency_ns"]);
        w.array_of_tables(&["tlb"]);
        w.kv("f", Val::Float(2.1), "a");
        w.kv("g", Val::Float(67.38271), "b");
        w.kv("h", Val::Float(3.0), "c\nd");
        w.kv("i", Val::Float(f64::NAN), "e");
        w.kv("l", Val::List(vec!["4k".into(), "2m".into()]), "f");
        w.kv("n", Val::Int(7), "g");
        w.kv("b", Val::Bool(true), "h");
        w.comment("x\ny");
        assert_eq!(
            w.out,
            "\n[costs.ipi_latency_ns]\n\n[[tlb]]\n\
             f = 2.1  # machine detect: a\n\
             g = 67.383  # machine detect: b\n\
             h = 3.0  # machine detect: c d\n\
             i = 0.0  # machine detect: e\n\
             l = [\"4k\", \"2m\"]  # machine detect: f\n\
             n = 7  # machine detect: g\n\
             b = true  # machine detect: h\n\
             # x\n# y\n"
        );
    }
}
