//! `[measured]`: the raw user-space readings, for comparison with the modelled costs.

use super::Ctx;
use crate::machine::detect::toml_text::{Val, Writer};

/// `[measured]`, when anything was measured or skipped.
pub(super) fn measured(w: &mut Writer, cx: &Ctx) {
    let m = cx.m;
    let any = m.syscall_ns.is_some()
        || m.minor_fault_ns.is_some()
        || m.shootdown_ns.is_some()
        || m.atomic_ns.is_some()
        || m.stlb_hit_ns.is_some();
    if any || !m.skipped.is_empty() || m.shootdown_note.is_some() {
        w.table(&["measured"]);
        if !m.skipped.is_empty() {
            w.comment(&format!(
                "skipped for the time budget: {}",
                m.skipped.join(", ")
            ));
        }
        if let Some(v) = m.syscall_ns {
            w.kv(
                "syscall_getppid_ns",
                Val::Float(v),
                "10th percentile of 41 batches of 400 syscall(SYS_getppid)",
            );
        }
        if let Some(v) = m.minor_fault_ns {
            w.kv("minor_fault_ns", Val::Float(v), "median of 3 runs: first write to each of 128 fresh anonymous 4 KiB pages (THP off)");
        }
        match (m.shootdown_ns, &m.shootdown_note) {
            (Some(v), note) => w.kv(
                "tlb_shootdown_ns",
                Val::Float(v),
                &format!(
                    "mprotect of one page, median of 3x200 changes: {} minus the single-CPU cost",
                    note.as_deref().unwrap_or("")
                ),
            ),
            (None, Some(note)) => w.comment(&format!("tlb_shootdown_ns not measured: {note}")),
            (None, None) => {}
        }
        if let Some(v) = m.atomic_ns {
            w.kv(
                "atomic_increment_ns",
                Val::Float(v),
                "median of 7 batches of 5000 dependent SeqCst fetch_add on one word",
            );
        }
        if let Some(v) = m.stlb_hit_ns {
            w.kv(
                "stlb_hit_ns",
                Val::Float(v),
                "median of 3: pointer chase over one line per 4 KiB page, many pages minus 8 pages",
            );
        }
    }
}
