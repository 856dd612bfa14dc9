//! Simulating an experiment's rows and fitting its parameters. kbuild_run caches every
//! simulation by what it depends on, so the fits and the final table never simulate the
//! same thing twice.

use super::{Experiment, RowSpec};
use crate::defense::registry;
use crate::error::{Error, Result};
use crate::experiment::Fit;
use crate::machine::MachineProfile;
use crate::params::{Params, Provenance};
use crate::workload::kbuild_profile::JobProfile;
use crate::workload::kbuild_run::{
    kernel_share, kernel_share_note, simulate, standard_error, Measured, Sampling,
};
use std::collections::BTreeMap;

/// The values of the parameters a simulation depends on.
type Fingerprint = Vec<(&'static str, String)>;

pub(super) struct Rows<'a> {
    e: &'a Experiment,
    pub profile: JobProfile,
    pub machines: BTreeMap<String, MachineProfile>,
    /// The parameters at their current values (fits change them as they go).
    pub params: Params,
    /// (machine, jobs, kernel parameters) -> how much of the recorded job's kernel time the
    /// unhardened rows' modelled paths account for.
    kernel_share: BTreeMap<(String, u32, Fingerprint), (String, f64)>,
}

/// Parameters of the kernel and the workloads: what a run with no defense depends on.
fn kernel_only(path: &str) -> bool {
    registry::param_applies(path, &[])
}

impl<'a> Rows<'a> {
    pub fn new(
        e: &'a Experiment,
        profile: JobProfile,
        machines: BTreeMap<String, MachineProfile>,
        params: Params,
    ) -> Rows<'a> {
        Rows {
            e,
            profile,
            machines,
            params,
            kernel_share: BTreeMap::new(),
        }
    }

    pub fn sampling(&self, r: &RowSpec) -> Sampling {
        Sampling {
            warmup_ms: self.e.warmup_ms,
            window_ms: self.e.window_cpu_ms / r.jobs as f64,
            seed: 1,
            samples: self.e.samples,
        }
    }

    /// For each machine's baseline row at the current kernel parameters: the modelled
    /// kernel work against the recording's.
    pub fn kernel_share_notes(&self) -> Vec<String> {
        let now = self.params.fingerprint(kernel_only);
        self.kernel_share
            .iter()
            .filter(|(k, _)| k.2 == now)
            .map(|(_, (note, _))| note.clone())
            .collect()
    }

    /// Each machine's share of the recorded job's kernel time that its baseline row's
    /// modelled paths give, at the current kernel parameters.
    pub fn kernel_shares(&self) -> BTreeMap<String, f64> {
        let now = self.params.fingerprint(kernel_only);
        self.kernel_share
            .iter()
            .filter(|(k, _)| k.2 == now)
            .map(|(k, (_, share))| (k.0.clone(), *share))
            .collect()
    }

    pub fn measure(&mut self, r: &RowSpec) -> Result<Measured> {
        let m = &self.machines[&r.machine];
        let mut one = simulate(
            m,
            &r.defense,
            r.jobs,
            &self.profile,
            self.sampling(r),
            &self.params,
        )?;
        one.label = r.label.clone();
        // The machine's baseline (its first row): how much of the recorded job's kernel
        // time the modelled paths give there.
        let baseline = self.e.row.iter().find(|b| b.machine == r.machine);
        if baseline.is_some_and(|b| b.label == r.label) {
            let key = (
                r.machine.clone(),
                r.jobs,
                self.params.fingerprint(kernel_only),
            );
            let note = kernel_share_note(&one, &self.profile, &r.defense);
            self.kernel_share
                .insert(key, (note, kernel_share(&one, &self.profile)));
        }
        Ok(one)
    }

    fn row(&mut self, label: &str) -> Result<Measured> {
        let r = self.e.row_named(label).clone();
        self.measure(&r)
    }

    /// The value of `f.parameter` at which `f.row`, scaled by the build's user work (fitted
    /// to `base` at the current parameters), gives its published figure: secant steps on a
    /// parameter the row's time grows with almost linearly, from `f.start` (or the current
    /// value and four times it). A cost charged per counted event may start from one value:
    /// its first step is Newton's, the slope being the events counted there (each adds the
    /// cost once), which saves a simulation. Returns the value and, when the samples and
    /// the last step allow it, its standard error (sampling_error_of_fit).
    pub fn fit(&mut self, f: &Fit, base: &str) -> Result<(f64, Option<f64>)> {
        let build_user_cycles =
            self.e.row_named(base).published / self.row(base)?.system_per_user_cycle();
        let published = self.e.row_named(&f.row).published;
        let path = f.parameter.as_str();
        let decl = self.params.get(path).map(|p| p.decl);
        let max = decl.map_or(f64::MAX, |d| d.range.1);
        let fitted = || Provenance::Fitted {
            experiment: self.e.header.name.clone(),
            row: f.row.clone(),
        };
        // A mechanism row is fitted to its added cost: its published ratio to its own
        // baseline, applied to that baseline as simulated, so the baseline's own error is
        // not absorbed into the mechanism's parameter.
        let baseline = self.e.row_named(&f.row).judging.baseline.clone();
        let target = |rows: &mut Self| -> Result<f64> {
            Ok(match &baseline {
                Some(b) => {
                    let ratio = published / rows.e.row_named(b).published;
                    rows.row(b)?.system_per_user_cycle() * build_user_cycles * ratio
                }
                None => published,
            })
        };
        let error = |rows: &mut Self, v: f64| -> Result<f64> {
            rows.params.set_num("[[fit]]", path, v, fitted())?;
            let t = target(rows)?;
            Ok(rows.row(&f.row)?.system_per_user_cycle() * build_user_cycles / t - 1.0)
        };
        let starts = f.start.clone().unwrap_or_else(|| {
            let now = self.params.num(path);
            vec![now, 4.0 * now]
        });
        let mut a = starts[0];
        let mut fa = error(self, a)?;
        let (mut b, newton) = match starts.get(1) {
            Some(&b) => (b, false),
            None => {
                let counter = decl.and_then(|d| d.per_event).ok_or_else(|| {
                    Error::new(format!(
                        "[[fit]] {path}: one starting value needs a cost charged per counted event; give start = [a, b]"
                    ))
                })?;
                let m = self.row(&f.row)?;
                let events = m.window.tasks.owned(registry::counter(counter)) as f64;
                let seconds_per_cycle = events / (m.machine.cpu.frequency_ghz * 1e9);
                let slope =
                    seconds_per_cycle / m.user_work_cycles * build_user_cycles / target(self)?;
                if slope <= 0.0 {
                    return Err(Error::new(format!(
                        "[[fit]] {path}: \"{}\" counted no {counter} events at {a}; give start = [a, b]",
                        f.row
                    )));
                }
                ((a - fa / slope).clamp(0.0, max).round(), true)
            }
        };
        let mut fb = error(self, b)?;
        // At least one step (secant or Newton), so the fitted value never is a starting point.
        for step in 0..8 {
            if ((newton || step > 0) && fb.abs() < 0.002) || fb == fa {
                break;
            }
            let next = (b - fb * (b - a) / (fb - fa)).clamp(0.0, max).round();
            (a, fa) = (b, fb);
            b = next;
            fb = error(self, b)?;
        }
        self.params.set_num("[[fit]]", path, b, fitted())?;
        // The row's error grows by (fb - fa) / (b - a) per unit of the parameter near b.
        let slope = (b != a).then(|| (fb - fa) / (b - a));
        let error = match slope {
            Some(slope) => self.sampling_error_of_fit(f, base, b, slope)?,
            None => None,
        };
        Ok((b, error))
    }

    /// How far `f`'s fitted value `v` moves with the sampling (per_seed_standard_error).
    fn sampling_error_of_fit(
        &mut self,
        f: &Fit,
        base: &str,
        v: f64,
        slope: f64,
    ) -> Result<Option<f64>> {
        // Against the row's own baseline where it has one (the fit's target), else the
        // build-size row.
        let against = self.e.row_named(&f.row).judging.baseline.clone();
        let against = against.as_deref().unwrap_or(base);
        let (row, base_row) = (self.row(&f.row)?, self.row(against)?);
        let scale = self.e.row_named(against).published / self.e.row_named(&f.row).published;
        Ok(per_seed_standard_error(
            &row.sample_ratios(),
            &base_row.sample_ratios(),
            scale,
            v,
            slope,
        ))
    }
}

/// Each seed's windows fit on their own: the fitted row's system time per user cycle
/// `row[i]` against its baseline's `base[i]` (scaled by `scale`, the two rows' published
/// ratio) misses by `row[i] / base[i] * scale - 1`, which one linear step of `slope` (the
/// miss per unit of the parameter) takes from `v`; the standard error of those values.
/// The rows run the same seeds, so where a seed's build weighs on both rows alike, that
/// part cancels. None with fewer than two seeds or no slope.
pub(super) fn per_seed_standard_error(
    row: &[f64],
    base: &[f64],
    scale: f64,
    v: f64,
    slope: f64,
) -> Option<f64> {
    if slope == 0.0 || !slope.is_finite() {
        return None;
    }
    let values: Vec<f64> = row
        .iter()
        .zip(base)
        .map(|(r, b)| v - (r / b * scale - 1.0) / slope)
        .collect();
    standard_error(&values)
}
