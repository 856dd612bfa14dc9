//! Kernel operations after user work has pushed the kernel out of the caches: the test of a
//! kernel path's memory-hierarchy cost that a tight loop cannot give. A tight loop's
//! latency is where each path's work comes from (its modelled warm stall is subtracted from
//! it), so a hot path matches the host by construction; with the caches emptied by user
//! data before each operation, only the modelled misses (text, data, walks, a new page's
//! clear) can make up the difference.
//!
//! The benchmark, natively (`native.rs`, `kharden kernel evict-fault`) and here: a process
//! reads one word of every line of an `evict_kib` buffer of its own, then runs one
//! operation, timed: a store to the next page of an anonymous mapping (the fault, from the
//! trap to the return to user mode), getppid(), or open() and close() of /dev/zero.
//! Repeated, the median is kept.

pub mod native;

use crate::arch::x86::{Access, VirtAddr};
use crate::error::{Error, Result};
use crate::kernel::{CpuId, Kernel};
use crate::sim::{Stats, Time};

/// The operations the benchmark times, natively and in the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Fault,
    Getppid,
    OpenClose,
}

impl Op {
    pub const ALL: &'static [Op] = &[Op::Fault, Op::Getppid, Op::OpenClose];

    pub fn name(self) -> &'static str {
        match self {
            Op::Fault => "fault",
            Op::Getppid => "getppid",
            Op::OpenClose => "open-close",
        }
    }

    pub fn parse(name: &str) -> Result<Op> {
        super::by_name(Op::ALL, Op::name, name, "operation")
    }

    /// One run of the operation by the task on `cpu`.
    fn once(self, k: &mut Kernel, cpu: CpuId) -> Result<()> {
        match self {
            Op::Fault => k.anon_fault(cpu),
            Op::Getppid | Op::OpenClose => {
                let spec = crate::kernel::paths::syscall::lookup(&k.paths, self.name())
                    .expect("the syscall table has the benchmark's syscalls");
                k.syscall(cpu, &spec)
            }
        }
    }
}

/// Most eviction a benchmark may ask for: the model reads every line of it before each run.
pub const MAX_EVICT_KIB: u64 = 1 << 20;

/// The median of `values` (the upper one of an even count; 0 for none).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// The timed operations: each one's time, and their counters summed.
#[derive(Debug, Clone, Default)]
pub struct Runs {
    pub times: Vec<Time>,
    pub stats: Stats,
}

impl Runs {
    /// The median run, in ns.
    pub fn median_ns(&self) -> f64 {
        median(self.times.iter().map(|t| t.ns()).collect())
    }
}

/// `times` runs of `op` on CPU 0 of a booted kernel `k`, each after a sequential read of an
/// `evict_kib` KiB user buffer (populated first); one untimed round before them, as the
/// native benchmark drops its first.
pub fn run(k: &mut Kernel, op: Op, evict_kib: u64, times: u32) -> Result<Runs> {
    let cpu: CpuId = 0;
    let shell = k.spawn_on(cpu, "sh", None);
    let task = k.spawn_on(cpu, "bench", Some(shell));
    k.switch_to(cpu, task);
    k.enter_user(cpu);
    let buffer_pages = evict_kib.div_ceil(4);
    for _ in 0..buffer_pages {
        k.anon_fault(cpu)?;
    }
    let heap = k.mms[k.current_mm(cpu)].heap;
    let mut out = Runs::default();
    for round in 0..=times {
        for page in 0..buffer_pages {
            read_page(k, cpu, heap.offset(page * 4096))?;
        }
        let (t0, before) = (k.cpus[cpu].now, k.cpus[cpu].stats.clone());
        op.once(k, cpu)?;
        if round > 0 {
            out.times.push(k.cpus[cpu].now - t0);
            let mut s = k.cpus[cpu].stats.clone();
            s.subtract(&before);
            out.stats.merge(&s);
        }
    }
    Ok(out)
}

/// User loads of every line of the page at `va`: translated (the TLBs fill too) and read
/// through the data side of the caches. Their time is not measured.
fn read_page(k: &mut Kernel, cpu: CpuId, va: VirtAddr) -> Result<()> {
    let t = k
        .touch(cpu, va, Access::Read)
        .map_err(|f| Error::new(format!("eviction buffer at {va}: {f:?}")))?;
    let (core, socket, remote) = k.line_place(cpu, t.page.0);
    for line in 0..64 {
        k.caches.load(core, socket, t.page.0 + line * 64, remote);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{defense, machine};

    fn median(kib: u64, overlap: f64) -> (f64, Stats) {
        let mut m = machine::load("recording-host-epyc-zen4-kvm").unwrap();
        m.memory.llc_miss_overlap = overlap;
        m.memory.dram_miss_overlap = overlap;
        let mut k = Kernel::boot(m, defense::parse_list("none").unwrap());
        let f = run(&mut k, Op::Fault, kib, 5).unwrap();
        (f.median_ns(), f.stats)
    }

    #[test]
    fn evicting_the_caches_makes_a_fault_wait_for_its_lines_and_overlap_divides_the_wait() {
        let (hot, hot_stats) = median(0, 1.0);
        let (l2_cold, stats) = median(4096, 1.0);
        use crate::sim::{Counter, TimeCategory};
        // The same path runs; only where its lines come from differs.
        for c in [Counter::KernelTextLines, Counter::KernelDataLines] {
            assert_eq!(stats.counter(c), hot_stats.counter(c), "{c:?}");
        }
        assert!(
            stats.time(TimeCategory::KernelCacheMiss)
                > hot_stats.time(TimeCategory::KernelCacheMiss)
        );
        assert!(
            l2_cold > hot + 500.0,
            "4 MiB evicted: {l2_cold} ns, hot {hot} ns"
        );
        // 64 MiB pushes the LLC out too: lines come from DRAM.
        let (dram_cold, stats) = median(65536, 1.0);
        assert!(stats.counter(Counter::KernelLinesFromMemory) > 100);
        assert!(dram_cold > 2.0 * l2_cold);
        // The syscalls run too, and cold is slower for them as well.
        for op in [Op::Getppid, Op::OpenClose] {
            let time = |kib| {
                let m = machine::load("recording-host-epyc-zen4-kvm").unwrap();
                let mut k = Kernel::boot(m, defense::parse_list("none").unwrap());
                run(&mut k, op, kib, 3).unwrap().median_ns()
            };
            assert!(time(4096) > time(0), "{op:?}");
        }
        assert!(Op::parse("fork").is_err());
        // The misses beyond L2 stall their latency over the overlap: a fault takes a + b / x
        // at overlap x; the hot fault has none of them.
        assert_eq!(median(0, 2.0).0, hot);
        let (t2, t4) = (median(4096, 2.0).0, median(4096, 4.0).0);
        let (half, quarter) = (l2_cold - t2, t2 - t4);
        assert!(
            (half - 2.0 * quarter).abs() < 0.01 * half,
            "overlap 1, 2, 4: {l2_cold}, {t2}, {t4} ns"
        );
    }
}
