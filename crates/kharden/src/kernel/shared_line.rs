//! A kernel cache line that several CPUs read and write outside the IPI path (a global
//! cpumask, a shared counter), and what its coherence traffic costs.
//!
//! The engine runs one operation of a CPU at a time, so a burst of kernel work (a run of page
//! faults) looks atomic to the other CPUs, although in time their accesses interleave with
//! it. Replaying holders in processing order would hide almost every miss of a hot line. So
//! the line keeps its recent accesses (the last `HORIZON` of simulated time) and charges each
//! access the expected cost of a miss: the chance that another CPU took the line since this
//! CPU last touched it, given the other CPUs' access rate, times the transfer latency from
//! where they sit. A read is lost to another CPU's write; a write also to its reads.

use super::{cpuset::CpuSet, ipi::Distance, CpuId, Kernel};
use crate::sim::{Counter, Time, TimeCategory};
use std::collections::VecDeque;

/// How far back the access rate is measured: long against one operation of the engine
/// (~20-100 µs), short against the workload's phases.
const HORIZON: Time = Time(1_000_000_000); // 1 ms

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineAccess {
    Read,
    Write,
}

#[derive(Debug, Clone, Default)]
pub struct SharedLine {
    /// Accesses within the horizon, in processing order: (time, cpu, is a write).
    recent: VecDeque<(Time, CpuId, bool)>,
    /// Per CPU: accesses and writes within the horizon, and when it last touched the line.
    /// `active` holds the CPUs with accesses, so a touch visits those, not every CPU.
    active: CpuSet,
    accesses: Vec<u32>,
    writes: Vec<u32>,
    last_touch: Vec<Option<Time>>,
    /// Expected transfers not yet counted (the counter is whole).
    uncounted: f64,
}

impl SharedLine {
    fn record(&mut self, at: Time, cpu: CpuId, write: bool) {
        self.recent.push_back((at, cpu, write));
        self.active.insert(cpu);
        self.accesses[cpu] += 1;
        self.writes[cpu] += write as u32;
        self.last_touch[cpu] = Some(at);
        let oldest = Time(at.0.saturating_sub(HORIZON.0));
        while let Some(&(t, c, w)) = self.recent.front() {
            if t >= oldest {
                break;
            }
            self.recent.pop_front();
            self.accesses[c] -= 1;
            self.writes[c] -= w as u32;
            if self.accesses[c] == 0 {
                self.active.remove(c);
            }
        }
    }
}

impl Kernel {
    /// `cpu` reads or writes `line` now; the expected miss stalls it (`shared-line` time) and
    /// is counted in `shared_line_transfers`.
    pub fn touch_shared_line(&mut self, line: &mut SharedLine, cpu: CpuId, access: LineAccess) {
        self.note_clock_read();
        let n = self.cpus.len();
        if line.accesses.len() != n {
            *line = SharedLine {
                active: CpuSet::new(n),
                accesses: vec![0; n],
                writes: vec![0; n],
                last_touch: vec![None; n],
                ..SharedLine::default()
            };
        }
        let now = self.cpus[cpu].now;
        // Other CPUs' conflicting accesses in the horizon, and their mean transfer latency.
        let (mut conflicts, mut latency_ns) = (0u32, 0.0);
        let transfer_ns = [
            Distance::SameCore,
            Distance::SameSocket,
            Distance::OtherSocket,
        ]
        .map(|d| self.transfer_over(d).secs() * 1e9);
        // In CPU order, as a loop over every CPU would add them.
        for other in line.active.iter().filter(|&c| c != cpu) {
            let k = if access == LineAccess::Write {
                line.accesses[other]
            } else {
                line.writes[other]
            };
            if k > 0 {
                conflicts += k;
                latency_ns += k as f64 * transfer_ns[self.distance(other, cpu) as usize];
            }
        }
        if conflicts > 0 {
            let miss = match line.last_touch[cpu] {
                Some(t) if t <= now => {
                    let rate = conflicts as f64 / HORIZON.secs();
                    1.0 - (-rate * (now - t).secs()).exp()
                }
                _ => 1.0, // never held it (or the last touch is ahead of this CPU's clock)
            };
            let stall = Time::from_ns(miss * latency_ns / conflicts as f64);
            if !self.fast_forward {
                self.stall(cpu, stall, TimeCategory::SharedLine);
            }
            line.uncounted += miss;
            let whole = line.uncounted.floor();
            line.uncounted -= whole;
            self.cpus[cpu]
                .stats
                .add(Counter::SharedLineTransfers, whole as u64);
        }
        line.record(now, cpu, access == LineAccess::Write);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{defense, machine};

    fn shared_ns(k: &Kernel, cpu: CpuId) -> f64 {
        k.cpus[cpu].stats.time(TimeCategory::SharedLine).secs() * 1e9
    }

    fn at(k: &mut Kernel, cpu: CpuId, ns: u64) {
        k.cpus[cpu].now = Time(ns * 1000);
    }

    #[test]
    fn a_line_only_one_cpu_uses_costs_nothing() {
        let mut k = Kernel::boot(
            machine::load("xeon-platinum-8160").unwrap(),
            defense::parse_list("none").unwrap(),
        );
        let mut line = SharedLine::default();
        for i in 0..100 {
            at(&mut k, 3, 1000 * i);
            k.touch_shared_line(&mut line, 3, LineAccess::Write);
        }
        assert_eq!(shared_ns(&k, 3), 0.0);
    }

    #[test]
    fn misses_grow_with_the_others_rate_and_pay_their_distance() {
        let m = machine::load("xeon-platinum-8160").unwrap();
        let (local, remote) = (
            m.costs.line_transfer_ns.same_socket_ns.unwrap(),
            m.costs.line_transfer_ns.remote_socket_ns.unwrap(),
        );
        let mut k = Kernel::boot(m, defense::parse_list("none").unwrap());
        // CPU 0 writes every µs; CPU 2 (same socket) writes every 10 µs, then every 100 ns.
        let mut line = SharedLine::default();
        for i in 0..200 {
            at(&mut k, 2, 10_000 * i);
            k.touch_shared_line(&mut line, 2, LineAccess::Write);
            at(&mut k, 0, 10_000 * i + 5_000);
            k.touch_shared_line(&mut line, 0, LineAccess::Write);
        }
        let sparse = shared_ns(&k, 0) / 200.0;
        assert!(
            sparse > 0.5 * local && sparse <= local,
            "alternating writers miss almost every time: {sparse} of {local}"
        );
        // A reader on the other socket that reads once pays the full remote transfer.
        at(&mut k, 60, 2_000_000);
        k.touch_shared_line(&mut line, 60, LineAccess::Read);
        assert!(
            (shared_ns(&k, 60) - remote).abs() < 1e-3,
            "{}",
            shared_ns(&k, 60)
        );
        // Reads do not take the line from other readers.
        let before = shared_ns(&k, 60);
        at(&mut k, 61, 2_000_100);
        k.touch_shared_line(&mut line, 61, LineAccess::Read);
        at(&mut k, 60, 2_000_200);
        k.touch_shared_line(&mut line, 60, LineAccess::Read);
        let reread = shared_ns(&k, 60) - before;
        assert!(
            reread < 0.05 * remote,
            "only writes (200 per ms) can have taken it in 200 ns: {reread}"
        );
    }

    #[test]
    fn a_burst_from_one_cpu_still_sees_the_others() {
        // Writes by 8 other CPUs every µs each; CPU 0 then writes 10 times, 1 µs apart, in one
        // operation: each of its writes almost surely found the line elsewhere.
        let mut k = Kernel::boot(
            machine::load("xeon-platinum-8160").unwrap(),
            defense::parse_list("none").unwrap(),
        );
        let mut line = SharedLine::default();
        for t in 0..500u64 {
            for c in 1..=8 {
                at(&mut k, c, t * 1000 + c as u64);
                k.touch_shared_line(&mut line, c, LineAccess::Write);
            }
        }
        for i in 0..10u64 {
            at(&mut k, 0, 400_000 + i * 1000);
            k.touch_shared_line(&mut line, 0, LineAccess::Write);
        }
        let transfers = k.cpus[0].stats.counter(Counter::SharedLineTransfers);
        assert!(transfers >= 9, "{transfers}");
    }
}
