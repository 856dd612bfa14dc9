//! `[paging_structure_cache]` and `[memory]`: cache geometry from sysfs, latencies measured by
//! pointer chasing, the rest from the library.

use super::Ctx;
use crate::machine::detect::caches::CacheInfo;
use crate::machine::detect::toml_text::{cycles, Val, Writer};

/// `[paging_structure_cache]`: always from the library (no architectural way to read it).
pub(super) fn paging_structure_cache(w: &mut Writer, cx: &Ctx) {
    w.table(&["paging_structure_cache"]);
    let psc = &cx.fb.paging_structure_cache;
    for (key, entries, what) in [
        (
            "pml4e_entries",
            psc.pml4e_entries,
            "PML4E cache size (no architectural way to read it)",
        ),
        ("pdpte_entries", psc.pdpte_entries, "PDPTE cache size"),
        ("pde_entries", psc.pde_entries, "PDE cache size"),
    ] {
        cx.library(w, key, Val::Int(entries as u64), what);
    }
}

/// `[memory]`: size, ways and hit latency of each cache, then DRAM.
pub(super) fn caches_and_dram(w: &mut Writer, cx: &Ctx) {
    let (f, m, fm) = (cx.f, cx.m, &cx.fb.memory);
    w.table(&["memory"]);
    Cache::private("l1d", "L1 data cache").geometry(w, cx, &f.l1d, fm.l1d_kib, fm.l1d_ways);
    hit_latency(
        w,
        cx,
        "l1d_hit_cycles",
        m.l1_ns,
        fm.l1d_hit_cycles,
        "half the L1D",
    );
    Cache::private("l1i", "L1 instruction cache").geometry(w, cx, &f.l1i, fm.l1i_kib, fm.l1i_ways);
    Cache::private("l2", "L2 cache").geometry(w, cx, &f.l2, fm.l2_kib, fm.l2_ways);
    hit_latency(
        w,
        cx,
        "l2_hit_cycles",
        m.l2_ns,
        fm.l2_hit_cycles,
        "a buffer between the L1D and L2 sizes",
    );
    llc(w, cx);
    let local = dram(w, cx);
    lines_in_flight(w, cx, local);
    for (key, value) in [
        ("llc_miss_overlap", cx.fb.memory.llc_miss_overlap),
        ("dram_miss_overlap", cx.fb.memory.dram_miss_overlap),
    ] {
        cx.library(
            w,
            key,
            Val::Float(value),
            "misses a kernel path overlaps (not timed here: `kharden kernel evict-fault --fit --machine THIS_PROFILE` times this host's faults after evictions and fits both)",
        );
    }
}

/// One cache's `<prefix>_kib` (or `_kib_per_socket`) and `<prefix>_ways`.
struct Cache {
    prefix: &'static str,
    label: &'static str,
    /// Size summed over the instances in package 0 (the LLC), not one instance.
    per_socket: bool,
}

impl Cache {
    /// A cache whose size is given per instance.
    fn private(prefix: &'static str, label: &'static str) -> Cache {
        Cache {
            prefix,
            label,
            per_socket: false,
        }
    }
    fn geometry(
        &self,
        w: &mut Writer,
        cx: &Ctx,
        found: &Option<CacheInfo>,
        fb_kib: u32,
        fb_ways: u32,
    ) {
        let (pre, label) = (self.prefix, self.label);
        let size_key = if self.per_socket {
            format!("{pre}_kib_per_socket")
        } else {
            format!("{pre}_kib")
        };
        let ways_key = format!("{pre}_ways");
        let Some(c) = found else {
            w.kv(
                &size_key,
                Val::Int(fb_kib as u64),
                &cx.from(&format!("{label} size (sysfs has none)")),
            );
            w.kv(
                &ways_key,
                Val::Int(fb_ways as u64),
                &cx.from(&format!("{label} associativity")),
            );
            return;
        };
        let kib = if self.per_socket {
            c.kib * c.instances_in_package.max(1)
        } else {
            c.kib
        };
        let lines = kib as u64 * 1024 / 64;
        let mut ways = if c.ways == 0 { lines as u32 } else { c.ways };
        let mut note = String::new();
        if lines % ways as u64 != 0 {
            let g = gcd(lines, ways as u64) as u32;
            note = format!(
                "; sysfs reports {ways} ways, modelled as {g} (must divide the line count)"
            );
            ways = g.max(1);
        }
        let size_how = if self.per_socket && c.instances_in_package > 1 {
            format!(
                "sysfs cache/index* of cpu0: {label} of {} KiB x {} instances in package 0",
                c.kib, c.instances_in_package
            )
        } else {
            format!("sysfs cache/index* of cpu0: {label} size")
        };
        w.kv(&size_key, Val::Int(kib as u64), &size_how);
        w.kv(
            &ways_key,
            Val::Int(ways as u64),
            &format!("sysfs ways_of_associativity{note}"),
        );
    }
}

/// A cache hit latency: measured by pointer chasing within `what`, else the library's.
fn hit_latency(w: &mut Writer, cx: &Ctx, key: &str, ns: Option<f64>, fb_cycles: u32, what: &str) {
    let ghz = cx.ghz;
    match ns {
        Some(ns) => w.kv(
            key,
            Val::Int(cycles(ns, ghz)),
            &format!("measured: random pointer chase within {what}, {ns:.2} ns at {ghz:.2} GHz"),
        ),
        None => w.kv(
            key,
            Val::Int(fb_cycles as u64),
            &cx.from(&format!("{what} latency (not measured)")),
        ),
    }
}

/// The last-level cache's geometry and latency; a reading too close to DRAM's is not used.
fn llc(w: &mut Writer, cx: &Ctx) {
    let (f, m, fm) = (cx.f, cx.m, &cx.fb.memory);
    let llc_is_l2 = f.llc.is_some()
        && f.llc.as_ref().map(|c| c.kib) == f.l2.as_ref().map(|c| c.kib)
        && f.llc.as_ref().map(|c| c.instances_in_package)
            == f.l2.as_ref().map(|c| c.instances_in_package);
    let llc = Cache {
        prefix: "llc",
        label: if llc_is_l2 {
            "last-level (L2) cache"
        } else {
            "last-level cache"
        },
        per_socket: true,
    };
    llc.geometry(w, cx, &f.llc, fm.llc_kib_per_socket, fm.llc_ways);
    let llc_ns = if llc_is_l2 { m.l2_ns } else { m.llc_ns };
    match (llc_ns, m.dram_local_ns) {
        (Some(l), Some(d)) if l > 0.6 * d => w.kv(
            "llc_hit_cycles",
            Val::Int(fm.llc_hit_cycles as u64),
            &format!("measured {l:.1} ns, too close to the {d:.1} ns DRAM reading to be LLC hits (LLC shared with other cores or tenants?), so not used; LLC latency {}", cx.from("").trim_start()),
        ),
        _ => hit_latency(w, cx, "llc_hit_cycles", llc_ns, fm.llc_hit_cycles, "a quarter of one LLC instance"),
    }
}

/// Local DRAM latency (measured or the library's) and remote (measured, or local times the
/// library's NUMA factor); returns the local latency written.
fn dram(w: &mut Writer, cx: &Ctx) -> f64 {
    let (f, m, fm) = (cx.f, cx.m, &cx.fb.memory);
    let from = |what: &str| cx.from(what);
    let local = match m.dram_local_ns {
        Some(ns) => {
            w.kv("dram_local_ns", Val::Float(ns), "measured: cold random pointer chase, one line in each of 16384 pages (huge pages where granted), after writing twice the LLC elsewhere");
            ns
        }
        None => {
            cx.library(
                w,
                "dram_local_ns",
                Val::Float(fm.dram_local_ns),
                "DRAM latency (not measured)",
            );
            fm.dram_local_ns
        }
    };
    let numa = f.sockets.value * f.nodes_per_socket.value > 1;
    match (numa, m.dram_remote_ns) {
        (true, Some(ns)) if ns >= local => w.kv(
            "dram_remote_ns",
            Val::Float(ns),
            "measured: same chase with the buffer bound (mbind) to another node",
        ),
        (true, _) => {
            let ratio = fm.dram_remote_ns / fm.dram_local_ns;
            w.kv(
                "dram_remote_ns",
                Val::Float(local * ratio),
                &format!(
                    "remote/local ratio {ratio:.2} {}",
                    from("NUMA factor (remote node not measured)")
                ),
            );
        }
        (false, _) => w.kv(
            "dram_remote_ns",
            Val::Float(local),
            "one NUMA node: equal to local",
        ),
    }
    local
}

/// Lines a store stream keeps in flight: 64 lines x the local DRAM latency over the time a
/// cold page clear takes beyond a hot one (Little's law), when that difference is clear.
fn lines_in_flight(w: &mut Writer, cx: &Ctx, dram_ns: f64) {
    let waited = cx.m.page_clear_ns.and_then(|(cold, hot)| {
        crate::machine::detect::measure::measure_diff(cold, hot).map(|d| (cold, hot, d))
    });
    match waited {
        Some((cold, hot, d)) => {
            let n = (64.0 * dram_ns / d).round().clamp(1.0, 256.0) as u64;
            w.kv(
                "lines_in_flight",
                Val::Int(n),
                &format!("measured: 4 KiB page clears (rep stosb) {cold:.1} ns with the lines in no cache, {hot:.1} ns in L1: 64 lines x {dram_ns:.1} ns / {d:.1} ns"),
            );
        }
        None => cx.library(
            w,
            "lines_in_flight",
            Val::Int(cx.fb.memory.lines_in_flight as u64),
            "store lines in flight (page clears not measured)",
        ),
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
