//! What user space can time on this host, each measurement bounded in iterations and all of
//! them together by a time budget.

#[cfg(target_os = "linux")]
mod chase;
#[cfg(target_os = "linux")]
mod cpus;
#[cfg(target_os = "linux")]
mod kernel_paths;
#[cfg(target_os = "linux")]
mod memory;

use super::facts::HostFacts;
use std::time::Duration;
#[cfg(target_os = "linux")]
use std::time::Instant;

#[derive(Debug, Clone, Default)]
pub(crate) struct Measurements {
    pub syscall_ns: Option<f64>,
    /// An empty syscall's round trip (no handler: -ENOSYS): the entry and exit code alone.
    pub empty_syscall_ns: Option<f64>,
    pub minor_fault_ns: Option<f64>,
    pub shootdown_ns: Option<f64>,
    pub shootdown_note: Option<String>,
    pub atomic_ns: Option<f64>,
    pub stlb_hit_ns: Option<f64>,
    pub l1_ns: Option<f64>,
    pub l2_ns: Option<f64>,
    pub llc_ns: Option<f64>,
    pub dram_local_ns: Option<f64>,
    pub dram_remote_ns: Option<f64>,
    /// A 4 KiB page clear with its lines in no cache, and in L1 (ns per page).
    pub page_clear_ns: Option<(f64, f64)>,
    /// One modified cache line moved between two CPUs, per distance (same core, same socket,
    /// other socket: LINE_DISTANCES), with the pair measured.
    pub line_transfer: [Option<(f64, usize, usize)>; 3],
    /// Measurements left out because the time budget ran out.
    pub skipped: Vec<&'static str>,
}

/// The `[costs.line_transfer_ns]` keys, in the order of `Measurements::line_transfer`.
pub(crate) const LINE_DISTANCES: [&str; 3] = ["same_core_ns", "same_socket_ns", "remote_socket_ns"];

#[cfg(target_os = "linux")]
struct Budget {
    start: Instant,
    limit: Duration,
}
#[cfg(target_os = "linux")]
impl Budget {
    fn left(&self) -> bool {
        self.start.elapsed() < self.limit
    }
}

/// Every measurement in turn while the time budget lasts; the rest are listed as skipped.
#[cfg(target_os = "linux")]
pub(crate) fn run(f: &HostFacts, limit: Duration) -> Measurements {
    let b = Budget {
        start: Instant::now(),
        limit,
    };
    let mut m = Measurements::default();
    macro_rules! step {
        ($name:literal, $e:expr) => {
            if b.left() {
                $e
            } else {
                m.skipped.push($name);
            }
        };
    }
    step!("syscall", {
        m.syscall_ns = kernel_paths::syscall_roundtrip(libc::SYS_getppid);
        m.empty_syscall_ns = kernel_paths::syscall_roundtrip(kernel_paths::EMPTY_SYSCALL);
    });
    step!("atomic", m.atomic_ns = cpus::atomic_increment());
    step!(
        "minor fault",
        m.minor_fault_ns = kernel_paths::minor_fault()
    );
    step!("stlb", m.stlb_hit_ns = memory::stlb_hit(f));
    step!("line transfer", m.line_transfer = cpus::line_transfers());
    step!("shootdown", {
        let (v, note) = kernel_paths::shootdown(f);
        m.shootdown_ns = v;
        m.shootdown_note = note;
    });
    if let Some(l1) = &f.l1d {
        step!(
            "l1 latency",
            m.l1_ns = memory::chase_latency((l1.kib as usize * 1024) / 2, 20_000)
        );
    }
    if let (Some(l1), Some(l2)) = (&f.l1d, &f.l2) {
        let bytes = ((l1.kib + l2.kib) as usize * 1024) / 2;
        step!("l2 latency", m.l2_ns = memory::chase_latency(bytes, 20_000));
    }
    let l2_kib = f.l2.as_ref().map_or(256, |c| c.kib);
    if let Some(llc) = f.llc.as_ref().filter(|c| c.kib > 2 * l2_kib) {
        // a quarter of one LLC instance (as cpu0 sees it), at least four times the L2: well
        // inside the LLC even where it is shared with other cores or tenants
        let bytes = (llc.kib as usize * 1024 / 4)
            .max(4 * l2_kib as usize * 1024)
            .min(llc.kib as usize * 1024 * 3 / 4);
        step!(
            "llc latency",
            m.llc_ns = memory::chase_latency(bytes, 20_000)
        );
    }
    let llc_bytes = f.llc.as_ref().map_or(8 << 20, |c| {
        c.kib as usize * 1024 * c.instances_in_package.max(1) as usize
    });
    let dram_bytes = (2 * llc_bytes + (16 << 20)).clamp(32 << 20, 192 << 20);
    step!(
        "dram latency",
        m.dram_local_ns = memory::dram_latency(dram_bytes, None)
    );
    step!(
        "page clears",
        m.page_clear_ns = memory::page_clears(dram_bytes)
    );
    if f.nodes > 1 {
        step!(
            "remote dram latency",
            m.dram_remote_ns = memory::remote_dram(f, dram_bytes)
        );
    }
    m
}

#[cfg(target_os = "linux")]
fn now_ns(t: Instant) -> f64 {
    t.elapsed().as_nanos() as f64
}

/// The nearest-rank percentile `q` (0..=1) of the finite positive values of `v`.
#[cfg(target_os = "linux")]
fn percentile(mut v: Vec<f64>, q: f64) -> Option<f64> {
    v.retain(|x| x.is_finite() && *x > 0.0);
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[((v.len() - 1) as f64 * q).round() as usize])
}

#[cfg(target_os = "linux")]
fn median(v: Vec<f64>) -> Option<f64> {
    percentile(v, 0.5)
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn run(_f: &HostFacts, _limit: Duration) -> Measurements {
    Measurements::default()
}

/// a - b when clearly positive (more than 2% of b), else None.
pub(crate) fn measure_diff(a: f64, b: f64) -> Option<f64> {
    let d = a - b;
    (d.is_finite() && d > 0.02 * b.abs()).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_count_only_when_clear() {
        assert_eq!(measure_diff(110.0, 100.0), Some(10.0));
        assert_eq!(measure_diff(100.5, 100.0), None);
    }
}
