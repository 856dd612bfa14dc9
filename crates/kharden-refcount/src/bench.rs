//! `kharden refcount bench`: LKDTM's ATOMIC_TIMING and REFCOUNT_TIMING loops, run natively
//! for every implementation this host can run, timed, in a perf-stat-like layout.

use crate::native::{self, Counter, Native};
use crate::Impl;
use kharden::report::table::Table;
use serde::Serialize;
use std::sync::{Arc, Barrier};
use std::time::Instant;

/// LKDTM uses INT_MAX; the default here keeps a run under a second or two per host.
pub const DEFAULT_ITERATIONS: u32 = 1 << 24;

#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    /// LKDTM test name: ATOMIC_TIMING for atomic_t, REFCOUNT_TIMING otherwise.
    pub test: &'static str,
    pub implementation: &'static str,
    pub variant: &'static str,
    pub threads: u32,
    /// The loop bound (LKDTM: INT_MAX).
    pub iterations: u32,
    /// refcount operations executed, all threads together.
    pub ops: u64,
    pub seconds: f64,
    /// Wall-clock nanoseconds per operation: elapsed time over all threads' operations
    /// together (with T threads, each thread's own operations take about T times longer).
    pub ns_per_op: f64,
    /// ns_per_op relative to atomic_t of the same variant and thread count.
    pub ratio_to_atomic: f64,
    /// Hardware cycles and instructions of the calling thread when perf events are
    /// available (single-threaded runs only).
    pub cycles: Option<u64>,
    pub instructions: Option<u64>,
    /// The loop ended in sync (single thread: dec_and_test hit zero at the last step;
    /// contended: the counter came back to 1 and no decrement reported zero).
    pub in_sync: bool,
    /// Runs made; the figures are the fastest one's.
    pub repeats: u32,
}

fn lkdtm_test(imp: Impl) -> &'static str {
    if imp == Impl::Atomic {
        "ATOMIC_TIMING"
    } else {
        "REFCOUNT_TIMING"
    }
}

fn run_one(n: &Native, iterations: u32, threads: u32) -> BenchResult {
    let (seconds, ops, in_sync, cycles, instructions) = if threads <= 1 {
        let counters = crate::perf::Counters::open();
        if let Some(c) = &counters {
            c.start();
        }
        let t0 = Instant::now();
        let i = n.lkdtm_timing(iterations);
        let dt = t0.elapsed().as_secs_f64();
        let (cy, ins) = counters.map(|c| c.stop()).unwrap_or((None, None));
        let ops = 2 * iterations.max(1) as u64 - 1;
        (dt, ops, i == 1, cy, ins)
    } else {
        let counter = Arc::new(Counter::new(1));
        let barrier = Arc::new(Barrier::new(threads as usize + 1));
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (c, b, imp) = (counter.clone(), barrier.clone(), *n);
                std::thread::spawn(move || {
                    b.wait();
                    let z = imp.contended(&c, iterations);
                    b.wait();
                    z
                })
            })
            .collect();
        barrier.wait();
        let t0 = Instant::now();
        barrier.wait();
        let dt = t0.elapsed().as_secs_f64();
        let zeros: u64 = handles.into_iter().map(|h| h.join().unwrap_or(1)).sum();
        let ops = 2 * iterations as u64 * threads as u64;
        (dt, ops, zeros == 0 && counter.value() == 1, None, None)
    };
    BenchResult {
        test: lkdtm_test(n.imp),
        implementation: n.imp.name(),
        variant: n.variant.name(),
        threads: threads.max(1),
        iterations,
        ops,
        seconds,
        ns_per_op: seconds * 1e9 / ops.max(1) as f64,
        ratio_to_atomic: f64::NAN,
        cycles,
        instructions,
        in_sync,
        repeats: 1,
    }
}

/// Repetitions per implementation; the fastest is kept (the run least disturbed by other
/// work on the machine). Repetitions are interleaved across implementations so that slow
/// drifts (frequency, neighbours) hit all of them alike.
pub const DEFAULT_REPEATS: u32 = 3;

/// Runs every available implementation; ratios are to atomic_t of the same variant.
pub fn run(iterations: u32, threads: u32) -> Vec<BenchResult> {
    run_repeated(iterations, threads, DEFAULT_REPEATS)
}

pub fn run_repeated(iterations: u32, threads: u32, repeats: u32) -> Vec<BenchResult> {
    let impls = native::available();
    let mut out: Vec<BenchResult> = impls
        .iter()
        .map(|n| run_one(n, iterations, threads))
        .collect();
    for _ in 1..repeats.max(1) {
        for (k, n) in impls.iter().enumerate() {
            let r = run_one(n, iterations, threads);
            if r.seconds < out[k].seconds {
                out[k] = BenchResult {
                    in_sync: r.in_sync && out[k].in_sync,
                    ..r
                };
            } else {
                out[k].in_sync &= r.in_sync;
            }
        }
    }
    for r in &mut out {
        r.repeats = repeats.max(1);
    }
    let base: Vec<(&'static str, f64)> = out
        .iter()
        .filter(|r| r.implementation == "atomic_t")
        .map(|r| (r.variant, r.ns_per_op))
        .collect();
    for r in &mut out {
        if let Some((_, b)) = base.iter().find(|(v, _)| *v == r.variant) {
            r.ratio_to_atomic = r.ns_per_op / b;
        }
    }
    out
}

fn thousands(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// perf-stat-like text: one block per run, then a comparison table.
pub fn render(results: &[BenchResult]) -> String {
    let mut s = String::new();
    let Some(first) = results.first() else {
        return "no refcount implementation runs on this host\n".into();
    };
    let who = if first.threads > 1 {
        format!("{} threads on one counter", first.threads)
    } else {
        "1 thread".into()
    };
    s += &format!("host: {}\n", host_cpu());
    s += &format!(
        "LKDTM timing loops, native (loop bound n = {}, LKDTM uses INT_MAX = 2,147,483,647; {who}; fastest of {} runs)\n\n",
        thousands(first.iterations as u64),
        first.repeats
    );
    for r in results {
        s += &format!(
            " Performance counter stats for '{}' ({} {}):\n\n",
            r.test, r.implementation, r.variant
        );
        s += &format!("  {:>18}      refcount ops\n", thousands(r.ops));
        s += &format!("  {:>18.3} msec task-clock\n", r.seconds * 1e3);
        match r.cycles {
            Some(c) => {
                s += &format!(
                    "  {:>18}      cycles              # {:.3} per op\n",
                    thousands(c),
                    c as f64 / r.ops as f64
                )
            }
            None => s += &format!("  {:>18}      cycles\n", "<not supported>"),
        }
        match (r.instructions, r.cycles) {
            (Some(i), Some(c)) => {
                s += &format!(
                    "  {:>18}      instructions        # {:.2} insn per cycle, {:.2} per op\n",
                    thousands(i),
                    i as f64 / c.max(1) as f64,
                    i as f64 / r.ops as f64
                )
            }
            (Some(i), None) => s += &format!("  {:>18}      instructions\n", thousands(i)),
            _ => s += &format!("  {:>18}      instructions\n", "<not supported>"),
        }
        s += &format!(
            "  {:>18.3}      ns per op           # {:.2}x atomic_t\n",
            r.ns_per_op, r.ratio_to_atomic
        );
        if !r.in_sync {
            s += "  (loop OUT OF SYNC: the counter did not come back as expected)\n";
        }
        s += &format!("\n  {:>18.9} seconds time elapsed\n\n", r.seconds);
    }
    let mut t = Table::new(
        "Summary",
        &[
            "test",
            "implementation",
            "variant",
            "threads",
            "seconds",
            "ns/op",
            "vs atomic_t",
        ],
    );
    for r in results {
        t.push(vec![
            r.test.into(),
            r.implementation.into(),
            r.variant.into(),
            r.threads.to_string(),
            format!("{:.4}", r.seconds),
            format!("{:.3}", r.ns_per_op),
            format!("{:.2}x", r.ratio_to_atomic),
        ]);
    }
    s += &t.to_string();
    s
}

/// The host CPU's model name (/proc/cpuinfo), for the report header.
pub fn host_cpu() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    info.lines()
        .find(|l| l.starts_with("model name") || l.starts_with("CPU part"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| "unknown CPU".into())
}
