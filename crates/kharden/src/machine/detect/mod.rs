//! `kharden machine detect`: a machine profile of this host.
//!
//! What user space can see is read (sysfs topology and caches, CPUID or /proc/cpuinfo for the
//! model, features and TLB geometry) and what user space can time is measured (syscall round trip,
//! minor fault, cross-CPU TLB shootdown, atomic increment, STLB hit, cache and DRAM latency).
//! Everything else (CR3 writes, INVLPG, INVPCID, interrupt entry, IPI costs, paging-structure
//! cache sizes) is privileged or invisible: it is filled from the library profile of the closest
//! microarchitecture, and the comment on each line says exactly where every value came from.
//!
//! Measurements are bounded: each has a fixed iteration count and the whole set a time budget,
//! so detection finishes in well under a second.

//!
//! One file per job: `topology` and `caches` read sysfs, `cpuid` and `tlb_leaves` decode the
//! processor's own description (x86), `facts` gathers what the host reports, `library` picks
//! the profile that fills the gaps, `measure/` times the host, and `emit/` writes the profile
//! text through `toml_text`.

mod caches;
#[cfg(target_arch = "x86_64")]
mod cpuid;
mod cpuid_dump;
mod emit;
mod facts;
mod library;
mod measure;
mod tlb_leaves;
mod toml_text;
mod topology;
mod uarch;

use super::profile;
use crate::error::{Error, Result};
pub use cpuid_dump::tlbs_from_cpuid_dump;
use facts::HostFacts;
use std::time::Duration;

/// How to detect.
#[derive(Debug, Clone)]
pub struct DetectOptions {
    /// `name` of the profile; default "detected-<model>".
    pub name: Option<String>,
    /// Time the host (false: only read what it reports, and fill the rest from the library).
    pub measure: bool,
    /// Upper bound on the time all measurements together may take.
    pub budget: Duration,
}

impl Default for DetectOptions {
    fn default() -> Self {
        DetectOptions {
            name: None,
            measure: true,
            budget: Duration::from_millis(500),
        }
    }
}

/// A detected profile: its TOML text (with one `# machine detect:` comment per value) and the
/// parsed profile (the text is checked to parse and validate before it is returned).
#[derive(Debug, Clone)]
pub struct Detection {
    pub text: String,
    pub profile: profile::MachineProfile,
}

/// Detects this host. Fails only if the result would not be a valid profile.
pub fn detect(opts: &DetectOptions) -> Result<Detection> {
    let facts = HostFacts::read();
    let (fallback, why) = library::closest_profile(&facts);
    let meas = if opts.measure {
        measure::run(&facts, opts.budget)
    } else {
        measure::Measurements::default()
    };
    let text = emit::emit(&facts, &fallback, &why, &meas, opts);
    let profile = super::parse("machine detect", &text)?;
    Ok(Detection { text, profile })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(dead_code)] // Arm is only constructed on aarch64 builds
pub(crate) enum Vendor {
    Intel,
    Amd,
    Arm,
    Other,
}

/// A value together with how it was obtained.
#[derive(Debug, Clone)]
pub(crate) struct Got<T> {
    pub value: T,
    pub how: String,
}

pub(crate) fn got<T>(value: T, how: impl Into<String>) -> Got<T> {
    Got {
        value,
        how: how.into(),
    }
}

/// One-line error for the CLI when a detected profile cannot be written.
pub fn write_error(path: &str, e: std::io::Error) -> Error {
    Error::at(path, format!("cannot write detected profile: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn detection_parses_and_is_bounded() {
        let t = Instant::now();
        let d = detect(&DetectOptions::default()).unwrap_or_else(|e| panic!("{e}"));
        let took = t.elapsed();
        // measurements stop starting new steps after 500 ms; the bound is loose because CI runs
        // this beside other tests on two shared cores
        assert!(took < Duration::from_secs(10), "detection took {took:?}");
        let again = crate::machine::parse("again.toml", &d.text).unwrap();
        assert_eq!(again.name, d.profile.name);
        assert!(d.profile.threads() >= 1);
        // a host with two cores on a package measures the line transfer between them
        let lt = &d.profile.costs.line_transfer_ns;
        if d.profile.topology.cores_per_socket > 1
            && d.text.contains("measured: one cache line bounced")
        {
            assert!(
                lt.same_socket_ns
                    .is_some_and(|ns| ns > 0.5 && ns < 10_000.0),
                "{lt:?}"
            );
        }
        // every value line says how it was obtained
        for line in d.text.lines() {
            let code = line.split('#').next().unwrap().trim();
            if code.contains('=') {
                assert!(line.contains("# machine detect: "), "no provenance: {line}");
            }
        }
    }

    #[test]
    fn detection_without_measurements_fills_from_the_library() {
        let d = detect(&DetectOptions {
            name: Some("probe".into()),
            measure: false,
            budget: Duration::ZERO,
        })
        .unwrap();
        assert_eq!(d.profile.name, "probe");
        assert!(d
            .text
            .contains("not detectable from user space; taken from machines/"));
        assert!(d.profile.measured.is_none());
    }
}
