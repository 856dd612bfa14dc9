//! The measured facts of one compile job (workloads/kbuild-job.toml) and their conversion
//! into a JobSpec. Work is carried in cycles of the recording host, which a simulated
//! machine executes at its own clock.

use super::kbuild::JobSpec;
use crate::error::{Error, Result};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobProfile {
    pub processes: f64,
    pub user_anon_pages: f64,
    pub page_cache_pages: f64,
    pub syscalls: f64,
    pub read_syscall_share: f64,
    pub write_syscall_share: f64,
    pub read_pages: f64,
    pub write_pages: f64,
    pub user_seconds: f64,
    pub system_seconds: f64,
    pub host_ghz: f64,
    pub process_shares: Vec<f64>,
    pub touches_per_chunk: u32,
}

pub const BUILTIN: &str = include_str!("../../../../workloads/kbuild-job.toml");

impl JobProfile {
    pub fn builtin() -> JobProfile {
        Self::parse("workloads/kbuild-job.toml", BUILTIN).expect("the shipped job profile parses")
    }

    pub fn parse(place: &str, text: &str) -> Result<JobProfile> {
        let p: JobProfile = toml::from_str(text)
            .map_err(|e| Error::at(place, crate::machine::toml_message(&e, text)))?;
        let sum: f64 = p.process_shares.iter().sum();
        if p.process_shares.is_empty()
            || (sum - 1.0).abs() > 1e-6
            || p.process_shares.iter().any(|&s| s <= 0.0)
        {
            return Err(Error::at(
                place,
                format!("process_shares: expected positive shares summing to 1, got sum {sum}"),
            ));
        }
        for (field, v) in [
            ("user_seconds", p.user_seconds),
            ("system_seconds", p.system_seconds),
            ("host_ghz", p.host_ghz),
        ] {
            if !(v > 0.0 && v < 1e6) {
                return Err(Error::at(
                    place,
                    format!("{field}: expected a positive number, got {v}"),
                ));
            }
        }
        Ok(p)
    }

    pub fn user_cycles(&self) -> f64 {
        self.user_seconds * self.host_ghz * 1e9
    }

    pub fn system_cycles(&self) -> f64 {
        self.system_seconds * self.host_ghz * 1e9
    }

    /// The job spec, with `extra_kernel_cycles_per_syscall` of kernel work the model does not
    /// otherwise account for (calibrated so the job's kernel cycles match the measurement).
    pub fn spec(&self, extra_kernel_cycles_per_syscall: f64) -> JobSpec {
        let other = self.syscalls * (1.0 - self.read_syscall_share - self.write_syscall_share);
        JobSpec {
            process_shares: self.process_shares.clone(),
            user_cycles: self.user_cycles(),
            anon_faults: self.user_anon_pages,
            read_pages: self.read_pages,
            // Page-cache pages not explained by the written pages were read misses.
            read_misses: (self.page_cache_pages - self.write_pages).max(0.0),
            write_pages: self.write_pages,
            other_syscalls: other,
            other_syscall_extra_cycles: extra_kernel_cycles_per_syscall,
            touches_per_chunk: self.touches_per_chunk,
        }
    }
}
