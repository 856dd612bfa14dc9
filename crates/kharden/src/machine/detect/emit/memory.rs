//! `[paging_structure_cache]` and `[memory]`: cache geometry from sysfs, latencies measured by
//! pointer chasing, the rest from the library.

use super::Ctx;
use crate::machine::detect::caches::CacheInfo;
use crate::machine::detect::toml_text::{cycles, Val, Writer};

/// `[paging_structure_cache]`: always from the library (no architectural way to read it).
pub(super) fn paging_structure_cache(w: &mut Writer, cx: &Ctx) {
    let fb = cx.fb;
    let from = |what: &str| cx.from(what);
    w.table(&["paging_structure_cache"]);
    let psc = &fb.paging_structure_cache;
    w.kv(
        "pml4e_entries",
        Val::Int(psc.pml4e_entries as u64),
        &from("PML4E cache size (no architectural way to read it)"),
    );
    w.kv(
        "pdpte_entries",
        Val::Int(psc.pdpte_entries as u64),
        &from("PDPTE cache size"),
    );
    w.kv(
        "pde_entries",
        Val::Int(psc.pde_entries as u64),
        &from("PDE cache size"),
    );
}

/// `[memory]`: size, ways and hit latency of each cache, then DRAM.
pub(super) fn caches_and_dram(w: &mut Writer, cx: &Ctx) {
    let (f, fb, m, ghz) = (cx.f, cx.fb, cx.m, cx.ghz);
    let from = |what: &str| cx.from(what);
    w.table(&["memory"]);
    let fm = &fb.memory;
    let cache = |w: &mut Writer,
                 pre: &str,
                 c: &Option<CacheInfo>,
                 fb_kib: u32,
                 fb_ways: u32,
                 per_socket: bool,
                 label: &str| {
        match c {
            Some(c) => {
                let kib = if per_socket {
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
                let size_how = if per_socket && c.instances_in_package > 1 {
                    format!(
                        "sysfs cache/index* of cpu0: {label} of {} KiB x {} instances in package 0",
                        c.kib, c.instances_in_package
                    )
                } else {
                    format!("sysfs cache/index* of cpu0: {label} size")
                };
                let size_key = if per_socket {
                    format!("{pre}_kib_per_socket")
                } else {
                    format!("{pre}_kib")
                };
                w.kv(&size_key, Val::Int(kib as u64), &size_how);
                w.kv(
                    &format!("{pre}_ways"),
                    Val::Int(ways as u64),
                    &format!("sysfs ways_of_associativity{note}"),
                );
            }
            None => {
                let size_key = if per_socket {
                    format!("{pre}_kib_per_socket")
                } else {
                    format!("{pre}_kib")
                };
                w.kv(
                    &size_key,
                    Val::Int(fb_kib as u64),
                    &from(&format!("{label} size (sysfs has none)")),
                );
                w.kv(
                    &format!("{pre}_ways"),
                    Val::Int(fb_ways as u64),
                    &from(&format!("{label} associativity")),
                );
            }
        }
    };
    let lat = |w: &mut Writer, key: &str, ns: Option<f64>, fb_cycles: u32, what: &str| match ns {
        Some(ns) => w.kv(
            key,
            Val::Int(cycles(ns, ghz)),
            &format!("measured: random pointer chase within {what}, {ns:.2} ns at {ghz:.2} GHz"),
        ),
        None => w.kv(
            key,
            Val::Int(fb_cycles as u64),
            &from(&format!("{what} latency (not measured)")),
        ),
    };
    cache(
        w,
        "l1d",
        &f.l1d,
        fm.l1d_kib,
        fm.l1d_ways,
        false,
        "L1 data cache",
    );
    lat(
        w,
        "l1d_hit_cycles",
        m.l1_ns,
        fm.l1d_hit_cycles,
        "half the L1D",
    );
    cache(w, "l2", &f.l2, fm.l2_kib, fm.l2_ways, false, "L2 cache");
    lat(
        w,
        "l2_hit_cycles",
        m.l2_ns,
        fm.l2_hit_cycles,
        "a buffer between the L1D and L2 sizes",
    );
    let llc_is_l2 = f.llc.is_some()
        && f.llc.as_ref().map(|c| c.kib) == f.l2.as_ref().map(|c| c.kib)
        && f.llc.as_ref().map(|c| c.instances_in_package)
            == f.l2.as_ref().map(|c| c.instances_in_package);
    cache(
        w,
        "llc",
        &f.llc,
        fm.llc_kib_per_socket,
        fm.llc_ways,
        true,
        if llc_is_l2 {
            "last-level (L2) cache"
        } else {
            "last-level cache"
        },
    );
    let llc_ns = if llc_is_l2 { m.l2_ns } else { m.llc_ns };
    match (llc_ns, m.dram_local_ns) {
        (Some(l), Some(d)) if l > 0.6 * d => w.kv(
            "llc_hit_cycles",
            Val::Int(fm.llc_hit_cycles as u64),
            &format!("measured {l:.1} ns, too close to the {d:.1} ns DRAM reading to be LLC hits (LLC shared with other cores or tenants?), so not used; LLC latency {}", from("").trim_start()),
        ),
        _ => lat(w, "llc_hit_cycles", llc_ns, fm.llc_hit_cycles, "a quarter of one LLC instance"),
    }
    let local = match m.dram_local_ns {
        Some(ns) => {
            w.kv("dram_local_ns", Val::Float(ns), "measured: cold random pointer chase, one line in each of 16384 pages (huge pages where granted), after writing twice the LLC elsewhere");
            ns
        }
        None => {
            w.kv(
                "dram_local_ns",
                Val::Float(fm.dram_local_ns),
                &from("DRAM latency (not measured)"),
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
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
