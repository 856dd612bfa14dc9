//! KVM CR0.WP tables (seed 004): `ssdd` in a KERNEXEC guest under each KVM MMU and patch
//! variant, run time in seconds, published vs simulated, with a `perf kvm stat`-like
//! breakdown per ssdd step. The experiment file's format is kvm_spec.rs.

use super::kvm_spec::{prediction_params, Experiment, RowSpec, GAP, TOGGLES, UNLOAD, WORK};
use super::Fit;
use crate::error::{Error, Result};
use crate::machine::{self, MachineProfile};
use crate::params::{Overrides, Params};
use crate::report::table::Table;
use crate::report::{Reproduction, Row};
use crate::virt::params::{GuestParams, KvmCosts};
use crate::virt::vmx::ExitReason;
use crate::virt::{run_ssdd, MmuFlavour, SsddConfig, SsddResult, Variant};

struct Runner<'a> {
    e: &'a Experiment,
    params: &'a Params,
    work: f64,
    toggles: f64,
    unload: f64,
}

impl<'a> Runner<'a> {
    fn run(&self, m: &MachineProfile, mmu: &str, variant: &str, vcpus: u64) -> Result<SsddResult> {
        let mut cfg = SsddConfig::new(
            MmuFlavour::parse(mmu)?,
            Variant::parse(variant)?,
            self.params,
        );
        cfg.vcpus = vcpus;
        cfg.warmup_steps = self.e.warmup_steps;
        cfg.sample_steps = self.e.sample_steps;
        cfg.guest.guest_work_cycles_per_step = self.work;
        cfg.guest.wp_pairs_other_per_step = self.toggles;
        cfg.costs.unload_cycles = self.unload;
        run_ssdd(m, &cfg)
    }

    fn row_spec(&self, fits: &[Fit], param: &str) -> Option<&RowSpec> {
        let f = fits.iter().find(|f| f.parameter == param)?;
        self.e.row.iter().find(|r| r.label == f.row)
    }

    /// This runner with gap parameter `param` at `v`.
    fn with_gap(&self, param: &str, v: f64) -> Runner<'a> {
        let mut r = Runner { ..*self };
        r.set_gap(param, v);
        r
    }

    fn set_gap(&mut self, param: &str, v: f64) {
        if param == TOGGLES {
            self.toggles = v;
        } else {
            self.unload = v;
        }
    }
}

/// Fits the gap parameter (extra toggles, or the unload cost of each toggle) to the
/// difference between its row and the work row (the guest work cancels there), then the
/// guest work to the work row: one parameter per row.
fn fit(r: &mut Runner, m: &MachineProfile, fits: &[Fit]) -> Result<Vec<String>> {
    let mut fitted = vec![];
    let vcpus = r.e.vcpus;
    let work_row = r.row_spec(fits, WORK).cloned();
    let gap_fit = fits.iter().find(|f| GAP.contains(&f.parameter.as_str()));
    if let (Some(gf), Some(wr)) = (gap_fit, &work_row) {
        let param = gf.parameter.as_str();
        let tr = r.row_spec(fits, param).cloned().expect("checked at parse");
        let gap = |r: &Runner, v: f64| -> Result<f64> {
            let runner = r.with_gap(param, v);
            Ok(runner.run(m, &tr.mmu, &tr.variant, vcpus)?.seconds
                - runner.run(m, &wr.mmu, &wr.variant, vcpus)?.seconds)
        };
        let want = tr.published - wr.published;
        let [a, b] = gf.start_pair("[[fit]]", [0.0, 4.0])?;
        let (g0, g1) = (gap(r, a)?, gap(r, b)?);
        let slope = (g1 - g0) / (b - a);
        let mut v = (a + (want - g0) / slope).max(0.0);
        // One secant step from there: the cost per unit is nearly constant.
        let gv = gap(r, v)?;
        v = (v + (want - gv) / slope).max(0.0);
        r.set_gap(param, v);
        fitted.push(if param == TOGGLES {
            format!(
                "{TOGGLES} = {v:.3} toggle pairs per step (to \"{}\" minus \"{}\")",
                tr.label, wr.label
            )
        } else {
            format!(
                "{UNLOAD} = {v:.0} cycles ({:.2} us) per root unload (to \"{}\" minus \"{}\")",
                v / m.cpu.frequency_ghz / 1e3,
                tr.label,
                wr.label
            )
        });
    }
    if let Some(wr) = work_row {
        let base = Runner { work: 0.0, ..*r }.run(m, &wr.mmu, &wr.variant, vcpus)?;
        let work = (wr.published - base.seconds) * m.cpu.frequency_ghz * 1e9 / base.steps as f64;
        r.work = work.max(0.0);
        fitted.push(format!(
            "{WORK} = {:.0} cycles ({:.2} us) per step (to \"{}\")",
            r.work,
            r.work / m.cpu.frequency_ghz / 1e3,
            wr.label
        ));
    }
    Ok(fitted)
}

pub fn run(e: &Experiment, overrides: &Overrides) -> Result<Reproduction> {
    let m = overrides.apply_machine(&machine::load(&e.machine)?)?;
    let mut params = Params::linux();
    overrides.apply(&mut params)?;
    let guest = GuestParams::from(&params);
    let mut r = Runner {
        e,
        params: &params,
        work: guest.guest_work_cycles_per_step,
        toggles: guest.wp_pairs_other_per_step,
        unload: KvmCosts::from(&params).unload_cycles,
    };
    // A parameter the command line sets is not fitted (the run is a what-if).
    let set = |path: &str| overrides.software.iter().any(|(p, _)| p == path);
    let fits: Vec<Fit> = e
        .fit
        .iter()
        .filter(|f| !set(&f.parameter))
        .cloned()
        .collect();
    let mut fitted = fit(&mut r, &m, &fits)?;
    let mut fitted_rows: Vec<&str> = fits.iter().map(|f| f.row.as_str()).collect();
    if let Some(row) = &e.vcpus_chosen_for {
        fitted.push(format!(
            "vcpus = {}: a choice no source gives, made to match \"{row}\"",
            e.vcpus
        ));
        fitted_rows.push(row);
    }
    let mut rows = vec![];
    let mut breakdown = breakdown_table(&format!(
        "\nper ssdd step, {} ({} vCPU{}; the busiest vCPU runs {} pairs):",
        m.name,
        e.vcpus,
        if e.vcpus == 1 { "" } else { "s" },
        10u64.div_ceil(e.vcpus)
    ));
    let mut time = time_table();
    // Every row and prediction is one independent simulation: all of them on every core,
    // then the tables in order.
    let machines: Vec<MachineProfile> = e
        .prediction
        .iter()
        .map(|p| match &p.machine {
            Some(name) => overrides.apply_machine(&machine::load(name)?),
            None => Ok(m.clone()),
        })
        .collect::<Result<_>>()?;
    let prediction_params: Vec<Params> = e
        .prediction
        .iter()
        .map(|p| prediction_params(&e.header.name, p, r.params))
        .collect::<Result<_>>()?;
    let runs = crate::sim::parallel::map_indices(e.row.len() + e.prediction.len(), |i| {
        match i.checked_sub(e.row.len()) {
            None => {
                let spec = &e.row[i];
                r.run(&m, &spec.mmu, &spec.variant, e.vcpus)
            }
            Some(j) => {
                let p = &e.prediction[j];
                let pr = Runner {
                    params: &prediction_params[j],
                    ..r
                };
                pr.run(&machines[j], &p.mmu, &p.variant, p.vcpus.unwrap_or(e.vcpus))
            }
        }
    });
    let mut runs = runs.into_iter();
    for spec in &e.row {
        let res = runs.next().expect("a run per row")?;
        let mut row = Row::compared(
            &spec.label,
            "s",
            spec.published,
            res.seconds,
            e.tolerance_pct,
        );
        spec.judging.mark(&mut row);
        row.fitted = fitted_rows.contains(&spec.label.as_str());
        rows.push(row);
        push_breakdown(&mut breakdown, &mut time, &spec.label, &res, &m);
        check_oracle(&spec.label, &res)?;
    }
    let (kernel_guest, mut notes) = super::kvm_kernel_guest::table(e, &m, &params)?;
    notes.insert(0, format!(
        "ssdd 10 50000 with early-2023 rt-tests runs 10 pairs x 10000 steps (getopt_long ignores positional arguments); {} guest steps sampled after {} warm-up steps and scaled",
        e.sample_steps, e.warmup_steps
    ));
    let mut predictions = vec![];
    for (p, pm) in e.prediction.iter().zip(&machines) {
        let res = runs.next().expect("a run per prediction")?;
        predictions.push(Row::predicted(&p.label, "s", res.seconds));
        push_breakdown(&mut breakdown, &mut time, &p.label, &res, pm);
    }
    Ok(Reproduction {
        rows,
        fitted_parameters: fitted.len() as u32,
        fitted,
        predictions,
        breakdowns: vec![breakdown, time, kernel_guest],
        notes,
        params: Some(params.to_json()),
        ..e.header.reproduction()
    })
}

fn check_oracle(label: &str, res: &SsddResult) -> Result<()> {
    match res.violations.first() {
        Some(v) => Err(Error::new(format!("{label}: model fault: {v}"))),
        None => Ok(()),
    }
}

fn breakdown_table(title: &str) -> Table {
    let mut h = vec!["row"];
    h.extend(ExitReason::ALL.iter().map(|r| r.name()));
    h.extend([
        "CR0 writes",
        "roots freed",
        "roots built",
        "EPT viol.",
        "shadow #PF",
        "gPT writes",
        "KVM sw walks",
        "walks",
        "refs/walk",
    ]);
    Table::new(title, &h)
}

fn time_table() -> Table {
    let mut h = vec!["row", "us/step"];
    h.extend(
        crate::virt::ssdd::Breakdown::default()
            .named()
            .map(|(n, _)| n),
    );
    Table::new("\ntime per ssdd step by category, us:", &h)
}

fn push_breakdown(b: &mut Table, t: &mut Table, label: &str, r: &SsddResult, m: &MachineProfile) {
    let n = r.measured_steps as f64;
    let per = |x: u64| format!("{:.2}", x as f64 / n);
    let mut row = vec![label.to_string()];
    row.extend(r.counts.exits.iter().map(|&x| per(x)));
    row.extend([
        per(r.counts.cr0_writes),
        per(r.mmu.roots_freed),
        per(r.mmu.roots_built),
        per(r.counts.ept_violations),
        per(r.counts.shadow_pf),
        per(r.counts.pt_write_faults),
        per(r.counts.sw_walks),
        per(r.counts.walks),
        format!(
            "{:.1}",
            r.counts.walk_refs as f64 / r.counts.walks.max(1) as f64
        ),
    ]);
    b.push(row);
    let us = |c: f64| format!("{:.2}", c / m.cpu.frequency_ghz / 1e3);
    let mut row = vec![label.to_string(), us(r.per_step.total())];
    row.extend(r.per_step.named().map(|(_, c)| us(c)));
    t.push(row);
}
