//! One kernel path's measured footprint (a `[[path]]` of kernels/linux-*.toml): the
//! functions it ran, the 64-byte lines and 4 KiB pages they hold, the objects it touches
//! and its native latency. footprint.rs reads the whole file; derived.rs derives paths
//! from these.

use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

pub const LINE_BYTES: u64 = 64;
pub const PAGE_BYTES: u64 = 4096;

/// One function a path ran: name, offset from `_text`, size, samples in it (0: code that
/// runs with interrupts off, listed from the source), and the bytes from its start to its
/// furthest sampled instruction.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct FunctionUse(pub String, pub u64, pub u64, pub u64, pub u64);

impl FunctionUse {
    pub fn name(&self) -> &str {
        &self.0
    }
    pub fn offset(&self) -> u64 {
        self.1
    }
    pub fn size(&self) -> u64 {
        self.2
    }
    pub fn samples(&self) -> u64 {
        self.3
    }
    pub fn reach(&self) -> u64 {
        self.4
    }
    /// Lines the path is estimated to fetch: a sampled function from its entry through its
    /// furthest sampled line (cold code sits in separate `.cold` symbols), an interrupts-off
    /// function whole.
    pub fn estimated_lines(&self) -> std::ops::RangeInclusive<u64> {
        let end = if self.samples() == 0 {
            self.size() - 1
        } else {
            self.reach()
        };
        self.offset() / LINE_BYTES..=(self.offset() + end) / LINE_BYTES
    }
    pub fn whole_lines(&self) -> std::ops::RangeInclusive<u64> {
        self.offset() / LINE_BYTES..=(self.offset() + self.size() - 1) / LINE_BYTES
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathFootprint {
    pub name: String,
    /// The driver scenario that ran it.
    pub scenario: String,
    /// Kernel samples attributed to the path.
    pub samples: u64,
    /// Operations run while sampling.
    pub ops: u64,
    pub window_ns: u64,
    /// Completeness: lines and functions first seen in the last tenth of the samples.
    pub new_lines_last_tenth: u64,
    pub new_functions_last_tenth: u64,
    /// Samples in the path's windows left out, by reason: under an interrupt, in softirq
    /// processing, preempted, or in the return-to-user work a tick or preemption left (the
    /// path's own work only is kept).
    pub excluded: BTreeMap<String, u64>,
    /// Interrupts-off functions the source names that the recorded kernel lacks.
    pub missing_source: Vec<String>,
    /// ns per operation, bare: 10th percentile, median, 90th percentile over the timed
    /// windows (each at most 1000 operations; the host is shared, the low percentile is the
    /// figure to use).
    pub latency_ns: Option<[f64; 3]>,
    pub latency_windows: Option<u32>,
    /// Returns and indirect calls per operation (ESTIMATE: counted on another build of the
    /// kernel, docs/design/footprints.md section 5); what the speculation mitigations act on.
    #[serde(default)]
    pub returns: Option<f64>,
    #[serde(default)]
    pub indirect_calls: Option<f64>,
    /// Kernel objects touched (ESTIMATE from the source), keys of `objects`.
    pub data: Vec<String>,
    pub functions: Vec<FunctionUse>,
    /// Lines (offset / 64) that held a sampled instruction.
    pub sampled_lines: Vec<u64>,
}

impl PathFootprint {
    pub fn estimated_lines(&self) -> BTreeSet<u64> {
        self.functions
            .iter()
            .flat_map(|f| f.estimated_lines())
            .collect()
    }
    pub fn whole_lines(&self) -> BTreeSet<u64> {
        self.functions
            .iter()
            .flat_map(|f| f.whole_lines())
            .collect()
    }
    pub fn sampled_pages(&self) -> BTreeSet<u64> {
        pages_of(self.sampled_lines.iter().copied())
    }
    /// The low-percentile latency in cycles at `ghz`. It keeps what the recording host's
    /// own instrumentation took inside the operations (`instrumentation_share`): the
    /// native comparisons on that host (evict-fault) time it too, and on the paths where it
    /// runs it is 2-16% (docs/design/footprints.md, "The recording host's BPF programs").
    pub fn latency_cycles(&self, ghz: f64) -> Option<f64> {
        self.latency_ns.map(|l| l[0] * ghz)
    }
    /// The share of the samples of the path's own work that the recording host's BPF
    /// programs took (`excluded.instrumentation`; 0 for a recording made before the
    /// recorder told them apart). Their lines are not in the footprint.
    pub fn instrumentation_share(&self) -> f64 {
        let host = self.excluded.get(INSTRUMENTATION).copied().unwrap_or(0) as f64;
        if host == 0.0 {
            return 0.0;
        }
        host / (host + self.samples as f64)
    }
    /// Bytes of the objects the path touches.
    pub fn data_bytes(&self, objects: &BTreeMap<String, u64>) -> u64 {
        self.data.iter().filter_map(|d| objects.get(d)).sum()
    }
}

/// The `excluded` reason of samples in the recording host's own BPF programs.
pub const INSTRUMENTATION: &str = "instrumentation";

/// The 4 KiB pages holding `lines`.
pub fn pages_of(lines: impl IntoIterator<Item = u64>) -> BTreeSet<u64> {
    lines
        .into_iter()
        .map(|l| l * LINE_BYTES / PAGE_BYTES)
        .collect()
}
