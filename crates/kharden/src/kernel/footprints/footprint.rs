//! Kernel path footprints measured on a real kernel (kernels/linux-*.toml, written by
//! `kharden kernel record-footprint`): for each path, the kernel text it runs (functions,
//! 64-byte lines and 4 KiB pages, as offsets from the image start), the kernel objects it
//! touches, and its native latency on the recording host. docs/design/footprints.md says how
//! each figure was measured and which are estimates.

use super::path_footprint::PathFootprint;
use crate::{Error, Result};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

/// The committed recording, which the simulator uses unless told otherwise.
pub const BUILTIN_PLACE: &str = "kernels/linux-6.18.44-fc-v669.toml";
pub const BUILTIN: &str = include_str!("../../../../../kernels/linux-6.18.44-fc-v669.toml");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Footprints {
    pub kernel: KernelInfo,
    /// Bytes of each kernel object a path may touch.
    pub objects: BTreeMap<String, u64>,
    pub path: Vec<PathFootprint>,
}

/// The recorded kernel and how the recording was made.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelInfo {
    pub release: String,
    pub version: String,
    /// `_etext - _text`.
    pub text_bytes: u64,
    pub config_source: String,
    pub config: Vec<String>,
    pub meltdown: String,
    /// Core clock of the recording host (cycles = ns times this).
    pub host_ghz: f64,
    /// The recording host's machine profile, a library name or a TOML file (relative to the
    /// footprint file): what each path's work is derived against (kernel/paths/table.rs).
    pub host_machine: String,
    pub sample_period_ns: u64,
    /// Loop counts of the recording and of the latency runs (1.0: about a second per path).
    pub record_scale: f64,
    pub latency_scale: f64,
    pub commands: Vec<String>,
    pub seed_kernels: String,
    /// The speculation mitigations the recording host's kernel ran on every path
    /// (kernel/mitigations.rs: retpoline, safe-ret), whose cost the paths' `returns` and
    /// `indirect_calls` measure. Empty: none, or not known.
    #[serde(default)]
    pub speculation_mitigations: Vec<String>,
}

impl Footprints {
    /// The committed recording (parsed once; it is checked by the tests).
    pub fn builtin() -> &'static Footprints {
        static F: OnceLock<Footprints> = OnceLock::new();
        F.get_or_init(|| {
            Footprints::parse(BUILTIN_PLACE, BUILTIN).expect("committed footprint file is valid")
        })
    }

    /// The committed file, or the file at `path` (its `host_machine`, when a relative path,
    /// resolved against the file's directory).
    pub fn load(path: Option<&str>) -> Result<Footprints> {
        let Some(p) = path else {
            return Ok(Footprints::builtin().clone());
        };
        Footprints::parse_at(p, &read_file(p, "footprint file")?)
    }

    /// `parse` of the text of the file at `path`, its `host_machine`, when a relative path,
    /// resolved against the file's directory.
    pub fn parse_at(path: &str, text: &str) -> Result<Footprints> {
        let mut f = Footprints::parse(path, text)?;
        let host = std::path::Path::new(&f.kernel.host_machine);
        if crate::machine::is_path(&f.kernel.host_machine) && host.is_relative() {
            if let Some(dir) = std::path::Path::new(path).parent() {
                f.kernel.host_machine = dir.join(host).display().to_string();
            }
        }
        Ok(f)
    }

    /// The profile of the host the recording was made on.
    pub fn host_profile(&self) -> Result<crate::machine::MachineProfile> {
        crate::machine::load(&self.kernel.host_machine).map_err(|e| {
            Error::new(format!(
                "footprints of kernel {}: kernel.host_machine: {e}",
                self.kernel.release
            ))
        })
    }

    /// Parses and validates; `place` names the file in errors. The paths derived from
    /// recorded ones (kernel/footprints/derived.rs) are added for every recorded path they come from.
    pub fn parse(place: &str, text: &str) -> Result<Footprints> {
        let mut f: Footprints = from_toml(place, text)?;
        f.validate().map_err(|e| Error::at(place, e))?;
        for d in super::derived::DERIVED {
            if f.path(d.name).is_none() {
                if let Some(from) = f.path(d.from) {
                    let derived = super::derived::derive(from, d);
                    f.path.push(derived);
                }
            }
        }
        Ok(f)
    }

    pub fn path(&self, name: &str) -> Option<&PathFootprint> {
        self.path.iter().find(|p| p.name == name)
    }

    pub fn names(&self) -> Vec<&str> {
        self.path.iter().map(|p| p.name.as_str()).collect()
    }

    fn validate(&self) -> std::result::Result<(), String> {
        let k = &self.kernel;
        if k.text_bytes == 0 {
            return Err("kernel.text_bytes: expected a positive size".into());
        }
        if k.host_machine.trim().is_empty() {
            return Err("kernel.host_machine: expected the recording host's machine profile (a library name or a TOML file from `kharden machines detect`)".into());
        }
        if !(k.host_ghz > 0.0 && k.host_ghz.is_finite()) {
            return Err(format!(
                "kernel.host_ghz: expected a positive clock in GHz, got {}",
                k.host_ghz
            ));
        }
        for m in &k.speculation_mitigations {
            if crate::kernel::mitigations::Mitigation::named(m).is_none() {
                return Err(format!(
                    "kernel.speculation_mitigations: expected retpoline or safe-ret, got '{m}'"
                ));
            }
        }
        let mut seen = BTreeSet::new();
        for p in &self.path {
            let at = |key: &str| format!("path '{}': {key}", p.name);
            for (key, count) in [("returns", p.returns), ("indirect_calls", p.indirect_calls)] {
                if count.is_some_and(|c| !(c >= 0.0 && c.is_finite())) {
                    return Err(format!(
                        "{}: expected a count per operation of at least 0, got {}",
                        at(key),
                        count.unwrap()
                    ));
                }
            }
            if p.name.is_empty() || !seen.insert(p.name.as_str()) {
                return Err(format!(
                    "path.name: expected a unique non-empty name, got '{}'",
                    p.name
                ));
            }
            let mut sampled = 0;
            for (i, f) in p.functions.iter().enumerate() {
                let end = f.offset().checked_add(f.size());
                if f.size() == 0 || end.map_or(true, |e| e > k.text_bytes) {
                    return Err(format!(
                        "{}: expected offset + size within the {} text bytes, got {} + {}",
                        at(&format!("functions[{i}] ({})", f.name())),
                        k.text_bytes,
                        f.offset(),
                        f.size()
                    ));
                }
                if f.reach() >= f.size() {
                    return Err(format!(
                        "{}: expected reach below the size {}, got {}",
                        at(&format!("functions[{i}] ({})", f.name())),
                        f.size(),
                        f.reach()
                    ));
                }
                sampled += f.samples();
            }
            if sampled != p.samples {
                return Err(format!(
                    "{}: expected the functions' samples' sum {sampled}, got {}",
                    at("samples"),
                    p.samples
                ));
            }
            let covered: BTreeSet<u64> = p.whole_lines();
            for (i, l) in p.sampled_lines.iter().enumerate() {
                if i > 0 && p.sampled_lines[i - 1] >= *l {
                    return Err(format!(
                        "{}: expected increasing line indices",
                        at("sampled_lines")
                    ));
                }
                if !covered.contains(l) {
                    return Err(format!(
                        "{}: line {l} lies in no listed function",
                        at("sampled_lines")
                    ));
                }
            }
            if p.new_lines_last_tenth > p.sampled_lines.len() as u64 {
                return Err(format!(
                    "{}: expected at most the {} sampled lines",
                    at("new_lines_last_tenth"),
                    p.sampled_lines.len()
                ));
            }
            if let Some([lo, mid, hi]) = p.latency_ns {
                if !(lo > 0.0 && lo <= mid && mid <= hi && hi.is_finite()) {
                    return Err(format!(
                        "{}: expected 0 < p10 <= median <= p90, got [{lo}, {mid}, {hi}]",
                        at("latency_ns")
                    ));
                }
            }
            if p.latency_ns.is_some() != p.latency_windows.is_some() {
                return Err(format!(
                    "{}: expected together with latency_ns",
                    at("latency_windows")
                ));
            }
            if let Some(d) = p.data.iter().find(|d| !self.objects.contains_key(*d)) {
                return Err(format!("{}: '{d}' is not a key of [objects]", at("data")));
            }
        }
        Ok(())
    }
}

/// toml's message with its line and the key written on that line (toml names the line, not
/// always the key).
/// The text of the file at `path`; `what` names its kind in the error.
pub(crate) fn read_file(path: &str, what: &str) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::at(path, format!("cannot read {what}: {e}")))
}

/// `text` parsed as TOML; `place` names the file in the one-line error.
pub(crate) fn from_toml<T: serde::de::DeserializeOwned>(place: &str, text: &str) -> Result<T> {
    toml::from_str(text).map_err(|e| Error::at(place, toml_message(&e, text)))
}

fn toml_message(e: &toml::de::Error, text: &str) -> String {
    let msg = e.message().trim().replace('\n', " ");
    let Some(span) = e.span() else {
        return msg;
    };
    let start = span.start.min(text.len());
    let line_no = text[..start].lines().count().max(1);
    let line = text[..start].rsplit('\n').next().unwrap_or("").to_string()
        + text[start..].split('\n').next().unwrap_or("");
    match line
        .split_once('=')
        .map(|(k, _)| k.trim())
        .filter(|k| !k.is_empty() && !k.starts_with('[') && !k.starts_with('#'))
    {
        Some(key) => format!("line {line_no}, key '{key}': {msg}"),
        None => format!("line {line_no}: {msg}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::footprints::path_footprint::INSTRUMENTATION;

    #[test]
    fn the_committed_file_loads_with_every_path_the_issue_names() {
        let f = Footprints::parse(BUILTIN_PLACE, BUILTIN).unwrap();
        for name in [
            "syscall-entry-exit",
            "getppid",
            "getpid",
            "lseek",
            "read-1",
            "read-8k",
            "write-1",
            "getrusage",
            "open-close",
            "mmap",
            "munmap",
            "mprotect",
            "openat",
            "close",
            "read-4k-file",
            "newfstatat",
            "fault-anon",
            "fault-file",
            "fault-cow",
            "fork",
            "execve",
            "exit",
            "wait4",
            "context-switch",
            "ipi-tlb-flush",
            "timer-tick",
        ] {
            let p = f.path(name).unwrap_or_else(|| panic!("no path {name}"));
            assert!(!p.functions.is_empty(), "{name} has no functions");
            // The estimate lies between what was sampled and the whole functions.
            let est = p.estimated_lines();
            assert!(p.sampled_lines.iter().all(|l| est.contains(l)), "{name}");
            assert!(est.is_subset(&p.whole_lines()), "{name}");
        }
        // Every syscall of the model's table is recorded.
        for s in crate::kernel::paths::syscall::names() {
            assert!(
                f.path(s).is_some(),
                "syscall table entry {s} has no footprint"
            );
        }
    }

    fn broken(from: &str, to: &str) -> String {
        assert!(
            BUILTIN.contains(from),
            "fixture text '{from}' not in the file"
        );
        let text = BUILTIN.replacen(from, to, 1);
        let e = Footprints::parse("k.toml", &text).unwrap_err().to_string();
        assert!(!e.contains('\n'), "{e}");
        assert!(e.starts_with("k.toml: "), "{e}");
        e
    }

    #[test]
    fn the_hosts_instrumentation_share_is_of_the_paths_own_samples() {
        let f = Footprints::parse(BUILTIN_PLACE, BUILTIN).unwrap();
        let mut p = f.path("open-close").unwrap().clone();
        // The host's BPF programs hook chrdev_open: 11.1% of open/close's kernel samples in
        // a perf record -g of 2026-11-27 (footprints.md section 4).
        let measured = p.instrumentation_share();
        assert!((0.05..0.15).contains(&measured), "{measured}");
        // A quarter of the samples in the host's BPF programs.
        p.excluded.insert(INSTRUMENTATION.into(), p.samples / 3);
        let share = p.instrumentation_share();
        assert!((share - 0.25).abs() < 1e-3, "{share}");
    }

    #[test]
    fn malformed_files_are_one_line_errors_naming_file_and_key() {
        let e = broken("host_ghz = ", "host_ghz = -");
        assert!(e.contains("kernel.host_ghz"), "{e}");
        let e = broken("samples = ", "samples = 9");
        assert!(e.contains("samples"), "{e}");
        let e = broken("\nrelease = ", "\nrelase = ");
        assert!(e.contains("relase") || e.contains("release"), "{e}");
        let e = broken("data = [\"task_struct\"", "data = [\"no_such_object\"");
        assert!(e.contains("data") && e.contains("no_such_object"), "{e}");
        let e = broken("functions = [\n  [", "functions = [\n  [7, ");
        assert!(e.contains("line"), "{e}");
        let e = broken(
            "host_machine = \"recording-host-epyc-zen4-kvm\"",
            "host_machine = \" \"",
        );
        assert!(e.contains("kernel.host_machine"), "{e}");
    }

    /// The committed file names the host profile the model has always derived its work
    /// against; a user's file names its host's detected profile beside it, which loading
    /// finds wherever the pair is moved, and a profile that does not load is an error that
    /// says so.
    #[test]
    fn a_recording_names_its_hosts_profile_relative_to_itself() {
        let committed = Footprints::builtin();
        assert_eq!(
            committed.kernel.host_machine,
            crate::kernel::paths::table::RECORDING_HOST
        );
        assert_eq!(
            committed.host_profile().unwrap().name,
            crate::kernel::paths::table::RECORDING_HOST
        );
        let dir = std::env::temp_dir().join(format!("kharden-fp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let host = crate::machine::source_text("haswell-i7-4770").unwrap();
        std::fs::write(dir.join("mine-host.toml"), host).unwrap();
        let text = BUILTIN.replacen(
            "host_machine = \"recording-host-epyc-zen4-kvm\"",
            "host_machine = \"mine-host.toml\"",
            1,
        );
        std::fs::write(dir.join("mine.toml"), text).unwrap();
        let file = dir.join("mine.toml").display().to_string();
        let f = Footprints::load(Some(&file)).unwrap();
        assert_eq!(f.host_profile().unwrap().name, "haswell-i7-4770");
        std::fs::remove_file(dir.join("mine-host.toml")).unwrap();
        let e = Footprints::load(Some(&file))
            .unwrap()
            .host_profile()
            .unwrap_err()
            .to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            e.contains("kernel.host_machine") && e.contains("mine-host.toml"),
            "{e}"
        );
    }
}
