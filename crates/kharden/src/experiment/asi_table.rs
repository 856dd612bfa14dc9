//! Address Space Isolation's published figures (issue 54; docs/design/asi.md): rows of a
//! workload on a machine with ASI off (a baseline row) and on (a mechanism row, which names
//! its baseline). A mechanism row is judged by what it adds over its own baseline row,
//! M/B - 1 of the published figures against M/B - 1 of the simulated ones, in percentage
//! points; a baseline row by its absolute figure where the model predicts one (fio's IOPS),
//! and not at all where it cannot (a build's seconds need the build's size). The build is
//! the kbuild workload's steady state (workload/kbuild_run.rs), whose time at make -jN with
//! every CPU busy is its CPU time per unit of work; fio-randread is workload/fio.rs.
//! Predictions: the same comparison for the no-flush transitions of the 2022 design, and
//! ASI against PTI against nothing on every x86 profile for a syscall loop, fio and the
//! build. Nothing is fitted.

use crate::error::{Error, Result};
use crate::machine::{self, MachineProfile};
use crate::params::{Overrides, Params};
use crate::report::table::Table;
use crate::report::{Reproduction, Row};
use crate::sim::{Counter, Stats, TimeCategory};
use crate::workload::kbuild_profile::JobProfile;
use crate::workload::kbuild_run::{self, Sampling};
use crate::workload::{fio, SyscallLoop};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    pub name: String,
    /// Always "asi-table" here.
    pub kind: String,
    pub title: String,
    pub source: String,
    pub kbuild: KbuildSampling,
    pub fio: FioSampling,
    pub row: Vec<RowSpec>,
    /// Published figures the model has no run for, with the reason.
    #[serde(default)]
    pub not_modelled: Vec<NotModelled>,
    pub predictions: Predictions,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotModelled {
    pub label: String,
    pub published_change_pct: f64,
    pub reason: String,
}

/// How much of a build each kbuild row simulates (kbuild_table's meaning).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KbuildSampling {
    pub warmup_ms: f64,
    /// CPU time of the build per window; the window is this over the jobs.
    pub window_cpu_ms: f64,
    pub samples: u32,
    /// make -jN; default one job per hardware thread.
    #[serde(default)]
    pub jobs: Option<u32>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FioSampling {
    pub warmup_ms: f64,
    pub window_ms: f64,
    pub jobs: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    Kbuild,
    FioRandread,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowSpec {
    pub label: String,
    pub machine: String,
    pub workload: Workload,
    pub defense: String,
    /// The row this one is measured against (ASI off on the same machine and workload);
    /// none for a baseline row.
    #[serde(default)]
    pub baseline: Option<String>,
    /// The published figure: seconds of the build, or fio's IOPS.
    #[serde(default)]
    pub published: Option<f64>,
    /// A change published without its baseline's figure, in percent of it.
    #[serde(default)]
    pub published_change_pct: Option<f64>,
    /// Mechanism rows: how far the added cost may be from the published one.
    #[serde(default)]
    pub tolerance_pp: Option<f64>,
    /// Baseline rows with an absolute prediction: relative tolerance.
    #[serde(default)]
    pub tolerance_pct: Option<f64>,
    #[serde(default)]
    pub known_miss: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Predictions {
    /// Rows whose variant with no-flush transitions is predicted beside them: (row label,
    /// the defense with no-flush transitions).
    pub no_flush: Vec<NoFlush>,
    /// ASI against PTI against nothing, on every machine listed.
    pub machines: Vec<String>,
    pub defenses: Vec<String>,
    /// Which of syscall-loop, fio-randread and kbuild to run on every machine.
    pub workloads: Vec<String>,
    pub syscall: String,
    pub syscall_iterations: u64,
    /// The build's window per machine, when `workloads` has kbuild.
    #[serde(default)]
    pub kbuild: Option<KbuildSampling>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoFlush {
    pub row: String,
    pub defense: String,
}

pub fn parse(place: &str, text: &str) -> Result<Experiment> {
    let e: Experiment =
        toml::from_str(text).map_err(|e| Error::at(place, machine::toml_message(&e, text)))?;
    let err = |msg: String| Err(Error::at(place, msg));
    for r in &e.row {
        crate::defense::parse_list(&r.defense)
            .map_err(|x| Error::at(place, format!("row \"{}\" defense: {x}", r.label)))?;
        match &r.baseline {
            Some(b) => {
                let Some(base) = e.row.iter().find(|x| &x.label == b) else {
                    return err(format!(
                        "row \"{}\" baseline: no row labelled \"{b}\"",
                        r.label
                    ));
                };
                if base.baseline.is_some()
                    || base.machine != r.machine
                    || base.workload != r.workload
                {
                    return err(format!("row \"{}\" baseline: \"{b}\" is not a baseline row of the same machine and workload", r.label));
                }
                if r.published.is_some() == r.published_change_pct.is_some()
                    || (r.published.is_some() && base.published.is_none())
                    || r.tolerance_pp.is_none()
                {
                    return err(format!("row \"{}\": a mechanism row gives tolerance_pp and either published (its baseline giving one too) or published_change_pct", r.label));
                }
            }
            None if r.published_change_pct.is_some() || r.tolerance_pp.is_some() => {
                return err(format!(
                    "row \"{}\": published_change_pct and tolerance_pp need a baseline",
                    r.label
                ));
            }
            None => {}
        }
    }
    for n in &e.predictions.no_flush {
        if !e
            .row
            .iter()
            .any(|r| r.label == n.row && r.baseline.is_some())
        {
            return err(format!(
                "predictions.no_flush: no mechanism row labelled \"{}\"",
                n.row
            ));
        }
        crate::defense::parse_list(&n.defense)
            .map_err(|x| Error::at(place, format!("predictions.no_flush: {x}")))?;
    }
    for d in &e.predictions.defenses {
        crate::defense::parse_list(d)
            .map_err(|x| Error::at(place, format!("predictions.defenses: {x}")))?;
    }
    for w in &e.predictions.workloads {
        let known = ["syscall-loop", "fio-randread", "kbuild"];
        if !known.contains(&w.as_str()) {
            return err(format!(
                "predictions.workloads: expected {}, got \"{w}\"",
                known.join(", ")
            ));
        }
        if w == "kbuild" && e.predictions.kbuild.is_none() {
            return err(
                "predictions.kbuild: the build's window, needed when workloads has kbuild".into(),
            );
        }
    }
    crate::kernel::syscall::lookup(&e.predictions.syscall).ok_or_else(|| {
        Error::at(
            place,
            format!(
                "predictions.syscall: unknown syscall '{}'",
                e.predictions.syscall
            ),
        )
    })?;
    Ok(e)
}

/// What a run measured: its figure in the published sense (the build's time per unit of
/// work, fio's IOPS, a loop's ns per iteration), each sample's figure, the stats and how
/// many units of work they cover (compile jobs, reads, iterations).
struct Measured {
    figure: f64,
    samples: Vec<f64>,
    stats: Stats,
    units: f64,
    unit: &'static str,
}

/// The simulations of a run, each done once.
struct Runs<'a> {
    e: &'a Experiment,
    params: &'a Params,
    overrides: &'a Overrides,
    profile: JobProfile,
}

impl Runs<'_> {
    fn machine(&self, name: &str) -> Result<MachineProfile> {
        self.overrides.apply_machine(&machine::load(name)?)
    }

    fn kbuild(&self, m: &MachineProfile, defense: &str, s: KbuildSampling) -> Result<Measured> {
        let jobs = s.jobs.unwrap_or(m.threads()).min(m.threads());
        let sampling = Sampling {
            warmup_ms: s.warmup_ms,
            window_ms: s.window_cpu_ms / jobs as f64,
            seed: 1,
            samples: s.samples,
        };
        let r = kbuild_run::simulate(m, defense, jobs, &self.profile, sampling, self.params)?;
        let busy = |st: &Stats| (st.user_time() + st.system_time()).secs();
        let samples = r
            .per_sample
            .iter()
            .map(|(st, work)| busy(st) / work)
            .collect();
        Ok(Measured {
            figure: busy(&r.window.tasks) / r.user_work_cycles,
            samples,
            stats: r.window.tasks.clone(),
            units: r.user_work_cycles / self.profile.user_cycles(),
            unit: "compile job",
        })
    }

    fn fio(&self, m: &MachineProfile, defense: &str) -> Result<Measured> {
        let f = self.e.fio;
        let r = fio::simulate(
            m,
            defense,
            &[],
            f.jobs,
            f.warmup_ms,
            f.window_ms,
            self.params,
        )?;
        Ok(Measured {
            figure: r.iops,
            samples: vec![],
            stats: r.window.tasks,
            units: r.ios as f64,
            unit: "read",
        })
    }

    fn syscall_loop(&self, m: &MachineProfile, defense: &str) -> Result<Measured> {
        let p = &self.e.predictions;
        let mut k = crate::kernel::Kernel::boot_with(
            m.clone(),
            crate::defense::parse_list(defense)?,
            self.params,
            Default::default(),
        );
        let mut lp = SyscallLoop::new(&p.syscall, p.syscall_iterations)?;
        lp.start(&mut k)?;
        for _ in 0..lp.warmup {
            lp.measure(&mut k, 1)?;
        }
        let r = lp.measure(&mut k, p.syscall_iterations)?;
        Ok(Measured {
            figure: r.ns_per_iteration(),
            samples: vec![],
            stats: r.stats,
            units: p.syscall_iterations as f64,
            unit: "iteration",
        })
    }

    fn row(&self, r: &RowSpec, defense: &str) -> Result<Measured> {
        let m = self.machine(&r.machine)?;
        match r.workload {
            Workload::Kbuild => self.kbuild(&m, defense, self.e.kbuild),
            Workload::FioRandread => self.fio(&m, defense),
        }
    }
}

/// M/B - 1 in percent, and its standard error over the samples both ran (the same seeds).
fn change(m: &Measured, b: &Measured) -> (f64, Option<f64>) {
    let pct = (m.figure / b.figure - 1.0) * 100.0;
    let per_seed: Vec<f64> = m
        .samples
        .iter()
        .zip(&b.samples)
        .map(|(x, y)| (x / y - 1.0) * 100.0)
        .collect();
    (pct, kbuild_run::standard_error(&per_seed))
}

fn mechanism_row(
    label: &str,
    published: Option<f64>,
    simulated: (f64, Option<f64>),
    tolerance_pp: Option<f64>,
) -> Row {
    let mut row = Row::predicted(label, "% added", simulated.0);
    row.published = published;
    if let (Some(p), Some(t)) = (published, tolerance_pp) {
        row.difference_pp = Some(simulated.0 - p);
        row.tolerance_pp = Some(t);
        row.sign_required = true;
    }
    // The standard error in points, as a percentage of the added cost.
    row.sampling_pct = simulated
        .1
        .map(|se| 100.0 * se / simulated.0.abs().max(1e-9));
    row
}

/// One line of the breakdown: what the mechanism row adds over its baseline per unit of
/// work, by ASI event and by time category.
fn breakdown_line(label: &str, m: &Measured, b: &Measured) -> Vec<String> {
    let owned = |s: &Stats, name: &str| s.owned(crate::defense::registry::counter(name)) as f64;
    let per = |x: f64, u: f64| x / u;
    let ev = |name: &str| format!("{:.2}", per(owned(&m.stats, name), m.units));
    let added_count = |c: Counter| {
        per(m.stats.counter(c) as f64, m.units) - per(b.stats.counter(c) as f64, b.units)
    };
    let added_ns = |cats: &[TimeCategory]| {
        let t = |s: &Stats, u: f64| cats.iter().map(|&c| s.time(c).ns()).sum::<f64>() / u;
        t(&m.stats, m.units) - t(&b.stats, b.units)
    };
    let scale = if m.unit == "compile job" { 1e-3 } else { 1.0 };
    let ns = |cats: &[TimeCategory]| format!("{:.1}", added_ns(cats) * scale);
    use TimeCategory as T;
    let all: Vec<TimeCategory> = T::ALL.iter().copied().filter(|c| *c != T::User).collect();
    let named = [
        T::Cr3Write,
        T::EntryTrampoline,
        T::TlbInvalidate,
        T::DirectMap,
        T::InterruptEntry,
        T::KernelTlbRefill,
        T::UserTlbRefill,
        T::KernelCacheMiss,
    ];
    let rest: Vec<TimeCategory> = all.iter().copied().filter(|c| !named.contains(c)).collect();
    vec![
        label.to_string(),
        m.unit.to_string(),
        ev("asi_exits_page_cache"),
        ev("asi_exits_user_page"),
        ev("asi_exits_context_switch"),
        ev("asi_exits_tlb_flush"),
        ev("asi_exits_other"),
        ev("asi_enters"),
        ev("asi_control_flushes"),
        ev("asi_l1d_flushes"),
        ev("asi_ephmap_copies"),
        format!("{:.2}", added_count(Counter::Cr3WriteFlush)),
        format!("{:.2}", added_count(Counter::Cr3WriteNoflush)),
        format!("{:.2}", added_count(Counter::PageWalks)),
        ns(&[T::Cr3Write]),
        ns(&[T::EntryTrampoline]),
        ns(&[T::TlbInvalidate, T::DirectMap]),
        ns(&[T::InterruptEntry]),
        ns(&[T::KernelTlbRefill]),
        ns(&[T::UserTlbRefill]),
        ns(&[T::KernelCacheMiss]),
        ns(&rest),
        ns(&all),
    ]
}

const BREAKDOWN_HEADER: &[&str] = &[
    "row",
    "per",
    "exits page-cache",
    "exits user-page",
    "exits ctx-switch",
    "exits tlb-flush",
    "exits other",
    "enters",
    "IBPB/RSB",
    "L1D flushes",
    "ephmap copies",
    "+CR3 flush",
    "+CR3 no-flush",
    "+walks",
    "+cr3-write",
    "+ASI code, IBPB, RSB, L1D",
    "+invlpg, PTEs",
    "+#PF entry",
    "+kernel TLB refill",
    "+user TLB refill",
    "+kernel cache misses",
    "+other",
    "+total",
];

pub fn run(e: &Experiment, overrides: &Overrides) -> Result<Reproduction> {
    let mut params = Params::linux();
    overrides.apply(&mut params)?;
    let runs = Runs {
        e,
        params: &params,
        overrides,
        profile: JobProfile::builtin(),
    };
    let mut rows = vec![];
    let mut baselines = vec![];
    let mut measured: Vec<(String, Measured)> = vec![];
    let mut breakdown = Table::new(
        "\nWhat each mechanism row adds over its baseline, per unit of work: ASI's events, then time added (ns per read; us per compile job)",
        BREAKDOWN_HEADER,
    );
    for r in &e.row {
        let m = runs.row(r, &r.defense)?;
        match &r.baseline {
            None => match (r.workload, r.published) {
                (Workload::FioRandread, Some(p)) => {
                    let mut row =
                        Row::compared(&r.label, "IOPS", p, m.figure, r.tolerance_pct.unwrap_or(15.0));
                    row.known_miss = r.known_miss.clone();
                    rows.push(row);
                }
                // A build's seconds need the build's size, which nothing gives: the baseline
                // is reported, not judged.
                _ => baselines.push(Row::predicted(
                    &format!("{} (baseline: CPU ms per compile job; the published seconds need the build's size)", r.label),
                    "CPU ms/job",
                    m.figure * runs.profile.user_cycles() * 1e3,
                )),
            },
            Some(b) => {
                let base_spec = e.row.iter().find(|x| &x.label == b).expect("checked by parse");
                let base = &measured.iter().find(|(l, _)| l == b).expect("baselines come first").1;
                let published = match (r.published, base_spec.published, r.published_change_pct) {
                    (Some(p), Some(pb), _) => Some((p / pb - 1.0) * 100.0),
                    (_, _, c) => c,
                };
                let mut row = mechanism_row(&r.label, published, change(&m, base), r.tolerance_pp);
                row.known_miss = r.known_miss.clone();
                rows.push(row);
                breakdown.push(breakdown_line(&r.label, &m, base));
            }
        }
        measured.push((r.label.clone(), m));
    }
    let mut predictions = baselines;
    for n in &e.predictions.no_flush {
        let r = e
            .row
            .iter()
            .find(|x| x.label == n.row)
            .expect("checked by parse");
        let b = r.baseline.as_ref().expect("a mechanism row");
        let base = &measured.iter().find(|(l, _)| l == b).expect("measured").1;
        let flushing = &measured
            .iter()
            .find(|(l, _)| l == &n.row)
            .expect("measured")
            .1;
        let m = runs.row(r, &n.defense)?;
        let label = format!("{} with no-flush transitions ({})", r.label, n.defense);
        predictions.push(mechanism_row(&label, None, change(&m, base), None));
        predictions.push(mechanism_row(
            &format!("{}: against the prototype's full flushes", label),
            None,
            change(&m, flushing),
            None,
        ));
        breakdown.push(breakdown_line(&label, &m, base));
    }
    let p = &e.predictions;
    let mut cross = Table::new(
        format!(
            "\nASI against PTI against no mitigation, % added over none ({}): syscall-loop is a {} loop (ns per call), fio-randread {} job(s) (IOPS), kbuild the build (CPU time per unit of work)",
            p.workloads.join(", "),
            p.syscall,
            e.fio.jobs,
        ),
        &[&["machine", "workload"][..], &p.defenses.iter().map(String::as_str).collect::<Vec<_>>()].concat(),
    );
    for name in &p.machines {
        let m = runs.machine(name)?;
        for w in p.workloads.iter().map(String::as_str) {
            let measure = |d: &str| match w {
                "syscall-loop" => runs.syscall_loop(&m, d),
                "fio-randread" => runs.fio(&m, d),
                _ => runs.kbuild(&m, d, p.kbuild.expect("checked by parse")),
            };
            let none = measure("none")?;
            let mut line = vec![name.clone(), w.to_string()];
            for d in &p.defenses {
                let c = change(&measure(d)?, &none);
                predictions.push(mechanism_row(&format!("{name}, {w}: {d}"), None, c, None));
                line.push(format!("{:+.1}", c.0));
            }
            cross.push(line);
        }
    }
    Ok(Reproduction {
        experiment: e.name.clone(),
        source: e.source.clone(),
        rows,
        fitted_parameters: 0,
        fitted: vec![],
        predictions,
        breakdowns: vec![breakdown, cross],
        figures: vec![],
        notes: e
            .not_modelled
            .iter()
            .map(|n| format!("not modelled: \"{}\" ({:+.1}% published): {}", n.label, n.published_change_pct, n.reason))
            .chain([
            "A mechanism row's figure is what it adds over its baseline row, M/B - 1 in percent of the published and of the simulated figures, compared in points (the build: time, so CPU time per unit of work at make -jN with every CPU busy; fio: IOPS, so a loss is negative).".into(),
            "Nothing is fitted: IBPB's cost (asi.ibpb_cycles) and the ASI code's are estimates, the rest of the machine is its profile's (docs/design/asi.md).".into(),
        ])
        .collect(),
        params: Some(params.to_json()),
    })
}

#[cfg(test)]
mod tests {
    use super::parse;

    /// A mechanism row without a usable baseline, a figure or a tolerance, an unknown
    /// defense or syscall: one line naming the file and what is wrong.
    #[test]
    fn bad_rows_are_one_line_errors() {
        let text = crate::experiment::source_text("asi").unwrap();
        assert!(parse("e.toml", text).is_ok());
        for (from, to, expect) in [
            (
                "baseline = \"FIO randread tmpfs, asi-off\"\npublished = 871928",
                "baseline = \"nope\"\npublished = 871928",
                "no row labelled \"nope\"",
            ),
            (
                "baseline = \"FIO randread tmpfs, asi-off\"\npublished = 871928",
                "baseline = \"Kernel compile, asi-off\"\npublished = 871928",
                "not a baseline row of the same machine and workload",
            ),
            (
                "published = 871928\ntolerance_pp = 3.0",
                "published = 871928",
                "a mechanism row gives tolerance_pp",
            ),
            (
                "defense = \"asi:rfcv2\"",
                "defense = \"asi:nope\"",
                "unknown defense 'asi:nope'",
            ),
            (
                "syscall = \"getppid\"",
                "syscall = \"nope\"",
                "unknown syscall 'nope'",
            ),
            (
                "workloads = [\"syscall-loop\", \"fio-randread\"]",
                "workloads = [\"kbuild\"]",
                "predictions.kbuild",
            ),
        ] {
            assert!(text.contains(from), "{from}");
            let e = parse("e.toml", &text.replacen(from, to, 1))
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("e.toml: ") && e.contains(expect) && !e.contains('\n'),
                "{to}: {e}"
            );
        }
    }
}
