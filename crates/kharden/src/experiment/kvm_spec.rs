//! The kvm-table experiment file (experiments/kvm-*.toml): its rows, predictions and fits,
//! parsed and checked. The runner (kvm_table.rs) and the kernel-model second opinion
//! (kvm_kernel_guest.rs) both read it.

use super::file::Header;
use super::Fit;
use crate::error::{Error, Result};
use crate::params::{Params, Provenance};
use crate::report::Judging;
use crate::virt::{MmuFlavour, Variant};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    pub header: Header,
    pub machine: String,
    pub vcpus: u64,
    /// The row the vCPU count was chosen to match, where no source gives it: the choice is
    /// a fit of that row (counted among the fitted parameters, the row never a prediction).
    #[serde(default)]
    pub vcpus_chosen_for: Option<String>,
    pub tolerance_pct: f64,
    pub warmup_steps: u64,
    pub sample_steps: u64,
    /// `guest_work_cycles_per_step`, and one of `wp_pairs_other_per_step` or
    /// `kvm.unload_cycles` (the cost a toggle adds without the patch), each fitted to one row.
    pub fit: Vec<Fit>,
    pub row: Vec<RowSpec>,
    #[serde(default)]
    pub prediction: Vec<PredictionSpec>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowSpec {
    pub label: String,
    pub mmu: String,
    pub variant: String,
    pub published: f64,
    #[serde(default)]
    pub judging: Judging,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PredictionSpec {
    pub label: String,
    pub mmu: String,
    pub variant: String,
    #[serde(default)]
    pub vcpus: Option<u64>,
    #[serde(default)]
    pub machine: Option<String>,
    /// Guest or KVM parameters of this prediction alone, "PATH=VALUE" (an unpublished
    /// choice whose effect the row shows).
    #[serde(default)]
    pub set: Vec<String>,
}

pub(super) const WORK: &str = "guest.guest_work_cycles_per_step";
pub(super) const TOGGLES: &str = "guest.wp_pairs_other_per_step";
pub(super) const UNLOAD: &str = "kvm.unload_cycles";
/// The parameters fitted to the difference of two rows (the guest work cancels there).
pub(super) const GAP: [&str; 2] = [TOGGLES, UNLOAD];

pub fn parse(place: &str, text: &str) -> Result<Experiment> {
    let e: Experiment = super::file::read(place, text)?;
    let labels: Vec<&str> = e.row.iter().map(|r| r.label.as_str()).collect();
    for f in &e.fit {
        f.check(place, &[WORK, TOGGLES, UNLOAD], &labels)?;
        f.start_pair(place, [0.0, 4.0])?;
    }
    if let Some(row) = &e.vcpus_chosen_for {
        if !labels.contains(&row.as_str()) {
            return Err(Error::at(
                place,
                format!("vcpus_chosen_for: no [[row]] labelled \"{row}\""),
            ));
        }
    }
    if e.fit
        .iter()
        .filter(|f| GAP.contains(&f.parameter.as_str()))
        .count()
        > 1
    {
        return Err(Error::at(
            place,
            format!("fit: at most one of {} is fitted", GAP.join(", ")),
        ));
    }
    for (label, mmu, variant) in e
        .row
        .iter()
        .map(|r| (&r.label, &r.mmu, &r.variant))
        .chain(e.prediction.iter().map(|p| (&p.label, &p.mmu, &p.variant)))
    {
        MmuFlavour::parse(mmu)
            .map_err(|err| Error::at(place, format!("\"{label}\": mmu: {err}")))?;
        Variant::parse(variant)
            .map_err(|err| Error::at(place, format!("\"{label}\": variant: {err}")))?;
    }
    for p in &e.prediction {
        prediction_params(place, p, &Params::linux())?;
    }
    if e.sample_steps == 0 || e.vcpus == 0 {
        return Err(Error::at(
            place,
            "sample_steps, vcpus: expected positive numbers",
        ));
    }
    Ok(e)
}

/// `base` with a prediction's `set` applied; a bad entry is an error naming it.
pub(super) fn prediction_params(place: &str, p: &PredictionSpec, base: &Params) -> Result<Params> {
    let mut params = base.clone();
    for kv in &p.set {
        let (path, value) = kv.split_once('=').ok_or_else(|| {
            Error::at(
                place,
                format!("\"{}\": set: expected PATH=VALUE, got \"{kv}\"", p.label),
            )
        })?;
        let by = format!("prediction \"{}\"", p.label);
        params.set_text(place, path.trim(), value.trim(), Provenance::Set { by })?;
    }
    Ok(params)
}
