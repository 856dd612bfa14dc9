//! `[costs]`, `[costs.ipi_latency_ns]` and `[costs.line_transfer_ns]`: the syscall and line
//! transfers measured, privileged costs from the library.

use super::{Ctx, Usable};
use crate::machine::detect::measure::LINE_DISTANCES;
use crate::machine::detect::toml_text::{cycles, Val, Writer};

/// `[costs]`.
pub(super) fn costs(w: &mut Writer, cx: &Ctx, usable: &Usable) {
    let (f, fb, m, why, ghz) = (cx.f, cx.fb, cx.m, cx.why, cx.ghz);
    let from = |what: &str| cx.from(what);
    w.table(&["costs"]);
    let c = &fb.costs;
    // The model charges this for a syscall's entry and exit and a recorded path's work on
    // top, which the footprints measure less the empty syscall's round trip: the empty
    // syscall is the same quantity here (a getppid would count its body twice).
    match m.empty_syscall_ns.or(m.syscall_ns) {
        Some(ns) => w.kv(
            "syscall_roundtrip_cycles",
            Val::Int(cycles(ns, ghz)),
            &format!("measured: {} via syscall(2), {ns:.1} ns at {ghz:.2} GHz (10th percentile of 41 batches of 400, as the footprints time their paths): the entry and exit code and active mitigations{}", if m.empty_syscall_ns.is_some() { "an empty syscall (number 1000: no handler, -ENOSYS)" } else { "getppid (an upper bound: its body included)" }, if f.pti_active == Some(true) { ", PTI included" } else { "" }),
        ),
        None => w.kv("syscall_roundtrip_cycles", Val::Int(c.syscall_roundtrip_cycles as u64), &from("syscall round trip (not measured)")),
    }
    let is_x86 = cx.is_x86();
    let cr3 = if is_x86 {
        "MOV to CR3"
    } else {
        "TTBR0_EL1 write + ISB"
    };
    cx.library(
        w,
        "cr3_write_noflush_cycles",
        Val::Int(c.cr3_write_noflush_cycles as u64),
        &format!("{cr3} (no flush) cost (privileged)"),
    );
    cx.library(
        w,
        "cr3_write_flush_cycles",
        Val::Int(c.cr3_write_flush_cycles as u64),
        &format!("{cr3} (flushing) cost (privileged)"),
    );
    w.kv(
        "invlpg_cycles",
        Val::Int(c.invlpg_cycles as u64),
        &from(if is_x86 {
            "INVLPG cost (privileged)"
        } else {
            "TLBI VAE1 cost (privileged)"
        }),
    );
    if usable.invpcid {
        let fill = |w: &mut Writer, key: &str, v: Option<u32>, default: u32, default_how: &str| {
            match v {
            Some(v) => w.kv(key, Val::Int(v as u64), &from("INVPCID cost (privileged)")),
            None => w.kv(key, Val::Int(default as u64), &format!("INVPCID cost not detectable from user space, and {why} has no INVPCID; conservative default: {default_how}")),
        }
        };
        fill(
            w,
            "invpcid_individual_cycles",
            c.invpcid_individual_cycles,
            c.invlpg_cycles,
            "its INVLPG cost",
        );
        let full = c.cr3_write_flush_cycles.max(c.invlpg_cycles);
        fill(
            w,
            "invpcid_single_context_cycles",
            c.invpcid_single_context_cycles,
            full,
            "the larger of its flushing CR3 write and INVLPG costs",
        );
        fill(
            w,
            "invpcid_all_incl_global_cycles",
            c.invpcid_all_incl_global_cycles,
            full,
            "the larger of its flushing CR3 write and INVLPG costs",
        );
        fill(
            w,
            "invpcid_all_non_global_cycles",
            c.invpcid_all_non_global_cycles,
            full,
            "the larger of its flushing CR3 write and INVLPG costs",
        );
    }
    if usable.invlpgb {
        match c.invlpgb_ns {
            Some(v) => w.kv(
                "invlpgb_ns",
                Val::Float(v),
                &from("INVLPGB+TLBSYNC cost (privileged)"),
            ),
            None => {
                let lib = crate::machine::names()
                    .into_iter()
                    .filter_map(|n| crate::machine::load(n).ok())
                    .find(|p| p.costs.invlpgb_ns.is_some());
                match lib {
                    Some(p) => w.kv("invlpgb_ns", Val::Float(p.costs.invlpgb_ns.unwrap_or(1000.0)), &format!("INVLPGB cost not detectable from user space; taken from machines/{}.toml (the library's INVLPGB machine)", p.name)),
                    None => w.kv("invlpgb_ns", Val::Float(c.ipi_latency_ns.same_socket_ns), &format!("INVLPGB cost not detectable; conservative default: the same-socket IPI latency of {why}")),
                }
            }
        }
    }
    if !is_x86 {
        let v = c
            .tlbi_broadcast_ns
            .unwrap_or(c.ipi_latency_ns.same_socket_ns);
        cx.library(
            w,
            "tlbi_broadcast_ns",
            Val::Float(v),
            "TLBI ...IS + DSB ISH cost (privileged)",
        );
    }
    cx.library(
        w,
        "interrupt_entry_cycles",
        Val::Int(c.interrupt_entry_cycles as u64),
        "interrupt entry + return cost",
    );
    cx.library(
        w,
        "ipi_send_cycles",
        Val::Int(c.ipi_send_cycles as u64),
        "IPI send cost (APIC/GIC register write is privileged)",
    );
    match (m.atomic_ns, c.locked_rmw_cycles) {
        (Some(ns), _) => w.kv(
            "locked_rmw_cycles",
            Val::Float((ns * ghz * 1000.0).round() / 1000.0),
            &format!("measured: a dependent atomic increment, {ns:.3} ns at {ghz:.2} GHz"),
        ),
        (None, Some(v)) => w.kv(
            "locked_rmw_cycles",
            Val::Float(v),
            &from("locked read-modify-write (not measured)"),
        ),
        (None, None) => {}
    }
    // Absent (a write per CPU) where the kernel log does not name the driver.
    if let Some(n) = &f.ipi_cpus_per_write {
        w.kv("ipi_cpus_per_write", Val::Int(n.value as u64), &n.how);
    }
}

/// `[costs.ipi_latency_ns]`: from the library (IPIs cannot be sent from user space).
pub(super) fn ipi_latency(w: &mut Writer, cx: &Ctx) {
    let (f, m) = (cx.f, cx.m);
    let from = |what: &str| cx.from(what);
    w.table(&["costs", "ipi_latency_ns"]);
    let shoot = m
        .shootdown_ns
        .map(|v| format!("; compare [measured].tlb_shootdown_ns = {v:.0} ns"))
        .unwrap_or_default();
    let l = &cx.fb.costs.ipi_latency_ns;
    w.kv(
        "same_core_ns",
        Val::Float(l.same_core_ns),
        &format!("{}{shoot}", from("IPI delivery latency")),
    );
    cx.library(
        w,
        "same_socket_ns",
        Val::Float(l.same_socket_ns),
        "IPI delivery latency",
    );
    if f.sockets.value > 1 {
        cx.library(
            w,
            "remote_socket_ns",
            Val::Float(l.remote_socket_ns),
            "IPI delivery latency",
        );
    } else {
        w.kv(
            "remote_socket_ns",
            Val::Float(l.same_socket_ns),
            "one socket: unused, set to the same-socket value",
        );
    }
}

/// `[costs.line_transfer_ns]`: only distances this host has; a missing one falls back to the
/// cache-hit proxies.
pub(super) fn line_transfers(w: &mut Writer, cx: &Ctx) {
    let (f, fb, m) = (cx.f, cx.fb, cx.m);
    let from = |what: &str| cx.from(what);
    let c = &fb.costs;
    let library = [
        c.line_transfer_ns.same_core_ns,
        c.line_transfer_ns.same_socket_ns,
        c.line_transfer_ns.remote_socket_ns,
    ];
    let has = [
        f.threads_per_core.value > 1,
        f.cores_per_socket.value > 1,
        f.sockets.value > 1,
    ];
    let lines: Vec<(&str, f64, String)> = LINE_DISTANCES
        .iter()
        .zip(m.line_transfer.iter().zip(library.iter().zip(has)))
        .filter_map(|(&key, (measured, (&lib, has)))| match (measured, lib) {
            (Some((ns, a, b)), _) => Some((key, *ns, format!("measured: one cache line bounced between CPU {a} and CPU {b} (two pinned threads taking turns on a counter; half the round trip, median of 5 batches)"))),
            (None, Some(ns)) if has => Some((key, ns, from("core-to-core latency (not measured)"))),
            _ => None,
        })
        .collect();
    if !lines.is_empty() {
        w.table(&["costs", "line_transfer_ns"]);
        for (key, ns, how) in lines {
            w.kv(key, Val::Float(ns), &how);
        }
    }
}
