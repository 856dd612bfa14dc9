//! `[[tlb]]`: the arrays CPUID describes (or the library's), fitted to the model's geometry.

use super::Ctx;
use crate::machine::detect::profile::TlbArray;
use crate::machine::detect::tlb_leaves::{fit_tlb_geometry, unique_name};
use crate::machine::detect::toml_text::{cycles, Val, Writer};
use std::collections::BTreeSet;

/// One `[[tlb]]` table per array, names made unique.
pub(super) fn arrays(w: &mut Writer, cx: &Ctx) {
    let (f, fb, m, ghz) = (cx.f, cx.fb, cx.m, cx.ghz);
    let from = |what: &str| cx.from(what);
    // TLBs
    let detected_tlbs = !f.tlbs.is_empty();
    let fb_stlb_hit = fb
        .tlb
        .iter()
        .filter(|a| a.level == 2)
        .map(|a| a.hit_cycles)
        .max()
        .unwrap_or(8);
    let stlb_hit = m.stlb_hit_ns.map(|ns| cycles(ns, ghz));
    let tlbs: Vec<(TlbArray, String)> = if detected_tlbs {
        f.tlbs.clone()
    } else {
        fb.tlb
            .iter()
            .map(|a| (a.clone(), from("TLB geometry")))
            .collect()
    };
    let mut names = BTreeSet::new();
    for (mut a, how) in tlbs {
        let note = fit_tlb_geometry(&mut a);
        let n = unique_name(&mut names, &a.name);
        w.array_of_tables(&["tlb"]);
        let how = match note {
            Some(note) => format!("{how}; {note}"),
            None => how,
        };
        w.kv("name", Val::Str(n), &how);
        w.kv("level", Val::Int(a.level as u64), &how);
        w.kv("serves", Val::Str(a.serves.toml_name().into()), &how);
        let sizes = a
            .page_sizes
            .iter()
            .map(|p| p.toml_name().to_string())
            .collect();
        w.kv("page_sizes", Val::List(sizes), &how);
        w.kv("entries", Val::Int(a.entries as u64), &how);
        w.kv("ways", Val::Int(a.ways as u64), &how);
        if a.level == 1 {
            w.kv(
                "hit_cycles",
                Val::Int(0),
                "first level: looked up in parallel with the L1 cache",
            );
        } else if let Some(c) = stlb_hit {
            w.kv("hit_cycles", Val::Int(c), &format!("measured: chase over more 4 KiB pages than the L1 DTLB holds minus over 8 pages, {:.1} ns at {ghz:.2} GHz", m.stlb_hit_ns.unwrap_or(0.0)));
        } else if detected_tlbs {
            cx.library(
                w,
                "hit_cycles",
                Val::Int(fb_stlb_hit as u64),
                "second-level TLB hit latency",
            );
        } else {
            cx.library(
                w,
                "hit_cycles",
                Val::Int(a.hit_cycles as u64),
                "second-level TLB hit latency",
            );
        }
        let per_thread = if detected_tlbs { false } else { a.per_thread };
        w.kv(
            "per_thread",
            Val::Bool(per_thread),
            if detected_tlbs {
                "CPUID does not report a per-thread split of this array; shared assumed"
            } else {
                "taken with the geometry above"
            },
        );
    }
}
