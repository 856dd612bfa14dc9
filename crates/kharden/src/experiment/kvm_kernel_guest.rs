//! The kvm-cr0wp rows again, with the kernel model itself as the guest (virt/kernel_guest.rs,
//! workload/ssdd.rs) instead of the ssdd path model: KERNEXEC toggles at every context
//! switch, one vCPU, the legacy and TDP MMUs (the kernel model has no shadow paging). The
//! same two facts are fitted to the same two rows, in this model's own terms; the TDP rows
//! and the guest-owned CR0.WP follow. A second opinion on the rows, printed as a table: the
//! seed's rows are counted once, by the path model.

use super::kvm_spec::{Experiment, RowSpec, UNLOAD, WORK};
use crate::error::Result;
use crate::machine::MachineProfile;
use crate::params::{Params, Provenance};
use crate::report::table::Table;
use crate::virt::kernel_ssdd::{run_ssdd, KernelSsdd};
use crate::virt::params::GuestParams;
use crate::virt::{MmuFlavour, Variant};

const WARMUP: u64 = 200;
const SAMPLE: u64 = 1000;

fn simulate(m: &MachineProfile, p: &Params, mmu: &str, variant: &str) -> Result<KernelSsdd> {
    let g = GuestParams::from(p);
    run_ssdd(
        m,
        MmuFlavour::parse(mmu)?,
        Variant::parse(variant)?,
        p,
        crate::arch::x86::PageSize::Size2M,
        g.guest_work_cycles_per_step,
        (g.pairs, g.steps_per_pair),
        (WARMUP, SAMPLE),
    )
}

fn with(p: &Params, path: &str, v: f64, row: &str) -> Result<Params> {
    let mut p = p.clone();
    let provenance = Provenance::Fitted {
        experiment: "kvm-cr0wp (kernel-model guest)".into(),
        row: row.into(),
    };
    p.set_num("kvm-cr0wp", path, v, provenance)?;
    Ok(p)
}

/// The table, and the fits it made (stated in its notes, not counted: no row of the
/// reproduction comes from this model).
pub fn table(e: &Experiment, m: &MachineProfile, params: &Params) -> Result<(Table, Vec<String>)> {
    let row = |mmu: &str, variant: &str| -> Option<&RowSpec> {
        e.row.iter().find(|r| r.mmu == mmu && r.variant == variant)
    };
    let (Some(base), Some(patch)) = (row("legacy", "base"), row("legacy", "keep-roots")) else {
        return Ok((Table::new("", &[]), vec![]));
    };
    // The unload cost from the legacy gap (each reset costs it once: affine), the guest's
    // work per step from the patched row (each step does it once: affine).
    let p0 = with(params, WORK, 0.0, &patch.label)?;
    let gap = |u: f64| -> Result<f64> {
        let p = with(&p0, UNLOAD, u, &base.label)?;
        Ok(simulate(m, &p, "legacy", "base")?.seconds
            - simulate(m, &p, "legacy", "keep-roots")?.seconds)
    };
    let (g0, g1) = (gap(0.0)?, gap(20_000.0)?);
    let unload = (20_000.0 * (base.published - patch.published - g0) / (g1 - g0)).max(0.0);
    let p1 = with(&p0, UNLOAD, unload, &base.label)?;
    let t0 = simulate(m, &p1, "legacy", "keep-roots")?;
    let g = GuestParams::from(&p1);
    let steps = (g.pairs * g.steps_per_pair) as f64;
    let work = ((patch.published - t0.seconds) * m.cpu.frequency_ghz * 1e9 / steps).max(0.0);
    let p2 = with(&p1, WORK, work, &patch.label)?;
    let mut t = Table::new(
        format!(
            "\nthe same rows with the kernel model as the guest (KERNEXEC at every context switch, one vCPU, no per-CPU PGD), {}:",
            m.name
        ),
        &[
            "row", "published s", "kernel model s", "error %", "CR0 exits/step", "roots built/step",
            "EPT viol./step", "2-D walks/step", "vm-exit us/step",
        ],
    );
    let mut runs: Vec<(String, Option<f64>, &str, &str)> = e
        .row
        .iter()
        .filter(|r| r.mmu != "shadow")
        .map(|r| {
            (
                r.label.clone(),
                Some(r.published),
                r.mmu.as_str(),
                r.variant.as_str(),
            )
        })
        .collect();
    runs.push((
        "legacy, guest-owned CR0.WP".into(),
        None,
        "legacy",
        "guest-owned-wp",
    ));
    runs.push((
        "TDP, guest-owned CR0.WP".into(),
        None,
        "tdp",
        "guest-owned-wp",
    ));
    for (label, published, mmu, variant) in runs {
        let r = simulate(m, &p2, mmu, variant)?;
        let n = r.per_step.steps as f64;
        let fitted = label == base.label || label == patch.label;
        let err = match published {
            Some(_) if fitted => "fitted".to_string(),
            Some(p) => format!("{:+.1}", (r.seconds - p) / p * 100.0),
            None => "prediction".to_string(),
        };
        use crate::sim::{Counter, TimeCategory};
        t.push(vec![
            label,
            published.map_or("-".into(), |p| format!("{p:.2}")),
            format!("{:.2}", r.seconds),
            err,
            format!("{:.2}", r.counts.exits[0] as f64 / n),
            format!("{:.2}", r.mmu.roots_built as f64 / n),
            format!(
                "{:.2}",
                r.per_step.stats.counter(Counter::EptViolations) as f64 / n
            ),
            format!(
                "{:.2}",
                r.per_step.stats.counter(Counter::PageWalks) as f64 / n
            ),
            format!(
                "{:.2}",
                r.per_step.stats.time(TimeCategory::VmExit).secs() * 1e6 / n
            ),
        ]);
    }
    let notes = vec![format!(
        "kernel-model guest: {UNLOAD} = {unload:.0} cycles fitted to \"{}\" minus \"{}\", {WORK} = {work:.0} cycles ({:.1} us) to \"{}\"; not counted among the fitted parameters, because no counted row comes from this model",
        base.label,
        patch.label,
        work / m.cpu.frequency_ghz / 1e3,
        patch.label
    )];
    Ok((t, notes))
}
