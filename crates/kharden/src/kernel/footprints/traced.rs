//! Kernel functions each footprint path runs on a traced kernel (kernels/*-ftrace.toml,
//! written by scripts/kernel_ftrace/): ftrace's function tracer lists every traceable function
//! a path calls, where the host's perf recording (footprint.rs) only sees the functions its
//! samples land in. Compared with the sampled recording, it says how complete that recording
//! is (docs/design/footprints.md section 3).

use super::footprint::{from_toml, read_file};
use super::path_footprint::{pages_of, PathFootprint, LINE_BYTES};
use crate::{Error, Result};
use serde::Deserialize;
use std::collections::BTreeSet;

/// The committed trace of Debian's 6.1 kernel.
pub const BUILTIN_PLACE: &str = "kernels/linux-6.1.0-47-amd64-ftrace.toml";
pub const BUILTIN: &str = include_str!("../../../../../kernels/linux-6.1.0-47-amd64-ftrace.toml");

/// A function run at least this often per operation is part of the path's every run; rarer
/// ones are slow paths (a per-CPU list refill, a lock's contended case).
pub const PER_OP: f64 = 0.5;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracedFootprints {
    pub kernel: TracedKernel,
    /// What the sampled recording's kernel lacks of the traced functions.
    pub recording_kernel: Option<RecordingKernel>,
    /// What this kernel lacks of the recording's sampled functions.
    pub recording_functions: Option<RecordingFunctions>,
    pub path: Vec<TracedPath>,
}

/// The sampled recording's functions (base names) as the traced kernel has them: a sampled
/// function the trace never saw is absent here (new or renamed since), untraceable here
/// (lib/ and arch/x86/lib are built without ftrace's hooks; notrace, noinstr), or a
/// function this kernel's path does not run.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordingFunctions {
    pub absent: BTreeSet<String>,
    pub untraceable: BTreeSet<String>,
}

/// The traced functions the sampled recording's kernel has no text symbol for (renamed,
/// inlined or removed between the two kernels): a function missing from the recording is
/// then a version difference, not a sampling miss.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordingKernel {
    pub release: String,
    /// The kernel whose /proc/kallsyms was read (the same upstream release).
    pub symbols_from: String,
    /// Base names.
    pub absent: BTreeSet<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracedKernel {
    pub release: String,
    pub version: String,
    /// `_etext - _text`.
    pub text_bytes: u64,
    pub config_source: String,
    pub commands: Vec<String>,
    /// The guest's line per scenario: windows and ring-buffer overruns (0: nothing lost).
    pub scenarios: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracedPath {
    pub name: String,
    /// Operations the path ran while traced.
    pub ops: u64,
    /// The contexts kept: `task` for a path's own code, `hardirq`/`softirq` for interrupt
    /// handlers.
    pub contexts: Vec<String>,
    pub functions: Vec<TracedFunction>,
}

/// One traced function: name, offset from `_text`, size (to the next symbol), calls.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TracedFunction(pub String, pub u64, pub u64, pub u64);

impl TracedFunction {
    pub fn name(&self) -> &str {
        &self.0
    }
    pub fn lines(&self) -> std::ops::RangeInclusive<u64> {
        self.1 / LINE_BYTES..=(self.1 + self.2 - 1) / LINE_BYTES
    }
}

/// A function's name without GCC's clone suffixes (`.isra.0`, `.constprop.0`, `.cold`), so
/// that two builds' copies of one function compare equal.
pub fn base_name(name: &str) -> &str {
    name.split('.').next().unwrap_or(name)
}

impl TracedPath {
    /// The functions run at least PER_OP times per operation.
    pub fn per_op(&self) -> impl Iterator<Item = &TracedFunction> {
        let ops = self.ops.max(1) as f64;
        self.functions
            .iter()
            .filter(move |f| f.3 as f64 / ops >= PER_OP)
    }
    pub fn per_op_lines(&self) -> BTreeSet<u64> {
        self.per_op().flat_map(|f| f.lines()).collect()
    }
    pub fn all_lines(&self) -> BTreeSet<u64> {
        self.functions.iter().flat_map(|f| f.lines()).collect()
    }
}

/// What a traced path says about the sampled recording of the same path.
#[derive(Debug, Clone, PartialEq)]
pub struct Completeness {
    /// Traced functions run on every operation, and how many of them (by base name) the
    /// sampled recording lists.
    pub per_op: usize,
    pub per_op_in_sampled: usize,
    /// The per-operation functions the recording lacks, by calls per operation.
    pub missing: Vec<(String, f64)>,
    /// How many of `missing` the recording's kernel has no symbol for (a version
    /// difference); the rest it has, so its sampling missed them or its path skips them.
    pub missing_absent: usize,
    /// Lines (whole traced functions) of the missing functions the recording's kernel has:
    /// an upper bound on the text its sampling missed (its path may skip them).
    pub missing_present_lines: usize,
    /// Functions the recording sampled that the trace never saw (renamed, inlined or
    /// removed between the two kernels, or untraceable).
    pub sampled_not_traced: Vec<String>,
    /// Of those, the ones the traced kernel has and could trace: run by the recording's
    /// path, not by the traced kernel's (or attributed to the path by the recording's
    /// windows from nearby work).
    pub sampled_not_run: usize,
    /// Lines (whole functions) of the per-operation traced set, and 4 KiB pages.
    pub traced_lines: usize,
    pub traced_pages: usize,
    /// The recording's estimated lines and pages.
    pub sampled_lines: usize,
    pub sampled_pages: usize,
}

/// `traced` against `sampled`; `absent` names the traced functions the recording's kernel
/// lacks.
pub fn completeness(
    traced: &TracedPath,
    sampled: &PathFootprint,
    absent: &BTreeSet<String>,
    here: &RecordingFunctions,
) -> Completeness {
    let listed: BTreeSet<&str> = sampled
        .functions
        .iter()
        .map(|f| base_name(f.name()))
        .collect();
    let seen: BTreeSet<&str> = traced
        .functions
        .iter()
        .map(|f| base_name(f.name()))
        .collect();
    let ops = traced.ops.max(1) as f64;
    let mut missing: Vec<(String, f64)> = traced
        .per_op()
        .filter(|f| !listed.contains(base_name(f.name())))
        .map(|f| (f.name().to_string(), f.3 as f64 / ops))
        .collect();
    missing.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let per_op = traced.per_op().count();
    let lines = traced.per_op_lines();
    let est = sampled.estimated_lines();
    let sampled_not_traced: Vec<String> = sampled
        .functions
        .iter()
        .filter(|f| f.samples() > 0 && !seen.contains(base_name(f.name())))
        .map(|f| f.name().to_string())
        .collect();
    Completeness {
        sampled_not_run: sampled_not_traced
            .iter()
            .filter(|f| {
                let b = base_name(f);
                !here.absent.contains(b) && !here.untraceable.contains(b)
            })
            .count(),
        sampled_not_traced,
        per_op,
        per_op_in_sampled: per_op - missing.len(),
        missing_absent: missing
            .iter()
            .filter(|(f, _)| absent.contains(base_name(f)))
            .count(),
        missing_present_lines: traced
            .per_op()
            .filter(|f| {
                let b = base_name(f.name());
                !listed.contains(b) && !absent.contains(b)
            })
            .flat_map(|f| f.lines())
            .collect::<BTreeSet<u64>>()
            .len(),
        missing,
        traced_lines: lines.len(),
        traced_pages: pages_of(lines).len(),
        sampled_lines: est.len(),
        sampled_pages: pages_of(est).len(),
    }
}

impl TracedFootprints {
    /// The committed trace (parsed on each call: only the footprint commands read it).
    pub fn builtin() -> TracedFootprints {
        TracedFootprints::parse(BUILTIN_PLACE, BUILTIN).expect("committed trace file is valid")
    }

    /// The committed file, or the file at `path`.
    pub fn load(path: Option<&str>) -> Result<TracedFootprints> {
        match path {
            None => Ok(TracedFootprints::builtin()),
            Some(p) => TracedFootprints::parse(p, &read_file(p, "trace file")?),
        }
    }

    /// Parses and validates; `place` names the file in errors.
    pub fn parse(place: &str, text: &str) -> Result<TracedFootprints> {
        let f: TracedFootprints = from_toml(place, text)?;
        f.validate().map_err(|e| Error::at(place, e))?;
        Ok(f)
    }

    pub fn path(&self, name: &str) -> Option<&TracedPath> {
        self.path.iter().find(|p| p.name == name)
    }

    /// The recording's functions as this kernel has them (empty when the file does not say).
    pub fn recording_functions(&self) -> RecordingFunctions {
        self.recording_functions.clone().unwrap_or_default()
    }

    /// The traced functions the recording's kernel lacks (empty when the file does not say).
    pub fn absent(&self) -> BTreeSet<String> {
        self.recording_kernel
            .as_ref()
            .map(|r| r.absent.clone())
            .unwrap_or_default()
    }

    fn validate(&self) -> std::result::Result<(), String> {
        let text = self.kernel.text_bytes;
        if text == 0 {
            return Err("kernel.text_bytes: expected a positive size".into());
        }
        // "NAME windows N overrun M": a trace that lost events is not complete.
        for line in &self.kernel.scenarios {
            let lost = line.rsplit_once("overrun ").map(|(_, n)| n.parse::<u64>());
            match lost {
                Some(Ok(0)) => {}
                Some(Ok(n)) => {
                    return Err(format!(
                        "kernel.scenarios: '{line}': the ring buffer lost {n} events, so the trace is incomplete: expected overrun 0 (trace again with a larger buffer_size_kb)"
                    ))
                }
                _ => {
                    return Err(format!(
                        "kernel.scenarios: expected 'NAME windows N overrun M', got '{line}'"
                    ))
                }
            }
        }
        let mut names = BTreeSet::new();
        for p in &self.path {
            if p.name.is_empty() || !names.insert(p.name.as_str()) {
                return Err(format!(
                    "path.name: expected a unique non-empty name, got '{}'",
                    p.name
                ));
            }
            for c in &p.contexts {
                if !["task", "hardirq", "softirq"].contains(&c.as_str()) {
                    return Err(format!(
                        "path '{}': contexts: expected task, hardirq or softirq, got '{c}'",
                        p.name
                    ));
                }
            }
            for (i, f) in p.functions.iter().enumerate() {
                let end = f.1.checked_add(f.2);
                if f.2 == 0 || end.map_or(true, |e| e > text) {
                    return Err(format!(
                        "path '{}': functions[{i}] ({}): expected offset + size within the {text} text bytes, got {} + {}",
                        p.name, f.0, f.1, f.2
                    ));
                }
                if f.3 == 0 {
                    return Err(format!(
                        "path '{}': functions[{i}] ({}): expected at least one call",
                        p.name, f.0
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[kernel]
release = "6.1.0-test"
version = "v"
text_bytes = 100000
config_source = "c"
commands = []
scenarios = ["syscalls windows 34 overrun 0"]

[[path]]
name = "getppid"
ops = 10
contexts = ["task"]
functions = [["__do_sys_getppid", 4096, 64, 10], ["__task_pid_nr_ns.isra.0", 8192, 200, 10], ["rare", 12288, 64, 1]]
"#;

    #[test]
    fn per_operation_functions_leave_out_the_rare_ones() {
        let f = TracedFootprints::parse("t", FILE).unwrap();
        let p = f.path("getppid").unwrap();
        let names: Vec<&str> = p.per_op().map(|f| f.name()).collect();
        assert_eq!(names, ["__do_sys_getppid", "__task_pid_nr_ns.isra.0"]);
        // 64 bytes at 4096: one line; 200 bytes at 8192: lines 128..=131.
        assert_eq!(p.per_op_lines().len(), 1 + 4);
        assert_eq!(p.all_lines().len(), 1 + 4 + 1);
    }

    #[test]
    fn bad_files_name_the_place() {
        let e = TracedFootprints::parse("f.toml", &FILE.replace("4096, 64", "99990, 64"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("f.toml: path 'getppid': functions[0]"), "{e}");
        let e = TracedFootprints::parse("f.toml", &FILE.replace("\"task\"", "\"nmi\""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("contexts: expected task"), "{e}");
        let e = TracedFootprints::parse("f.toml", &FILE.replace("overrun 0", "overrun 7"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("lost 7 events"), "{e}");
        let e = TracedFootprints::parse("f.toml", &FILE.replace("ops = 10", "ops = -1"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("f.toml: line "), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn clone_suffixes_compare_equal() {
        assert_eq!(base_name("__task_pid_nr_ns.isra.0"), "__task_pid_nr_ns");
        assert_eq!(base_name("do_syscall_64"), "do_syscall_64");
    }
}
