//! The sweep file's TOML form, as written: every value keeps its span so that a check
//! made later (an unknown machine, a parameter out of range) can name its line.

use crate::error::{Error, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;

/// `[grid]`: every combination of the listed values is a point.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grid {
    pub machine: Vec<Spanned<String>>,
    /// Hardware threads each machine is scaled to; absent: the profile as it is.
    #[serde(default)]
    pub cpus: Option<Vec<Spanned<u32>>>,
    #[serde(default = "default_defenses")]
    pub defense: Vec<Spanned<String>>,
    pub workload: Vec<Spanned<toml::Value>>,
    /// Parameter path -> the values it takes.
    #[serde(default)]
    pub set: BTreeMap<Spanned<String>, Spanned<toml::Value>>,
}

/// `[[point]]`: one point, written out.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListedPoint {
    pub machine: Spanned<String>,
    #[serde(default)]
    pub cpus: Option<Spanned<u32>>,
    #[serde(default = "default_defense")]
    pub defense: Spanned<String>,
    pub workload: Spanned<toml::Value>,
    #[serde(default)]
    pub set: BTreeMap<Spanned<String>, Spanned<toml::Value>>,
}

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    /// Parameters every point runs with (path -> one value).
    #[serde(default)]
    pub set: BTreeMap<Spanned<String>, Spanned<toml::Value>>,
    #[serde(default)]
    pub grid: Option<Grid>,
    #[serde(default)]
    pub point: Vec<ListedPoint>,
}

fn default_defenses() -> Vec<Spanned<String>> {
    vec![default_defense()]
}
fn default_defense() -> Spanned<String> {
    Spanned::new(0..0, "none".to_string())
}

/// A workload as `kharden run` takes it: a name (`"kbuild"`) or a table with the name and
/// the options of that workload (`{ name = "kbuild", jobs = 60, window_ms = 25 }`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    pub name: String,
    /// syscall-loop: the syscall (default getppid).
    pub syscall: Option<String>,
    /// syscall-loop: iterations per loop (default 100000).
    pub iterations: Option<u64>,
    /// syscall-loop: loops (default 1).
    pub loops: Option<u32>,
    /// syscall-loop: the hypervisor the loop's guest runs under (kvm; default: none).
    pub virt: Option<String>,
    /// kbuild: make -jN (default: one job per hardware thread, or `jobs_per_cpu`);
    /// fio-randread: fio jobs (default 1).
    pub jobs: Option<u32>,
    /// kbuild: jobs per hardware thread, rounded up (the seed's -j60 on 96 threads is 0.625).
    pub jobs_per_cpu: Option<f64>,
    /// kbuild: simulated warm-up, ms (default 4; fio-randread 1).
    pub warmup_ms: Option<f64>,
    /// kbuild: simulated window, ms (default 24), or `window_cpu_ms` split over the jobs;
    /// fio-randread: ms (default 4).
    pub window_ms: Option<f64>,
    /// kbuild: CPU time of the build measured, ms: the window is this over the jobs.
    pub window_cpu_ms: Option<f64>,
    /// kbuild: the first window's seed (default 1).
    pub seed: Option<u64>,
    /// kbuild: independent windows pooled (default 1).
    pub samples: Option<u32>,
    /// kernel-op: the operation (fork-1, fork-1024, mmap-munmap, mmap-lock, open-close,
    /// kill, mount; default fork-1).
    pub op: Option<String>,
    /// kernel-op: hot, cold or cold-each (default hot).
    pub caches: Option<String>,
    /// kernel-op: the NUMA node whose first CPU runs it (default 0).
    pub node: Option<u32>,
    /// ssdd, syscall-loop in a guest: KVM's MMU, legacy, tdp or shadow (ssdd only;
    /// default tdp).
    pub mmu: Option<String>,
    /// ssdd, syscall-loop in a guest: KVM's CR0 handling, base, keep-roots, guest-owned-wp
    /// or broken-keep-roots (default base).
    pub kvm_variant: Option<String>,
    /// ssdd: the guest, path or kernel (default path).
    pub guest_model: Option<String>,
    /// ssdd: guest vCPUs (default 1).
    pub vcpus: Option<u64>,
    /// ssdd with guest_model = "kernel", syscall-loop in a guest: the EPT's page size, 4k,
    /// 2m or 1g (default 2m).
    pub ept_page: Option<String>,
}

impl WorkloadSpec {
    /// Reads a workload: a name, or a table with `name` and options.
    pub fn from_toml(v: &toml::Value) -> std::result::Result<WorkloadSpec, String> {
        match v {
            toml::Value::String(name) => Ok(WorkloadSpec {
                name: name.clone(),
                ..WorkloadSpec::default()
            }),
            toml::Value::Table(_) => {
                WorkloadSpec::deserialize(v.clone()).map_err(|e| e.message().trim().to_string())
            }
            other => Err(format!(
                "expected a workload name or a table {{ name = ..., options }}, got a {}",
                other.type_str()
            )),
        }
    }
    /// The options given, as `key=value` words in a fixed order (a point's identity).
    pub fn options(&self) -> Vec<String> {
        let mut out = vec![];
        let mut put = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                out.push(format!("{k}={v}"));
            }
        };
        put("syscall", self.syscall.clone());
        put("iterations", self.iterations.map(|v| v.to_string()));
        put("loops", self.loops.map(|v| v.to_string()));
        put("virt", self.virt.clone());
        put("jobs", self.jobs.map(|v| v.to_string()));
        put("jobs_per_cpu", self.jobs_per_cpu.map(|v| v.to_string()));
        put("warmup_ms", self.warmup_ms.map(|v| v.to_string()));
        put("window_ms", self.window_ms.map(|v| v.to_string()));
        put("window_cpu_ms", self.window_cpu_ms.map(|v| v.to_string()));
        put("seed", self.seed.map(|v| v.to_string()));
        put("samples", self.samples.map(|v| v.to_string()));
        put("op", self.op.clone());
        put("caches", self.caches.clone());
        put("node", self.node.map(|v| v.to_string()));
        put("mmu", self.mmu.clone());
        put("kvm_variant", self.kvm_variant.clone());
        put("guest_model", self.guest_model.clone());
        put("vcpus", self.vcpus.map(|v| v.to_string()));
        put("ept_page", self.ept_page.clone());
        out
    }

    /// `kbuild jobs=60 window_ms=25`: the name and the options given.
    pub fn label(&self) -> String {
        std::iter::once(self.name.clone())
            .chain(self.options())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// 1-based line of a byte offset.
pub fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// An error at a span of the file: `FILE: line N: msg`, as the TOML parser's own errors
/// read (a default value has no line).
pub fn at(
    place: &str,
    text: &str,
    span: std::ops::Range<usize>,
    msg: impl std::fmt::Display,
) -> Error {
    if span.is_empty() && span.start == 0 {
        Error::at(place, msg)
    } else {
        Error::at(format!("{place}: line {}", line_of(text, span.start)), msg)
    }
}

/// A parameter value as the text `--set` takes ("374", "true", "tick").
pub fn value_text(
    place: &str,
    text: &str,
    span: std::ops::Range<usize>,
    path: &str,
    v: &toml::Value,
) -> Result<String> {
    match v {
        toml::Value::Integer(i) => Ok(i.to_string()),
        toml::Value::Float(f) => Ok(f.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        toml::Value::String(s) => Ok(s.clone()),
        other => Err(at(
            place,
            text,
            span,
            format!(
                "set.{path}: expected a number, a bool or a word, got a {}",
                other.type_str()
            ),
        )),
    }
}

/// `set` tables flattened to (path, value, span): `xpfo.page_cycles = 1` written as a
/// dotted key arrives as nested tables.
pub fn flatten_set(
    set: &BTreeMap<Spanned<String>, Spanned<toml::Value>>,
) -> Vec<(String, toml::Value, std::ops::Range<usize>)> {
    fn walk(
        prefix: &str,
        v: &toml::Value,
        span: &std::ops::Range<usize>,
        out: &mut Vec<(String, toml::Value, std::ops::Range<usize>)>,
    ) {
        match v {
            toml::Value::Table(t) => {
                for (k, v) in t {
                    walk(&format!("{prefix}.{k}"), v, span, out);
                }
            }
            other => out.push((prefix.to_string(), other.clone(), span.clone())),
        }
    }
    let mut out = vec![];
    for (k, v) in set {
        walk(k.get_ref(), v.get_ref(), &k.span(), &mut out);
    }
    out
}
