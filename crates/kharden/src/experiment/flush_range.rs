//! What flush_tlb_mm_range() costs against the number of pages flushed (issue 19's
//! predictions): below the full-flush ceiling (kernel.tlb_single_page_flush_ceiling, 33 in
//! Linux) one INVLPG per page, above it one full flush whose refills the rest of the working
//! set pays afterwards. A process with a warm working set of anonymous pages flushes its
//! first N pages from CPU 0, with its threads on `threads` CPUs (shootdown IPIs to the
//! others), then touches its whole working set again. Predictions only: nothing published.

use crate::arch::x86::{Access, VirtAddr};
use crate::defense;
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::machine::{self, MachineProfile};
use crate::params::{Overrides, Params};
use crate::report::table::Table;
use crate::report::{Reproduction, Row};
use crate::sim::{Counter, Time};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    pub name: String,
    /// Always "flush-range" here.
    pub kind: String,
    pub title: String,
    pub source: String,
    pub machines: Vec<String>,
    pub defenses: String,
    /// Pages of the process's warm working set.
    pub working_set_pages: u64,
    /// CPUs running the process's threads (1: the flush stays local).
    pub threads: Vec<u32>,
    pub pages: Vec<u64>,
}

pub fn parse(place: &str, text: &str) -> Result<Experiment> {
    let e: Experiment =
        toml::from_str(text).map_err(|e| Error::at(place, machine::toml_message(&e, text)))?;
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
    defense::parse_list(&e.defenses).map_err(|err| Error::at(place, format!("defenses: {err}")))?;
    Ok(e)
}

/// One flush: its time on the initiator, the refill of the working set after it, and the
/// initiator's counters.
struct Flush {
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
    let s0 = k.cpus[0].stats.clone();
    let t0 = k.cpus[0].now;
    k.flush_tlb_mm_range(0, mm, heap, pages);
    let t1 = k.cpus[0].now;
    touch_all(&mut k)?;
    let t2 = k.cpus[0].now;
    let mut s = k.cpus[0].stats.clone();
    s.subtract(&s0);
    Ok(Flush {
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
        &["machine", "threads", "pages", "flush ns", "refill ns", "total ns", "INVLPG pages", "full flushes", "IPIs"],
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
                ]);
            }
        }
    }
    Ok(Reproduction {
        experiment: e.name.clone(),
        source: e.source.clone(),
        rows: vec![],
        fitted_parameters: 0,
        fitted: vec![],
        predictions,
        breakdowns: vec![table],
        figures: vec![],
        notes: vec!["the initiator's CPU is timed; a full flush costs one CR3 write but drops every non-global entry, so the working set's refill is where it pays".into()],
        values: Default::default(),
        params: Some(params.to_json()),
    })
}
