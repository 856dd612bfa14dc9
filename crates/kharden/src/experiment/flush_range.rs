//! What flush_tlb_mm_range() costs against the number of pages flushed (issue 19's
//! predictions): below the full-flush ceiling (kernel.tlb_single_page_flush_ceiling, 33 in
//! Linux) one INVLPG per page, above it one full flush whose refills the rest of the working
//! set pays afterwards. A process with a warm working set of anonymous pages flushes its
//! first N pages from CPU 0, with its threads on `threads` CPUs (shootdown IPIs to the
//! others), then touches its whole working set again. Each timed flush follows an untimed
//! one of the same range and its refill, as in a loop: the first (cold) shootdown also pays
//! for the handler's code and data reaching the targets' caches, shown beside it.
//! A `[[row]]` compares what remote targets add to the initiator's flush with a published
//! shootdown measurement.

use super::file::Header;
use crate::arch::x86::{Access, VirtAddr};
use crate::defense;
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::machine::{self, MachineProfile};
use crate::params::{Overrides, Params};
use crate::report::table::Table;
use crate::report::{Judging, Reproduction, Row};
use crate::sim::{Counter, Time};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    pub header: Header,
    pub machines: Vec<String>,
    pub defenses: String,
    /// Pages of the process's warm working set.
    pub working_set_pages: u64,
    /// CPUs running the process's threads (1: the flush stays local).
    pub threads: Vec<u32>,
    pub pages: Vec<u64>,
    #[serde(default)]
    pub tolerance_pct: Option<f64>,
    #[serde(default, rename = "row")]
    pub rows: Vec<PublishedShootdown>,
}

/// A published whole-shootdown figure: what `threads - 1` remote targets, each running the
/// process's threads, add to the initiator's warm flush of `pages` pages.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishedShootdown {
    pub label: String,
    /// The profile nearest to the measured machine.
    pub machine: String,
    pub threads: u32,
    pub pages: u64,
    /// Cycles added, as published.
    pub published: f64,
    /// The clock those cycles count (a TSC's nominal rate, or the core's).
    pub clock_ghz: f64,
    pub source: String,
    #[serde(default)]
    pub judging: Judging,
}

pub fn parse(place: &str, text: &str) -> Result<Experiment> {
    let e: Experiment = super::file::read(place, text)?;
    if e.pages.iter().any(|&p| p == 0 || p > e.working_set_pages) {
        return Err(Error::at(
            place,
            format!(
                "pages: expected 1 to working_set_pages ({})",
                e.working_set_pages
            ),
        ));
    }
    if e.threads.contains(&0) {
        return Err(Error::at(place, "threads: expected at least 1"));
    }
    if !e.rows.is_empty() && e.tolerance_pct.is_none() {
        return Err(Error::at(
            place,
            "tolerance_pct: expected one for the published rows",
        ));
    }
    for (i, r) in e.rows.iter().enumerate() {
        let at = |what: &str| Error::at(place, format!("row[{i}] \"{}\" {what}", r.label));
        if r.threads < 2 {
            return Err(at(
                "threads: expected at least 2 (an initiator and a remote target)",
            ));
        }
        if r.pages == 0 || r.pages > e.working_set_pages {
            return Err(at(&format!(
                "pages: expected 1 to working_set_pages ({})",
                e.working_set_pages
            )));
        }
        if !(r.clock_ghz > 0.0) {
            return Err(at(&format!(
                "clock_ghz: expected a positive clock, got {}",
                r.clock_ghz
            )));
        }
    }
    defense::parse_list(&e.defenses).map_err(|err| Error::at(place, format!("defenses: {err}")))?;
    Ok(e)
}

/// One flush: its time on the initiator, the refill of the working set after it, and the
/// initiator's counters.
struct Flush {
    /// The first flush of the range, with the targets' caches cold to the IPI handler.
    cold: Time,
    flush: Time,
    refill: Time,
    invlpg: u64,
    full: u64,
    ipis: u64,
}

fn one(
    m: &MachineProfile,
    params: &Params,
    defenses: &str,
    e: &Experiment,
    threads: u32,
    pages: u64,
) -> Result<Flush> {
    if threads > m.threads() {
        return Err(Error::new(format!(
            "{}: {threads} threads on {} CPUs",
            m.name,
            m.threads()
        )));
    }
    let mut k = Kernel::boot_with(
        m.clone(),
        defense::parse_list(defenses)?,
        params,
        Default::default(),
    );
    let leader = k.spawn("flusher", None);
    k.switch_to(0, leader);
    k.enter_user(0);
    for _ in 0..e.working_set_pages {
        k.anon_fault(0)?;
    }
    let mm = k.tasks[leader].mm;
    for cpu in 1..threads as usize {
        let t = k.spawn_thread(cpu, leader, "thread");
        k.switch_to(cpu, t);
        k.enter_user(cpu);
    }
    let heap = k.mms[mm].heap;
    let touch_all = |k: &mut Kernel| -> Result<()> {
        let touches: Vec<(VirtAddr, Access)> = (0..e.working_set_pages)
            .map(|p| (heap.offset(p * 4096), Access::Read))
            .collect();
        k.user_work(0, 0.0, &touches)
    };
    touch_all(&mut k)?;
    let cold_start = k.cpus[0].now;
    k.flush_tlb_mm_range(0, mm, heap, pages);
    let cold = k.cpus[0].now - cold_start;
    touch_all(&mut k)?;
    let s0 = k.cpus[0].stats.clone();
    let t0 = k.cpus[0].now;
    k.flush_tlb_mm_range(0, mm, heap, pages);
    let t1 = k.cpus[0].now;
    touch_all(&mut k)?;
    let t2 = k.cpus[0].now;
    let mut s = k.cpus[0].stats.clone();
    s.subtract(&s0);
    Ok(Flush {
        cold,
        flush: t1 - t0,
        refill: t2 - t1,
        invlpg: s.counter(Counter::NrTlbLocalFlushOne),
        full: s.counter(Counter::NrTlbLocalFlushAll),
        ipis: s.counter(Counter::IpisSent),
    })
}

pub fn run(e: &Experiment, overrides: &Overrides) -> Result<Reproduction> {
    let mut params = Params::linux();
    overrides.apply(&mut params)?;
    let ceiling = params.num("kernel.tlb_single_page_flush_ceiling");
    let mut predictions = vec![];
    let mut table = Table::new(
        format!(
            "\nflush_tlb_mm_range() of N of {} warm pages under {} (full-flush ceiling {ceiling}): the initiator's time, and the working set's refill after it",
            e.working_set_pages, e.defenses
        ),
        &["machine", "threads", "pages", "flush ns", "refill ns", "total ns", "INVLPG pages", "full flushes", "IPIs", "cold flush ns"],
    );
    for name in &e.machines {
        let m = overrides.apply_machine(&machine::load(name)?)?;
        for &threads in &e.threads {
            for &pages in &e.pages {
                let f = one(&m, &params, &e.defenses, e, threads, pages)?;
                let total = f.flush + f.refill;
                predictions.push(Row::predicted(
                    &format!(
                        "{} {threads} thread(s), {pages} pages: flush + refill",
                        m.name
                    ),
                    "ns",
                    total.ns(),
                ));
                table.push(vec![
                    m.name.clone(),
                    threads.to_string(),
                    pages.to_string(),
                    format!("{:.0}", f.flush.ns()),
                    format!("{:.0}", f.refill.ns()),
                    format!("{:.0}", total.ns()),
                    f.invlpg.to_string(),
                    f.full.to_string(),
                    f.ipis.to_string(),
                    format!("{:.0}", f.cold.ns()),
                ]);
            }
        }
    }
    let mut rows = vec![];
    let mut notes = vec!["the initiator's CPU is timed, on the flush after an untimed one of the same range (cold flush ns: that first one, the IPI handler's code and data reaching the targets' caches); a full flush costs one CR3 write but drops every non-global entry, so the working set's refill is where it pays".to_string()];
    for r in &e.rows {
        let m = overrides.apply_machine(&machine::load(&r.machine)?)?;
        let with = one(&m, &params, &e.defenses, e, r.threads, r.pages)?;
        let alone = one(&m, &params, &e.defenses, e, 1, r.pages)?;
        let added_ns = with.flush.ns() - alone.flush.ns();
        let mut row = Row::compared(
            &r.label,
            "cycles",
            r.published,
            added_ns * r.clock_ghz,
            e.tolerance_pct.unwrap_or(f64::NAN),
        );
        r.judging.mark(&mut row);
        rows.push(row);
        notes.push(format!(
            "{}: {} on {} ({} threads, {} page(s)): {:.0} ns added, counted in cycles of {} GHz",
            r.label, r.source, m.name, r.threads, r.pages, added_ns, r.clock_ghz
        ));
    }
    Ok(Reproduction {
        rows,
        predictions,
        breakdowns: vec![table],
        notes,
        params: Some(params.to_json()),
        ..e.header.reproduction()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text() -> String {
        crate::experiment::source_text("flush-range")
            .unwrap()
            .to_string()
    }

    #[test]
    fn a_published_row_needs_a_remote_target_and_a_tolerance() {
        for (from, to, expect) in [
            (
                "threads = 2\n",
                "threads = 1\n",
                "threads: expected at least 2",
            ),
            (
                "clock_ghz = 3.4",
                "clock_ghz = 0",
                "clock_ghz: expected a positive clock",
            ),
            (
                "pages = 1\n",
                "pages = 65\n",
                "pages: expected 1 to working_set_pages",
            ),
            ("tolerance_pct = 20\n", "", "tolerance_pct: expected one"),
        ] {
            let t = text();
            assert!(t.contains(from), "{from}");
            let e = parse("f.toml", &t.replacen(from, to, 1))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("f.toml") && e.contains(expect), "{to}: {e}");
        }
    }

    /// A remote target costs the warm flush its IPI round trip: more than a local INVLPG,
    /// far less than the cold first shootdown, whose handler comes from DRAM.
    #[test]
    fn a_warm_shootdown_costs_less_than_the_cold_one() {
        let e = parse("f.toml", &text()).unwrap();
        let m = machine::load("haswell-i7-4770").unwrap();
        let alone = one(&m, &Params::linux(), "none", &e, 1, 1).unwrap();
        let two = one(&m, &Params::linux(), "none", &e, 2, 1).unwrap();
        assert_eq!(two.ipis, 1);
        assert!(two.flush > alone.flush, "a remote target adds nothing");
        assert!(two.cold > two.flush, "the cold shootdown is not dearer");
    }
}
