//! Kernel-build tables (seed 000): rows of (machine, make -jN, defenses) whose system time is
//! compared with published seconds.
//!
//! Each row simulates a window of the build's steady state and measures system time per
//! cycle of user work; the whole build's system time is that ratio times the build's total
//! user work, a number the source does not give and which is fitted to one row. Before the
//! rows of a machine run, the job's unmodelled kernel work is calibrated on that machine with
//! no defense, so that its kernel cycles per user cycle equal the recording's.
//!
//! An experiment may also fit kernel costs no source gives, each to one row, after which it
//! applies to every row and machine: Linux's hard-IRQ path (`irq_path_cycles`) and XPFO's
//! per-page cost beyond the modelled mechanisms (`xpfo_page_cycles`). They are fitted one
//! after another, in the file's order, each with those before it at their fitted values.

use super::Fit;
use crate::defense;
use crate::error::{Error, Result};
use crate::kernel::{IrqTime, Kernel, IRQ_PATH_CYCLES_ESTIMATE};
use crate::machine::{self, MachineProfile};
use crate::report::table::Table;
use crate::report::{Reproduction, Row};
use crate::sim::{Counter, Time, TimeCategory};
use crate::workload::kbuild::Make;
use crate::workload::kbuild_profile::JobProfile;
use crate::workload::run::{Runner, Window};
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    pub name: String,
    /// Always "kbuild-table" here.
    pub kind: String,
    pub title: String,
    pub source: String,
    pub tolerance_pct: f64,
    pub warmup_ms: f64,
    /// CPU time of the build to measure per row; the window is this divided by the jobs, so
    /// small and large machines see samples of the same size.
    pub window_cpu_ms: f64,
    /// Independent windows (seeds) pooled per simulation; their spread is reported as each
    /// row's sampling error.
    #[serde(default = "single")]
    pub samples: u32,
    /// Whose time a hard interrupt is (kernel::IrqTime): "task-system" (default), "tick" or
    /// "excluded"; the published kernels' accounting configuration is not known.
    #[serde(default)]
    pub irq_time: IrqTime,
    /// `build_user_cycles` first; then, optionally and each at most once, the kernel costs
    /// of `Cost`.
    pub fit: Vec<Fit>,
    pub row: Vec<RowSpec>,
    /// What-if runs of a row with some unsourced machine costs scaled, to show how much the
    /// result depends on them (reported as predictions, never compared).
    #[serde(default)]
    pub sensitivity: Vec<Sensitivity>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sensitivity {
    /// Label of the row to rerun.
    pub row: String,
    #[serde(default = "one")]
    pub interrupt_entry_scale: f64,
    #[serde(default = "one")]
    pub ipi_latency_scale: f64,
    /// Scales the fitted `xpfo_page_cycles` (0: the row as the modelled mechanisms alone
    /// give it).
    #[serde(default = "one")]
    pub xpfo_page_scale: f64,
}

fn single() -> u32 {
    1
}

fn one() -> f64 {
    1.0
}

impl Sensitivity {
    /// "with interrupt entry x2 and ...": the knobs this run turns.
    fn describe(&self) -> String {
        let knobs: Vec<String> = [
            ("interrupt entry", self.interrupt_entry_scale),
            ("IPI delivery", self.ipi_latency_scale),
            ("the fitted XPFO page cost", self.xpfo_page_scale),
        ]
        .iter()
        .filter(|(_, scale)| *scale != 1.0)
        .map(|(knob, scale)| format!("{knob} x{scale}"))
        .collect();
        if knobs.is_empty() {
            "as fitted".into()
        } else {
            format!("with {}", knobs.join(" and "))
        }
    }

    fn apply(&self, m: &MachineProfile) -> MachineProfile {
        let mut m = m.clone();
        let c = &mut m.costs;
        c.interrupt_entry_cycles =
            (c.interrupt_entry_cycles as f64 * self.interrupt_entry_scale).round() as u32;
        let l = &mut c.ipi_latency_ns;
        (l.same_core_ns, l.same_socket_ns, l.remote_socket_ns) = (
            l.same_core_ns * self.ipi_latency_scale,
            l.same_socket_ns * self.ipi_latency_scale,
            l.remote_socket_ns * self.ipi_latency_scale,
        );
        m
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowSpec {
    pub label: String,
    /// Why this row is known to miss its tolerance (see report::Row::known_miss).
    #[serde(default)]
    pub known_miss: Option<String>,
    pub machine: String,
    pub jobs: u32,
    pub defense: String,
    pub published: f64,
}

impl Experiment {
    /// The row labelled `label`; fit and sensitivity rows name rows `parse` has checked.
    fn row_named(&self, label: &str) -> &RowSpec {
        self.row
            .iter()
            .find(|r| r.label == label)
            .expect("rows named by fits and sensitivities are checked by parse")
    }
}

pub fn parse(place: &str, text: &str) -> Result<Experiment> {
    let e: Experiment =
        toml::from_str(text).map_err(|e| Error::at(place, machine::toml_message(&e, text)))?;
    let parameters: Vec<&str> = e.fit.iter().map(|f| f.parameter.as_str()).collect();
    let costs = parameters.get(1..).unwrap_or_default();
    let known = costs.iter().all(|p| Cost::named(p).is_some());
    let distinct = costs
        .iter()
        .enumerate()
        .all(|(i, p)| !costs[..i].contains(p));
    if parameters.first() != Some(&"build_user_cycles") || !known || !distinct {
        let names: Vec<&str> = Cost::ALL.iter().map(|c| c.name()).collect();
        return Err(Error::at(place, format!("[[fit]] parameters: expected \"build_user_cycles\", optionally followed by each of {names:?} at most once, got {parameters:?}")));
    }
    for f in &e.fit {
        if !e.row.iter().any(|r| r.label == f.row) {
            return Err(Error::at(
                place,
                format!("fit.row: no [[row]] labelled \"{}\"", f.row),
            ));
        }
    }
    if !(e.warmup_ms >= 0.0
        && e.warmup_ms <= 1000.0
        && e.window_cpu_ms > 0.0
        && e.window_cpu_ms <= 100_000.0)
    {
        return Err(Error::at(place, "warmup_ms, window_cpu_ms: expected 0 <= warmup_ms <= 1000 and 0 < window_cpu_ms <= 100000"));
    }
    if !(1..=16).contains(&e.samples) {
        return Err(Error::at(
            place,
            format!("samples: expected 1 to 16, got {}", e.samples),
        ));
    }
    for s in &e.sensitivity {
        if !e.row.iter().any(|r| r.label == s.row) {
            return Err(Error::at(
                place,
                format!("sensitivity.row: no [[row]] labelled \"{}\"", s.row),
            ));
        }
        if !(0.1..=100.0).contains(&s.interrupt_entry_scale)
            || !(0.1..=100.0).contains(&s.ipi_latency_scale)
            || !(0.0..=100.0).contains(&s.xpfo_page_scale)
        {
            return Err(Error::at(
                place,
                "sensitivity: expected scales between 0.1 and 100 (xpfo_page_scale: 0 to 100)",
            ));
        }
    }
    for r in &e.row {
        defense::parse_list(&r.defense)
            .map_err(|err| Error::at(place, format!("row \"{}\": {err}", r.label)))?;
        if r.jobs == 0 || r.jobs > 4096 {
            return Err(Error::at(
                place,
                format!(
                    "row \"{}\": jobs: expected 1..4096, got {}",
                    r.label, r.jobs
                ),
            ));
        }
    }
    Ok(e)
}

/// One simulated row: its samples' windows pooled.
#[derive(Clone)]
pub struct Measured {
    pub label: String,
    pub machine: MachineProfile,
    pub window: Window,
    /// User work cycles done in the window.
    pub user_work_cycles: f64,
    /// System seconds per cycle of user work in each sample on its own.
    pub per_sample: Vec<f64>,
}

impl Measured {
    /// System seconds per cycle of user work.
    pub fn system_per_user_cycle(&self) -> f64 {
        self.window.tasks.system_time().secs() / self.user_work_cycles
    }

    /// Standard error of system_per_user_cycle() from the spread of the samples, as a
    /// fraction of it; `None` with a single sample.
    pub fn sampling_error(&self) -> Option<f64> {
        let n = self.per_sample.len() as f64;
        if n < 2.0 {
            return None;
        }
        let mean = self.per_sample.iter().sum::<f64>() / n;
        let var = self
            .per_sample
            .iter()
            .map(|x| (x - mean).powi(2))
            .sum::<f64>()
            / (n - 1.0);
        Some((var / n).sqrt() / self.system_per_user_cycle())
    }
}

fn ms(v: f64) -> Time {
    Time((v * 1e9) as u64)
}

/// How much simulated time a kbuild run covers, and the kernel costs an experiment may fit
/// (BootConfig::irq_path_cycles, BootConfig::xpfo_page_cycles).
#[derive(Debug, Clone, Copy)]
pub struct Sampling {
    pub warmup_ms: f64,
    pub window_ms: f64,
    /// The first sample's seed; sample i runs with seed + i.
    pub seed: u64,
    /// Independent windows to simulate (in parallel) and pool.
    pub samples: u32,
    pub irq_path_cycles: f64,
    pub xpfo_page_cycles: f64,
    pub irq_time: IrqTime,
}

impl Default for Sampling {
    /// One window (seed 1) of 25 ms after 4 ms of warm-up (the XPFO table's 96-thread rows),
    /// precise IRQ accounting, the hard-IRQ path at its estimate, no unmodelled XPFO cost.
    fn default() -> Self {
        Sampling {
            warmup_ms: 4.0,
            window_ms: 25.0,
            seed: 1,
            samples: 1,
            irq_path_cycles: IRQ_PATH_CYCLES_ESTIMATE,
            xpfo_page_cycles: 0.0,
            irq_time: IrqTime::TaskSystem,
        }
    }
}

/// Simulates the build's steady state on `m` under `defenses`.
pub fn simulate(
    m: &MachineProfile,
    defenses: &str,
    jobs: u32,
    profile: &JobProfile,
    extra: f64,
    sampling: Sampling,
) -> Result<Measured> {
    simulate_with(m, defenses, &[], jobs, profile, extra, sampling)
}

/// simulate() with defenses from other crates available. The samples run on threads of
/// their own and are pooled in seed order, so the result does not depend on the host.
pub fn simulate_with(
    m: &MachineProfile,
    defenses: &str,
    extensions: &[defense::Extension],
    jobs: u32,
    profile: &JobProfile,
    extra: f64,
    sampling: Sampling,
) -> Result<Measured> {
    crate::workload::bounds::kbuild_jobs(m, profile, jobs)?;
    // One window of the build: its stats and the user work cycles done in it.
    let one_sample = |seed: u64| -> Result<(Window, f64)> {
        let mut k = Kernel::boot(
            m.clone(),
            defense::parse_list_with(defenses, Some(m), extensions)?,
        );
        k.config.irq_path_cycles = sampling.irq_path_cycles;
        k.config.xpfo_page_cycles = sampling.xpfo_page_cycles;
        k.config.irq_time = sampling.irq_time;
        k.recycle_frames(profile.steady_state_frames(jobs));
        // Enough jobs that make never runs dry in the window.
        let mut r = Runner::new(k, Make::program(profile.spec(extra), jobs, u64::MAX), seed);
        let window = r.run(ms(sampling.warmup_ms), ms(sampling.window_ms))?;
        if let Some(v) = r.k.violations.first() {
            return Err(Error::new(format!(
                "{defenses} on {}: security oracle violation: {}",
                m.name, v.what
            )));
        }
        let user_work_cycles =
            window.tasks.time(TimeCategory::User).secs() * m.cpu.frequency_ghz * 1e9;
        if user_work_cycles <= 0.0 {
            return Err(Error::new(format!(
                "{defenses} on {}: no user work in the window; lengthen window_ms",
                m.name
            )));
        }
        Ok((window, user_work_cycles))
    };
    let one_sample = &one_sample;
    let samples: Vec<Result<(Window, f64)>> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..sampling.samples.max(1) as u64)
            .map(|i| s.spawn(move || one_sample(sampling.seed + i)))
            .collect();
        runs.into_iter()
            .map(|run| run.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut pooled = Measured {
        label: String::new(),
        machine: m.clone(),
        window: Window::default(),
        user_work_cycles: 0.0,
        per_sample: vec![],
    };
    for sample in samples {
        let (window, user_work_cycles) = sample?;
        pooled
            .per_sample
            .push(window.tasks.system_time().secs() / user_work_cycles);
        pooled.window.merge(&window);
        pooled.user_work_cycles += user_work_cycles;
    }
    Ok(pooled)
}

/// Extra kernel cycles per "other" syscall that make the unhardened build's kernel work
/// per user cycle equal the recording's, on machine `m`.
pub fn calibrate(
    m: &MachineProfile,
    jobs: u32,
    profile: &JobProfile,
    sampling: Sampling,
) -> Result<(f64, String)> {
    let base = simulate(m, "none", jobs, profile, 0.0, sampling)?;
    let modelled =
        base.window.tasks.system_time().secs() * m.cpu.frequency_ghz * 1e9 / base.user_work_cycles;
    let target = profile.system_cycles() / profile.user_cycles();
    let spec = profile.spec(0.0);
    let other_per_user_cycle = spec.other_syscalls / spec.user_cycles;
    let extra = ((target - modelled) / other_per_user_cycle).max(0.0);
    let note = format!(
        "{}: modelled kernel paths give {:.3} kernel cycles per user cycle, the recording {:.3}; the {:.0} other syscalls per job carry {:.0} extra cycles each",
        m.name, modelled, target, spec.other_syscalls, extra
    );
    Ok((extra, note))
}

/// A kernel cost no source gives, which an experiment may fit to one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cost {
    /// BootConfig::irq_path_cycles.
    IrqPath,
    /// BootConfig::xpfo_page_cycles.
    XpfoPage,
}

impl Cost {
    pub const ALL: [Cost; 2] = [Cost::IrqPath, Cost::XpfoPage];

    /// The name a `[[fit]]` table gives.
    pub fn name(self) -> &'static str {
        match self {
            Cost::IrqPath => "irq_path_cycles",
            Cost::XpfoPage => "xpfo_page_cycles",
        }
    }

    fn named(name: &str) -> Option<Cost> {
        Cost::ALL.into_iter().find(|c| c.name() == name)
    }

    /// What the fitted value stands for, in the report.
    fn meaning(self) -> String {
        match self {
            Cost::IrqPath => format!("Linux's hard-IRQ path beyond exception entry, every machine; estimate before fitting {IRQ_PATH_CYCLES_ESTIMATE:.0}"),
            Cost::XpfoPage => "kernel cycles per XPFO user page that no modelled mechanism accounts for, every machine and flush policy; 0 before fitting".into(),
        }
    }

    /// Two starting points for the secant search (the row's time grows almost linearly with
    /// either cost) and the largest credible value.
    fn search(self) -> (f64, f64, f64) {
        match self {
            Cost::IrqPath => (
                IRQ_PATH_CYCLES_ESTIMATE,
                4.0 * IRQ_PATH_CYCLES_ESTIMATE,
                100.0 * IRQ_PATH_CYCLES_ESTIMATE,
            ),
            Cost::XpfoPage => (0.0, 4000.0, 1e6),
        }
    }

    fn set(self, s: &mut Sampling, v: f64) {
        match self {
            Cost::IrqPath => s.irq_path_cycles = v,
            Cost::XpfoPage => s.xpfo_page_cycles = v,
        }
    }
}

/// Simulates rows, calibrating each (machine, jobs, IRQ path cost) once.
struct Rows<'a> {
    e: &'a Experiment,
    profile: JobProfile,
    machines: BTreeMap<String, MachineProfile>,
    /// The fittable costs at their current values (an IRQ path cost and an XPFO page cost).
    costs: Sampling,
    /// (machine, jobs, IRQ path cost bits) -> extra cycles per other syscall, and its note.
    calibration: BTreeMap<(String, u32, u64), (f64, String)>,
    /// (row, IRQ path cost bits, XPFO page cost bits) -> the row simulated at those costs,
    /// so the fits and the final table never simulate the same thing twice.
    simulated: BTreeMap<(String, u64, u64), Measured>,
}

impl Rows<'_> {
    fn sampling(&self, r: &RowSpec) -> Sampling {
        Sampling {
            warmup_ms: self.e.warmup_ms,
            window_ms: self.e.window_cpu_ms / r.jobs as f64,
            seed: 1,
            samples: self.e.samples,
            irq_time: self.e.irq_time,
            ..self.costs
        }
    }

    /// Extra cycles per other syscall for `r`'s machine and jobs at the current IRQ path
    /// cost (the calibration runs without defenses, so no other cost enters it).
    fn extra(&mut self, r: &RowSpec, m: &MachineProfile) -> Result<f64> {
        let sampling = self.sampling(r);
        let key = (
            r.machine.clone(),
            r.jobs,
            sampling.irq_path_cycles.to_bits(),
        );
        if !self.calibration.contains_key(&key) {
            let calibrated = calibrate(m, r.jobs, &self.profile, sampling)?;
            self.calibration.insert(key.clone(), calibrated);
        }
        Ok(self.calibration[&key].0)
    }

    fn measure(&mut self, r: &RowSpec, m: &MachineProfile) -> Result<Measured> {
        let c = &self.costs;
        // A row without XPFO does not depend on XPFO's cost.
        let xpfo_page_cycles = if r.defense.contains("xpfo") {
            c.xpfo_page_cycles
        } else {
            0.0
        };
        let key = (
            r.label.clone(),
            c.irq_path_cycles.to_bits(),
            xpfo_page_cycles.to_bits(),
        );
        if let Some(done) = self.simulated.get(&key) {
            return Ok(done.clone());
        }
        let extra = self.extra(r, m)?;
        let sampling = self.sampling(r);
        let mut one = simulate(m, &r.defense, r.jobs, &self.profile, extra, sampling)?;
        one.label = r.label.clone();
        self.simulated.insert(key, one.clone());
        Ok(one)
    }

    fn row(&mut self, label: &str) -> Result<Measured> {
        let r = self.e.row_named(label).clone();
        let m = self.machines[&r.machine].clone();
        self.measure(&r, &m)
    }

    /// The value of `cost` at which `label`'s row, scaled by the build's user work (fitted to
    /// `base` at the current costs), gives its published figure: secant steps on a cost the
    /// row's time grows with almost linearly.
    fn fit(&mut self, cost: Cost, label: &str, base: &str) -> Result<f64> {
        let build_user_cycles =
            self.e.row_named(base).published / self.row(base)?.system_per_user_cycle();
        let published = self.e.row_named(label).published;
        let error = |rows: &mut Self, v: f64| -> Result<f64> {
            cost.set(&mut rows.costs, v);
            Ok(rows.row(label)?.system_per_user_cycle() * build_user_cycles / published - 1.0)
        };
        let (mut a, mut b, max) = cost.search();
        let (mut fa, mut fb) = (error(self, a)?, error(self, b)?);
        // At least one secant step, so the fitted value never is a starting point.
        for step in 0..8 {
            if (step > 0 && fb.abs() < 0.002) || fb == fa {
                break;
            }
            let next = (b - fb * (b - a) / (fb - fa)).clamp(0.0, max).round();
            (a, fa) = (b, fb);
            b = next;
            fb = error(self, b)?;
        }
        cost.set(&mut self.costs, b);
        Ok(b)
    }
}

pub fn run(e: &Experiment) -> Result<Reproduction> {
    let mut machines = BTreeMap::new();
    for r in &e.row {
        if !machines.contains_key(&r.machine) {
            machines.insert(r.machine.clone(), machine::load(&r.machine)?);
        }
    }
    let mut rows = Rows {
        e,
        profile: JobProfile::builtin(),
        machines,
        costs: Sampling::default(),
        calibration: BTreeMap::new(),
        simulated: BTreeMap::new(),
    };
    let base_label = e.fit[0].row.clone();
    let base_published = e.row_named(&base_label).published;
    let mut fitted = vec![];
    for f in &e.fit[1..] {
        let cost = Cost::named(&f.parameter).expect("parse checked the fitted parameters");
        let v = rows.fit(cost, &f.row, &base_label)?;
        fitted.push(format!(
            "{} = {v:.0} ({}), fitted to \"{}\"",
            cost.name(),
            cost.meaning(),
            f.row
        ));
    }
    let mut measured = vec![];
    for r in &e.row {
        let m = rows.machines[&r.machine].clone();
        measured.push(rows.measure(r, &m)?);
    }
    let base_index = e.row.iter().position(|r| r.label == base_label).unwrap();
    let build_user_cycles = base_published / measured[base_index].system_per_user_cycle();
    let jobs_in_build = build_user_cycles / rows.profile.user_cycles();
    fitted.insert(0, format!("build_user_cycles = {build_user_cycles:.4e} (the build's total user work, {jobs_in_build:.0} compile jobs of the recorded kind), fitted to \"{base_label}\" = {base_published} s"));
    let compared: Vec<Row> = e
        .row
        .iter()
        .zip(&measured)
        .map(|(r, m)| {
            let mut row = Row::compared(
                &r.label,
                "s",
                r.published,
                m.system_per_user_cycle() * build_user_cycles,
                e.tolerance_pct,
            );
            row.known_miss = r.known_miss.clone();
            row.sampling_pct = m.sampling_error().map(|e| 100.0 * e);
            row
        })
        .collect();
    let mut breakdowns = vec![ratios(&e.title, &e.row, &compared)];
    breakdowns.extend(breakdown(
        &e.title,
        &measured,
        build_user_cycles,
        rows.profile.user_cycles(),
    ));
    let mut predictions = vec![];
    for sens in &e.sensitivity {
        let r = e.row_named(&sens.row).clone();
        let extra = rows.extra(&r, &rows.machines[&r.machine].clone())?;
        let m = sens.apply(&rows.machines[&r.machine]);
        let mut sampling = rows.sampling(&r);
        sampling.xpfo_page_cycles *= sens.xpfo_page_scale;
        let one = simulate(&m, &r.defense, r.jobs, &rows.profile, extra, sampling)?;
        predictions.push(Row::predicted(
            &format!("what if: {} {}", r.label, sens.describe()),
            "s",
            one.system_per_user_cycle() * build_user_cycles,
        ));
    }
    let irq_bits = rows.costs.irq_path_cycles.to_bits();
    let mut notes: Vec<String> = rows
        .calibration
        .iter()
        .filter(|(k, _)| k.2 == irq_bits)
        .map(|(_, (_, note))| note.clone())
        .collect();
    notes.push(EVENT_COLUMNS.to_string());
    notes.push(format!("each row simulates {} ms of warm-up, then {} CPU-ms of the build's steady state (window = that / jobs), and scales by the build's user work; {} independent windows (seeds) are pooled per row, and sampling ± is the standard error of their mean", e.warmup_ms, e.window_cpu_ms, e.samples));
    notes.push("IPI send/delivery and interrupt-entry costs in the machine profiles are unsourced estimates (no published measurement found); see the profiles' comments".into());
    Ok(Reproduction {
        experiment: e.name.clone(),
        source: e.source.clone(),
        rows: compared,
        fitted_parameters: fitted.len() as u32,
        fitted,
        predictions,
        breakdowns,
        notes,
    })
}

const EVENT_COLUMNS: &str = "events: local one/all = nr_tlb_local_flush_one/all, remote received = nr_tlb_remote_flush_received, pending run = XPFO's deferred full flushes executed at a context switch, walks = page walks (refills included), splits = direct-map splits in the whole window";

/// Each row's system time as a multiple of its machine's baseline (the machine's first row),
/// published and simulated: the form in which the patch postings quote their results.
fn ratios(title: &str, specs: &[RowSpec], rows: &[Row]) -> Table {
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
        TimeCategory::TlbInvalidate,
        TimeCategory::DirectMap,
        TimeCategory::IpiSend,
        TimeCategory::IpiWait,
        TimeCategory::IpiHandler,
        TimeCategory::SharedLine,
        TimeCategory::Fitted,
    ];
    let events = [
        ("switches", Counter::ContextSwitches),
        ("xpfo flushes", Counter::XpfoFlushes),
        ("IPIs sent", Counter::IpisSent),
        ("to idle", Counter::IpisToIdle),
        ("remote received", Counter::NrTlbRemoteFlushReceived),
        ("local one", Counter::NrTlbLocalFlushOne),
        ("local all", Counter::NrTlbLocalFlushAll),
        ("pending run", Counter::XpfoPendingExecuted),
        ("walks", Counter::PageWalks),
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
                .map(|&(_, c)| format!("{:.0}", all.counter(c) as f64 / jobs_in_window)),
        );
        row.push(format!("{}", all.counter(Counter::DirectMapSplits)));
        counts.push(row);
    }
    vec![time, counts]
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROWS: &str = r#"
name = "t"
kind = "kbuild-table"
title = "t"
source = "t"
tolerance_pct = 15.0
warmup_ms = 1.0
window_cpu_ms = 10.0
[[row]]
label = "base"
machine = "ivybridge-i5-3550"
jobs = 4
defense = "pti:linux"
published = 600.0
[[row]]
label = "xpfo"
machine = "ivybridge-i5-3550"
jobs = 4
defense = "pti:linux,xpfo:immediate"
published = 1600.0
"#;

    fn with_fits(fits: &[(&str, &str)]) -> String {
        let mut text = ROWS.to_string();
        for (parameter, row) in fits {
            text += &format!("[[fit]]\nparameter = \"{parameter}\"\nrow = \"{row}\"\n");
        }
        text
    }

    #[test]
    fn build_user_cycles_comes_first_and_kernel_costs_may_follow() {
        assert_eq!(
            parse("t.toml", &with_fits(&[("build_user_cycles", "base")]))
                .unwrap()
                .fit
                .len(),
            1
        );
        assert_eq!(
            parse(
                "t.toml",
                &with_fits(&[("build_user_cycles", "base"), ("irq_path_cycles", "xpfo")])
            )
            .unwrap()
            .fit
            .len(),
            2
        );
        let both = [
            ("build_user_cycles", "base"),
            ("xpfo_page_cycles", "xpfo"),
            ("irq_path_cycles", "xpfo"),
        ];
        assert_eq!(parse("t.toml", &with_fits(&both)).unwrap().fit.len(), 3);
        for bad in [
            vec![("irq_path_cycles", "xpfo")],
            vec![],
            vec![("build_user_cycles", "base"), ("ipi_latency", "xpfo")],
            vec![("build_user_cycles", "nope")],
            vec![
                ("build_user_cycles", "base"),
                ("xpfo_page_cycles", "xpfo"),
                ("xpfo_page_cycles", "xpfo"),
            ],
            vec![("build_user_cycles", "base"), ("build_user_cycles", "base")],
        ] {
            let err = parse("t.toml", &with_fits(&bad)).unwrap_err().to_string();
            assert!(
                err.starts_with("t.toml") && !err.contains('\n'),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn samples_pool_the_windows_of_consecutive_seeds() {
        let m = machine::load("ivybridge-i5-3550").unwrap();
        let profile = JobProfile::builtin();
        let sampling = |seed, samples| Sampling {
            warmup_ms: 1.0,
            window_ms: 20.0,
            seed,
            samples,
            ..Sampling::default()
        };
        let run = |seed, samples| {
            simulate(&m, "pti:linux", 4, &profile, 0.0, sampling(seed, samples)).unwrap()
        };
        let (a, b, both) = (run(7, 1), run(8, 1), run(7, 2));
        assert_eq!(a.sampling_error(), None);
        assert_eq!(both.per_sample, [a.per_sample[0], b.per_sample[0]]);
        assert_eq!(
            both.window.tasks.system_time(),
            a.window.tasks.system_time() + b.window.tasks.system_time()
        );
        assert_eq!(
            both.user_work_cycles,
            a.user_work_cycles + b.user_work_cycles
        );
        // Two different windows differ, and the standard error of two values is half their
        // distance.
        let (x, y) = (a.per_sample[0], b.per_sample[0]);
        assert_ne!(x, y);
        let se = both.sampling_error().unwrap() * both.system_per_user_cycle();
        assert!(
            (se - (x - y).abs() / 2.0).abs() < 1e-9 * se,
            "{se} vs {x} {y}"
        );
        let bad = parse(
            "t.toml",
            &format!(
                "samples = 0\n{}",
                with_fits(&[("build_user_cycles", "base")])
            ),
        );
        assert!(bad
            .unwrap_err()
            .to_string()
            .contains("samples: expected 1 to 16"));
        let bad = parse(
            "t.toml",
            &format!(
                "irq_time = \"sometimes\"\n{}",
                with_fits(&[("build_user_cycles", "base")])
            ),
        );
        let e = bad.unwrap_err().to_string();
        assert!(
            e.starts_with(
                "t.toml: line 1: unknown variant `sometimes`, expected one of `task-system`, `tick`, `excluded`"
            ),
            "{e}"
        );
    }
}
