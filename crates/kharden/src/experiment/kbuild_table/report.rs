//! The tables that explain a kernel-build reproduction: each row over its machine's
//! baseline, time by category and events per compile job.

use crate::defense::registry;
use crate::report::table::Table;
use crate::report::Row;
use crate::sim::{Counter, Stats, TimeCategory};
use crate::workload::kbuild_run::Measured;

use super::RowSpec;

/// An event column: a kernel counter or one a defense owns.
enum Event {
    Kernel(Counter),
    Owned(&'static str),
}

impl Event {
    fn count(&self, s: &Stats) -> u64 {
        match self {
            Event::Kernel(c) => s.counter(*c),
            Event::Owned(name) => s.owned(registry::counter(name)),
        }
    }
}

pub(super) const EVENT_COLUMNS: &str = "events: local one/all = nr_tlb_local_flush_one/all, remote received = nr_tlb_remote_flush_received, pending run = XPFO's deferred full flushes executed at a context switch, walks = page walks (refills included), stores from DRAM = lines the kernel stored (page clears and copies, new objects) that came from DRAM, struct pages from DRAM = the page allocator's struct page lines that did, splits = direct-map splits in the whole window";

/// Each row's system time as a multiple of its machine's baseline (the machine's first row),
/// published and simulated: the form in which the patch postings quote their results.
pub(super) fn ratios(title: &str, specs: &[RowSpec], rows: &[Row]) -> Table {
    let mut t = Table::new(
        format!("{title}: system time over the machine's baseline (its first row)"),
        &["row", "published x", "simulated x"],
    );
    for (spec, row) in specs.iter().zip(rows) {
        let base = specs
            .iter()
            .position(|s| s.machine == spec.machine)
            .expect("the row itself matches");
        let published =
            row.published.unwrap_or(f64::NAN) / rows[base].published.unwrap_or(f64::NAN);
        t.push(vec![
            row.label.clone(),
            format!("{published:.3}"),
            format!("{:.3}", row.simulated / rows[base].simulated),
        ]);
    }
    t
}

/// Where each row's system time goes, scaled to the whole build, and the events behind it
/// per compile job (named like Linux's vmstat counters where Linux has one).
pub fn breakdown(
    title: &str,
    measured: &[Measured],
    build_user_cycles: f64,
    per_job_user_cycles: f64,
) -> Vec<Table> {
    let cats = [
        TimeCategory::Kernel,
        TimeCategory::InterruptEntry,
        TimeCategory::KernelTlbRefill,
        TimeCategory::KernelCacheMiss,
        TimeCategory::TlbInvalidate,
        TimeCategory::DirectMap,
        TimeCategory::LockedRmw,
        TimeCategory::IpiSend,
        TimeCategory::IpiWait,
        TimeCategory::IpiHandler,
        TimeCategory::SharedLine,
        TimeCategory::Fitted,
    ];
    let events = [
        ("switches", Event::Kernel(Counter::ContextSwitches)),
        ("xpfo flushes", Event::Owned("xpfo_flushes")),
        ("IPIs sent", Event::Kernel(Counter::IpisSent)),
        ("to idle", Event::Kernel(Counter::IpisToIdle)),
        (
            "remote received",
            Event::Kernel(Counter::NrTlbRemoteFlushReceived),
        ),
        ("local one", Event::Kernel(Counter::NrTlbLocalFlushOne)),
        ("local all", Event::Kernel(Counter::NrTlbLocalFlushAll)),
        ("pending run", Event::Owned("xpfo_pending_executed")),
        ("walks", Event::Kernel(Counter::PageWalks)),
        (
            "stores from DRAM",
            Event::Kernel(Counter::KernelStoreLinesFromMemory),
        ),
        (
            "struct pages from DRAM",
            Event::Kernel(Counter::StructPagesFromMemory),
        ),
    ];
    let mut header = vec!["row", "system s"];
    header.extend(cats.iter().map(|c| c.name()));
    header.push("user-tlb-refill");
    let mut time = Table::new(
        format!("{title}: system time by category, seconds for the whole build"),
        &header,
    );
    let mut header = vec!["row"];
    header.extend(events.iter().map(|(name, _)| *name));
    header.push("splits");
    let mut counts = Table::new(
        format!("{title}: events per compile job (IPI handlers on idle CPUs included)"),
        &header,
    );
    for m in measured {
        let scale = build_user_cycles / m.user_work_cycles;
        let jobs_in_window = m.user_work_cycles / per_job_user_cycles;
        let s = &m.window.tasks;
        let all = {
            let mut a = s.clone();
            a.merge(&m.window.idle);
            a
        };
        let mut row = vec![
            m.label.clone(),
            format!("{:.1}", s.system_time().secs() * scale),
        ];
        row.extend(
            cats.iter()
                .map(|&c| format!("{:.1}", s.time(c).secs() * scale)),
        );
        row.push(format!(
            "{:.1}",
            s.time(TimeCategory::UserTlbRefill).secs() * scale
        ));
        time.push(row);
        let mut row = vec![m.label.clone()];
        row.extend(
            events
                .iter()
                .map(|(_, e)| format!("{:.0}", e.count(&all) as f64 / jobs_in_window)),
        );
        row.push(format!("{}", all.counter(Counter::DirectMapSplits)));
        counts.push(row);
    }
    vec![time, counts]
}
