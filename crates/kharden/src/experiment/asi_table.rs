//! Address Space Isolation's published figures (issue 54; docs/design/asi.md): a workload on
//! a machine with ASI off (a baseline row) and on (a mechanism row naming its baseline),
//! judged as every table is (report::judge): a mechanism row by what it adds over its
//! baseline, a baseline by its absolute figure. The build is the kbuild workload's steady
//! state at make -jN with every CPU busy (workload/kbuild_run.rs): its seconds are its CPU
//! time per cycle of user work, times the build's user work, over the CPUs. The build's user
//! work, which no source gives, is fitted to one baseline row; what ASI adds does not depend
//! on it. fio-randread (workload/fio.rs) is predicted outright, in IOPS. Predictions: the
//! no-flush transitions of the 2022 design, and ASI against PTI against nothing on every x86
//! profile for a syscall loop, fio and the build.

use super::file::Header;
use super::Fit;
use crate::error::{Error, Result};
use crate::machine::{self, MachineProfile};
use crate::params::{Overrides, Params};
use crate::report::table::Table;
use crate::report::{Judging, Reproduction, Row};
use crate::sim::{Counter, Stats, TimeCategory};
use crate::workload::kbuild_profile::JobProfile;
use crate::workload::kbuild_run::{self, Sampling};
use crate::workload::{fio, SyscallLoop};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The one parameter this table fits: the build's total user work.
const BUILD_SIZE: &str = "build_user_cycles";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    pub header: Header,
    /// Rows judged by their absolute figure: the largest relative error within tolerance.
    pub tolerance_pct: f64,
    pub kbuild: KbuildSampling,
    pub fio: FioSampling,
    /// `build_user_cycles` fitted to a build baseline row; required when a row is a build.
    #[serde(default)]
    pub fit: Vec<Fit>,
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
    #[serde(default)]
    pub judging: Judging,
    /// The published figure: seconds of the build, or fio's IOPS.
    #[serde(default)]
    pub published: Option<f64>,
    /// A change published without its baseline's figure, in percent of it (RFC v2's "70%
    /// degradation"): the row's published figure is its baseline's times (1 + change).
    #[serde(default)]
    pub published_change_pct: Option<f64>,
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
    let e: Experiment = super::file::read(place, text)?;
    let err = |msg: String| Err(Error::at(place, msg));
    let row_named = |label: &str| e.row.iter().find(|x| x.label == label);
    for r in &e.row {
        crate::defense::parse_list(&r.defense)
            .map_err(|x| Error::at(place, format!("row \"{}\" defense: {x}", r.label)))?;
        if r.published.is_some() == r.published_change_pct.is_some() {
            return err(format!(
                "row \"{}\": expected either published or published_change_pct",
                r.label
            ));
        }
        match &r.judging.baseline {
            // report::judge says what else a baseline must be (a row, not a mechanism row).
            Some(b) => {
                if let Some(base) = row_named(b) {
                    if base.machine != r.machine || base.workload != r.workload {
                        return err(format!("row \"{}\" baseline: \"{b}\" is not a row of the same machine and workload", r.label));
                    }
                    if r.published_change_pct.is_some() && base.published.is_none() {
                        return err(format!("row \"{}\": published_change_pct needs a baseline with a published figure", r.label));
                    }
                }
            }
            None if r.published_change_pct.is_some() => {
                return err(format!(
                    "row \"{}\": published_change_pct needs a baseline",
                    r.label
                ));
            }
            None => {}
        }
    }
    let labels: Vec<&str> = e.row.iter().map(|r| r.label.as_str()).collect();
    let builds = e.row.iter().any(|r| r.workload == Workload::Kbuild);
    match (&e.fit[..], builds) {
        ([], false) => {}
        ([f], true) => {
            f.check(&format!("{place}: fit"), &[BUILD_SIZE], &labels)?;
            let r = row_named(&f.row).expect("checked");
            if r.workload != Workload::Kbuild
                || r.judging.baseline.is_some()
                || r.published.is_none()
            {
                return err(format!("fit.row: \"{}\" is not a build baseline row with a published figure: the build's size is fitted to one", f.row));
            }
        }
        (_, true) => {
            return err(format!(
                "fit: expected one [[fit]] of {BUILD_SIZE} (the build rows' size)"
            ))
        }
        (_, false) => return err("fit: no build row to fit the build's size to".into()),
    }
    for n in &e.predictions.no_flush {
        if !row_named(&n.row).is_some_and(|r| r.judging.baseline.is_some()) {
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
    if !crate::kernel::paths::syscall::is_known(&e.predictions.syscall) {
        return err(format!(
            "predictions.syscall: unknown syscall '{}'",
            e.predictions.syscall
        ));
    }
    Ok(e)
}

/// What a run measured: its figure (the build's CPU seconds per cycle of user work, fio's
/// IOPS, a loop's ns per iteration), each sample's figure, the stats and how many units of
/// work they cover (compile jobs, reads, iterations), and the CPUs the build kept busy.
struct Measured {
    figure: f64,
    samples: Vec<f64>,
    stats: Stats,
    units: f64,
    unit: &'static str,
    cpus: f64,
}

impl Measured {
    /// CPU time (user and system) per unit of work, in ns.
    fn busy_ns_per_unit(&self) -> f64 {
        (self.stats.user_time() + self.stats.system_time()).ns() / self.units
    }

    /// The figure's standard error over its samples, in percent of it.
    fn sampling_pct(&self) -> Option<f64> {
        kbuild_run::standard_error(&self.samples).map(|se| 100.0 * se / self.figure)
    }
}

/// The simulations of a run.
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
        Ok(Measured {
            figure: busy(&r.window.tasks) / r.user_work_cycles,
            samples: r
                .per_sample
                .iter()
                .map(|(st, work)| busy(st) / work)
                .collect(),
            stats: r.window.tasks.clone(),
            units: r.user_work_cycles / self.profile.user_cycles(),
            unit: "compile job",
            cpus: jobs as f64,
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
            cpus: f.jobs as f64,
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
            cpus: 1.0,
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

/// M/B - 1 of two runs' figures, in percent (a loss of IOPS is negative).
fn change(m: &Measured, b: &Measured) -> f64 {
    (m.figure / b.figure - 1.0) * 100.0
}

/// The standard error in points of M/B - 1 over the samples both runs pooled, seed by seed
/// (both run the same seeds); `None` for runs of one sample.
fn paired_standard_error(m: &Measured, b: &Measured) -> Option<f64> {
    let per_seed: Vec<f64> = m
        .samples
        .iter()
        .zip(&b.samples)
        .map(|(x, y)| (x / y - 1.0) * 100.0)
        .collect();
    kbuild_run::standard_error(&per_seed)
}

/// What a mechanism run adds over its baseline per unit of work: ASI's events, the CR3
/// writes and walks it adds, and the time it adds by category. `cells` is the breakdown
/// table's line; `values` the same figures by name for known-miss texts (exits per unit, and
/// time added in percent of the baseline's CPU time per unit).
fn breakdown(label: &str, m: &Measured, b: &Measured) -> (Vec<String>, Vec<(String, f64)>) {
    let per = |name: &str| m.stats.owned(crate::defense::registry::counter(name)) as f64 / m.units;
    let added_count =
        |c: Counter| m.stats.counter(c) as f64 / m.units - b.stats.counter(c) as f64 / b.units;
    let added_ns = |cats: &[TimeCategory]| {
        let t = |s: &Stats, u: f64| cats.iter().map(|&c| s.time(c).ns()).sum::<f64>() / u;
        t(&m.stats, m.units) - t(&b.stats, b.units)
    };
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
    let events = [
        ("exits_page_cache", "asi_exits_page_cache"),
        ("exits_user_page", "asi_exits_user_page"),
        ("exits_context_switch", "asi_exits_context_switch"),
        ("exits_tlb_flush", "asi_exits_tlb_flush"),
        ("exits_other", "asi_exits_other"),
        ("enters", "asi_enters"),
        ("control_flushes", "asi_control_flushes"),
        ("l1d_flushes", "asi_l1d_flushes"),
        ("ephmap_copies", "asi_ephmap_copies"),
    ];
    let times: [(&str, Vec<TimeCategory>); 9] = [
        ("cr3_write", vec![T::Cr3Write]),
        ("asi_code", vec![T::EntryTrampoline]),
        ("invalidate", vec![T::TlbInvalidate, T::DirectMap]),
        ("fault_entry", vec![T::InterruptEntry]),
        ("kernel_refill", vec![T::KernelTlbRefill]),
        ("user_refill", vec![T::UserTlbRefill]),
        ("kernel_cache_misses", vec![T::KernelCacheMiss]),
        ("other", rest),
        ("total", all),
    ];
    // Time per unit in the table: ns per read, us per compile job.
    let scale = if m.unit == "compile job" { 1e-3 } else { 1.0 };
    let base_ns = b.busy_ns_per_unit();
    let mut cells = vec![label.to_string(), m.unit.to_string()];
    let mut values = vec![];
    for (name, counter) in events {
        let v = per(counter);
        cells.push(format!("{v:.2}"));
        values.push((name.to_string(), v));
    }
    for c in [
        Counter::Cr3WriteFlush,
        Counter::Cr3WriteNoflush,
        Counter::PageWalks,
    ] {
        cells.push(format!("{:.2}", added_count(c)));
    }
    for (name, cats) in &times {
        let ns = added_ns(cats);
        cells.push(format!("{:.1}", ns * scale));
        values.push((format!("{name}_pct"), 100.0 * ns / base_ns));
    }
    (cells, values)
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
    // Each row's run; a row that is another's configuration (two baselines of one build)
    // shares its run, which is deterministic.
    let mut measured: Vec<Measured> = vec![];
    let mut run_of: Vec<usize> = vec![];
    for (i, r) in e.row.iter().enumerate() {
        let same = e.row[..i].iter().position(|x| {
            (&x.machine, x.workload, &x.defense) == (&r.machine, r.workload, &r.defense)
        });
        match same {
            Some(j) => run_of.push(run_of[j]),
            None => {
                measured.push(runs.row(r, &r.defense)?);
                run_of.push(measured.len() - 1);
            }
        }
    }
    let of = |label: &str| {
        let i = e
            .row
            .iter()
            .position(|r| r.label == label)
            .expect("checked by parse");
        (&e.row[i], &measured[run_of[i]])
    };
    let mut fitted = vec![];
    let build_user_cycles = match e.fit.first() {
        Some(f) => {
            let (r, m) = of(&f.row);
            let published = r.published.expect("checked by parse");
            let cycles = published * m.cpus / m.figure;
            fitted.push(format!(
                "{BUILD_SIZE} = {cycles:.4e} (the build's total user work, {:.0} compile jobs of the recorded kind; what a mechanism adds does not depend on it), fitted to \"{}\" = {published} s",
                cycles / runs.profile.user_cycles(),
                f.row
            ));
            cycles
        }
        None => 0.0,
    };
    let mut values = BTreeMap::new();
    values.insert(
        "compile_jobs_in_build".into(),
        build_user_cycles / runs.profile.user_cycles(),
    );
    let mut breakdown_table = Table::new(
        "\nWhat each mechanism row adds over its baseline, per unit of work: ASI's events, then time added (ns per read; us per compile job)",
        BREAKDOWN_HEADER,
    );
    let mut rows = vec![];
    let mut paired = vec![];
    for (i, r) in e.row.iter().enumerate() {
        let m = &measured[run_of[i]];
        let (unit, simulated) = match r.workload {
            Workload::Kbuild => ("s", m.figure * build_user_cycles / m.cpus),
            Workload::FioRandread => ("IOPS", m.figure),
        };
        let published = match (r.published, &r.judging.baseline) {
            (Some(p), _) => p,
            (None, Some(b)) => {
                of(b).0.published.expect("checked by parse")
                    * (1.0 + r.published_change_pct.expect("checked by parse") / 100.0)
            }
            (None, None) => unreachable!("checked by parse"),
        };
        let mut row = Row::compared(&r.label, unit, published, simulated, e.tolerance_pct);
        r.judging.mark(&mut row);
        row.sampling_pct = m.sampling_pct();
        row.fitted = e.fit.iter().any(|f| f.row == r.label);
        if let Some(b) = &r.judging.baseline {
            let base = of(b).1;
            if let Some(se) = paired_standard_error(m, base) {
                values.insert(format!("{}/added_paired_se_pp", r.label), se);
                paired.push(format!("\"{}\" {se:.2}", r.label));
            }
            let (cells, figures) = breakdown(&r.label, m, base);
            breakdown_table.push(cells);
            for (name, v) in figures {
                values.insert(format!("{}/{name}", r.label), v);
            }
        }
        rows.push(row);
    }
    let mut predictions = vec![];
    for n in &e.predictions.no_flush {
        let (r, flushing) = of(&n.row);
        let base = of(r.judging.baseline.as_ref().expect("checked by parse")).1;
        let m = runs.row(r, &n.defense)?;
        let label = format!("{} with no-flush transitions ({})", r.label, n.defense);
        predictions.push(Row::predicted(&label, "% added", change(&m, base)));
        predictions.push(Row::predicted(
            &format!("{label}: against the prototype's full flushes"),
            "% added",
            change(&m, flushing),
        ));
        breakdown_table.push(breakdown(&label, &m, base).0);
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
                predictions.push(Row::predicted(&format!("{name}, {w}: {d}"), "% added", c));
                line.push(format!("{c:+.1}"));
            }
            cross.push(line);
        }
    }
    let mut notes: Vec<String> = e
        .not_modelled
        .iter()
        .map(|n| format!("not modelled: \"{}\" ({:+.1}% published): {}", n.label, n.published_change_pct, n.reason))
        .chain([
            format!("the build's seconds are its CPU time per cycle of user work at make -jN with every CPU busy, times the fitted user work, over the CPUs; each build row pools {} windows (seeds) of {} CPU-ms after {} ms of warm-up, and sampling ± is the standard error of their mean", e.kbuild.samples, e.kbuild.window_cpu_ms, e.kbuild.warmup_ms),
            "Nothing of ASI is fitted: IBPB's cost (asi.ibpb_cycles) and the ASI code's are estimates, the CR3 writes the profile's in-context figures, the rest of the machine its profile's (docs/design/asi.md)".into(),
        ])
        .collect();
    if !paired.is_empty() {
        notes.push(format!("a mechanism row and its baseline run the same seeds: the added cost's standard error over each seed's own pair, in points, is {} (the JSON's added_sampling_pp combines the two rows' errors as if they were independent)", paired.join(", ")));
    }
    Ok(Reproduction {
        rows,
        fitted_parameters: fitted.len() as u32,
        fitted,
        predictions,
        breakdowns: vec![breakdown_table, cross],
        notes,
        values,
        params: Some(params.to_json()),
        ..e.header.reproduction()
    })
}

#[cfg(test)]
mod tests {
    use super::parse;

    /// A mechanism row without a usable baseline or figure, a fit that is not the build's
    /// size, an unknown defense or syscall: one line naming the file and what is wrong.
    #[test]
    fn bad_rows_are_one_line_errors() {
        let text = crate::experiment::source_text("asi").unwrap();
        assert!(parse("e.toml", text).is_ok());
        for (from, to, expect) in [
            (
                "baseline = \"FIO randread tmpfs, asi-off\"\npublished = 871928",
                "baseline = \"Kernel compile, asi-off\"\npublished = 871928",
                "not a row of the same machine and workload",
            ),
            (
                "defense = \"asi:prototype\"\nbaseline = \"FIO randread tmpfs, asi-off\"\npublished = 871928",
                "defense = \"asi:prototype\"\nbaseline = \"FIO randread tmpfs, asi-off\"",
                "expected either published or published_change_pct",
            ),
            (
                "defense = \"none\"\npublished = 1003102",
                "defense = \"none\"\npublished_change_pct = 3",
                "published_change_pct needs a baseline",
            ),
            (
                "row = \"Kernel compile, asi-off\"",
                "row = \"Kernel compile, asi-on (IBPB hard-coded in asi_exit)\"",
                "is not a build baseline row",
            ),
            (
                "parameter = \"build_user_cycles\"",
                "parameter = \"asi.ibpb_cycles\"",
                "fit.parameter: expected \"build_user_cycles\"",
            ),
            (
                "[[fit]]\nparameter = \"build_user_cycles\"\nrow = \"Kernel compile, asi-off\"",
                "",
                "expected one [[fit]] of build_user_cycles",
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
                e.starts_with("e.toml") && e.contains(expect) && !e.contains('\n'),
                "{to}: {e}"
            );
        }
    }
}
