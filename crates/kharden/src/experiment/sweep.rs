//! Scaling sweeps: the same kbuild under the XPFO policies on one machine family scaled to
//! different CPU counts, to show where a mechanism's cost explodes and what deferral or
//! broadcast invalidation hardware changes.

use crate::error::{Error, Result};
use crate::machine::MachineProfile;
use crate::params::Params;
use crate::report::table::Table;
use crate::workload::kbuild_profile::JobProfile;
use crate::workload::kbuild_run::{simulate, Sampling};
use serde::Serialize;

/// The configurations every point runs; the first is the baseline.
pub const CONFIGS: &[(&str, &str)] = &[
    ("baseline", "pti:linux"),
    ("xpfo", "pti:linux,xpfo:immediate"),
    ("xpfo+deferred", "pti:linux,xpfo:deferred"),
];

#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub family: String,
    pub cpus: u32,
    pub jobs: u32,
    pub config: String,
    /// System time per compile job of work, milliseconds.
    pub system_ms_per_job: f64,
    /// System time relative to the baseline at the same CPU count.
    pub ratio: f64,
}

/// `base` with its topology scaled to `cpus` hardware threads: SMT and NUMA layout kept,
/// sockets added when one socket's threads are not enough.
pub fn scaled(base: &MachineProfile, cpus: u32) -> Result<MachineProfile> {
    let t = &base.topology;
    let per_socket = t.cores_per_socket * t.threads_per_core;
    if cpus == 0 || cpus % t.threads_per_core != 0 {
        return Err(Error::new(format!(
            "--cpus: {cpus} is not a multiple of {}'s {} threads per core",
            base.name, t.threads_per_core
        )));
    }
    // The fewest sockets that hold the threads and split them evenly.
    let cores_total = cpus / t.threads_per_core;
    let sockets = (cpus.div_ceil(per_socket).max(1)..=cores_total)
        .find(|s| cores_total % s == 0)
        .unwrap_or(1);
    let cores = cores_total / sockets;
    let mut m = base.clone();
    m.name = format!("{}-x{cpus}", base.name);
    m.topology.sockets = sockets;
    m.topology.cores_per_socket = cores;
    // Flat logical destinations reach 8 CPUs; Linux routes more in physical mode.
    if m.costs.ipi_cpus_per_write == Some(8) && cpus > 8 {
        m.costs.ipi_cpus_per_write = Some(1);
    }
    m.validate()
        .map_err(|e| Error::new(format!("{}: {e}", m.name)))?;
    Ok(m)
}

/// make -jN with N = 5/8 of the threads, the ratio of the seed's -j60 on 96 threads.
pub fn jobs_for(cpus: u32) -> u32 {
    (cpus * 5).div_ceil(8).max(1)
}

/// Runs every (family, CPU count, configuration) point on every core, the largest machines
/// first so that the longest points do not start last; results in family, count and
/// configuration order, each point's ratio to its baseline.
pub fn run(
    families: &[MachineProfile],
    cpus: &[u32],
    window_cpu_ms: f64,
    params: &Params,
) -> Result<Vec<Point>> {
    let profile = JobProfile::builtin();
    let mut machines = vec![];
    for base in families {
        for &n in cpus {
            machines.push((base.name.clone(), n, scaled(base, n)?));
        }
    }
    let mut order: Vec<(usize, usize)> = (0..machines.len())
        .flat_map(|m| (0..CONFIGS.len()).map(move |c| (m, c)))
        .collect();
    order.sort_by_key(|&(m, _)| std::cmp::Reverse(machines[m].1));
    let per_job = crate::sim::parallel::map_indices(order.len(), |i| {
        let (m, c) = order[i];
        let (_, n, machine) = &machines[m];
        let jobs = jobs_for(*n);
        let sampling = Sampling {
            window_ms: window_cpu_ms / jobs as f64,
            ..Sampling::default()
        };
        let r = simulate(machine, CONFIGS[c].1, jobs, &profile, sampling, params)?;
        Ok(r.system_per_user_cycle() * profile.user_cycles() * 1e3)
    });
    let mut by_point = vec![vec![0.0; CONFIGS.len()]; machines.len()];
    for (&(m, c), r) in order.iter().zip(per_job) {
        by_point[m][c] = r?;
    }
    let mut points = vec![];
    for ((family, n, _), values) in machines.iter().zip(by_point) {
        for ((label, _), &value) in CONFIGS.iter().zip(&values) {
            points.push(Point {
                family: family.clone(),
                cpus: *n,
                jobs: jobs_for(*n),
                config: label.to_string(),
                system_ms_per_job: value,
                ratio: value / values[0],
            });
        }
    }
    Ok(points)
}

pub fn table(points: &[Point]) -> Table {
    let mut t = Table::new(
        "system time per compile job (ms), and relative to the baseline",
        &[
            "family",
            "cpus",
            "make -j",
            "config",
            "system ms/job",
            "x baseline",
        ],
    );
    for p in points {
        t.push(vec![
            p.family.clone(),
            p.cpus.to_string(),
            p.jobs.to_string(),
            p.config.clone(),
            format!("{:.1}", p.system_ms_per_job),
            format!("{:.2}", p.ratio),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn scaling_keeps_smt_and_adds_sockets() {
        let base = crate::machine::load("xeon-platinum-8160").unwrap();
        let m = scaled(&base, 4).unwrap();
        assert_eq!(
            (m.topology.sockets, m.topology.cores_per_socket, m.threads()),
            (1, 2, 4)
        );
        let m = scaled(&base, 256).unwrap();
        assert_eq!(m.threads(), 256);
        assert!(m.topology.sockets >= 3);
        assert!(scaled(&base, 7).is_err());
        assert_eq!(jobs_for(96), 60);
    }

    #[test]
    fn a_flat_logical_desktop_scaled_past_8_cpus_sends_in_physical_mode() {
        let base = crate::machine::load("haswell-i7-4770").unwrap();
        assert_eq!(base.costs.ipi_cpus_per_write, Some(8));
        assert_eq!(scaled(&base, 8).unwrap().costs.ipi_cpus_per_write, Some(8));
        assert_eq!(scaled(&base, 16).unwrap().costs.ipi_cpus_per_write, Some(1));
    }
}
