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

use super::ipi::Distance;
use crate::kernel::{CpuId, Kernel};
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
    /// Accesses and writes within the horizon, per CPU, per core, per socket and in all,
    /// so a touch reads its conflicts by distance without visiting the other CPUs.
    cpu: Counts,
    core: Counts,
    socket: Counts,
    all: (u32, u32),
    /// CPUs per core and per socket (CPU numbering is socket, then core, then thread).
    threads_per_core: usize,
    cpus_per_socket: usize,
    /// Per CPU: when it last touched the line.
    last_touch: Vec<Option<Time>>,
    /// Expected transfers not yet counted (the counter is whole).
    uncounted: f64,
}

/// Accesses and writes within the horizon, per index.
#[derive(Debug, Clone, Default)]
struct Counts {
    accesses: Vec<u32>,
    writes: Vec<u32>,
}

impl Counts {
    fn new(n: usize) -> Counts {
        Counts {
            accesses: vec![0; n],
            writes: vec![0; n],
        }
    }

    fn add(&mut self, i: usize, write: bool, sign: i32) {
        self.accesses[i] = self.accesses[i].wrapping_add_signed(sign);
        self.writes[i] = self.writes[i].wrapping_add_signed(sign * write as i32);
    }

    /// Accesses that conflict with an access of the given kind: every access for a write,
    /// the writes for a read.
    fn conflicting(&self, i: usize, write: bool) -> u32 {
        if write {
            self.accesses[i]
        } else {
            self.writes[i]
        }
    }
}

impl SharedLine {
    fn new(cpus: usize, threads_per_core: usize, cpus_per_socket: usize) -> SharedLine {
        SharedLine {
            cpu: Counts::new(cpus),
            core: Counts::new(cpus.div_ceil(threads_per_core)),
            socket: Counts::new(cpus.div_ceil(cpus_per_socket)),
            threads_per_core,
            cpus_per_socket,
            last_touch: vec![None; cpus],
            ..SharedLine::default()
        }
    }

    fn count(&mut self, cpu: CpuId, write: bool, sign: i32) {
        self.cpu.add(cpu, write, sign);
        self.core.add(cpu / self.threads_per_core, write, sign);
        self.socket.add(cpu / self.cpus_per_socket, write, sign);
        self.all.0 = self.all.0.wrapping_add_signed(sign);
        self.all.1 = self.all.1.wrapping_add_signed(sign * write as i32);
    }

    fn record(&mut self, at: Time, cpu: CpuId, write: bool) {
        self.recent.push_back((at, cpu, write));
        self.count(cpu, write, 1);
        self.last_touch[cpu] = Some(at);
        let oldest = Time(at.0.saturating_sub(HORIZON.0));
        while let Some(&(t, c, w)) = self.recent.front() {
            if t >= oldest {
                break;
            }
            self.recent.pop_front();
            self.count(c, w, -1);
        }
    }

    /// The other CPUs' accesses in the horizon that conflict with `cpu`'s access, by
    /// distance: on its core (SMT siblings), on its socket, on other sockets.
    fn conflicts(&self, cpu: CpuId, write: bool) -> [u32; 3] {
        let (core, socket) = (cpu / self.threads_per_core, cpu / self.cpus_per_socket);
        let mine = self.cpu.conflicting(cpu, write);
        let on_core = self.core.conflicting(core, write);
        let on_socket = self.socket.conflicting(socket, write);
        let all = if write { self.all.0 } else { self.all.1 };
        [on_core - mine, on_socket - on_core, all - on_socket]
    }
}

impl Kernel {
    /// `cpu` reads or writes `line` now; the expected miss stalls it (`shared-line` time) and
    /// is counted in `shared_line_transfers`.
    pub fn touch_shared_line(&mut self, line: &mut SharedLine, cpu: CpuId, access: LineAccess) {
        self.note_clock_read();
        let n = self.cpus.len();
        if line.last_touch.len() != n {
            let t = &self.machine.topology;
            let tpc = t.threads_per_core as usize;
            *line = SharedLine::new(n, tpc, t.cores_per_socket as usize * tpc);
        }
        let now = self.cpus[cpu].now;
        // Other CPUs' conflicting accesses in the horizon, and their mean transfer latency.
        let transfer_ns = [
            Distance::SameCore,
            Distance::SameSocket,
            Distance::OtherSocket,
        ]
        .map(|d| self.transfer_over(d).secs() * 1e9);
        let by_distance = line.conflicts(cpu, access == LineAccess::Write);
        let conflicts: u32 = by_distance.iter().sum();
        let latency_ns: f64 = by_distance
            .iter()
            .zip(transfer_ns)
            .map(|(&k, ns)| k as f64 * ns)
            .sum();
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
