//! The kernel's cold-cache cost against the host's: kernel operations (an anonymous fault,
//! getppid, open/close) timed after user data evicted the caches (workload/evict_fault),
//! natively on the recording host and in the model of that host. A row with nothing
//! evicted is compared as it is; every other row as the time its eviction adds to its
//! operation's hot row, natively and in the model, so the host's drift since the
//! footprints were recorded (the hot operation's work comes from then) stays out of the
//! comparison of the memory hierarchy. The parameters it may fit are the machine's: how
//! many LLC hits and DRAM accesses a kernel path overlaps
//! (`machine.memory.llc_miss_overlap`, `machine.memory.dram_miss_overlap`).

use super::file::Header;
use super::Fit;
use crate::defense;
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::machine::{self, MachineProfile};
use crate::params::{Overrides, Params};
use crate::report::table::Table;
use crate::report::{Judging, Reproduction, Row};
use crate::sim::{Counter, TimeCategory};
use crate::workload::evict_fault::{self, Op, Runs, MAX_EVICT_KIB};
use serde::Deserialize;

const LLC: &str = "machine.memory.llc_miss_overlap";
const DRAM: &str = "machine.memory.dram_miss_overlap";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    pub header: Header,
    pub machine: String,
    /// Timed operations per row (the model's differ only by the page a fault gets).
    pub runs: u32,
    pub tolerance_pct: f64,
    #[serde(default)]
    pub fit: Vec<Fit>,
    pub row: Vec<RowSpec>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowSpec {
    pub label: String,
    /// fault, getppid or open-close (workload/evict_fault).
    #[serde(default = "fault")]
    pub op: String,
    pub evict_kib: u64,
    /// The host's median operation after the eviction, ns (the runs of one operation
    /// interleaved over the sizes; an evicted row compares its difference to the hot one).
    pub published: f64,
    #[serde(default)]
    pub judging: Judging,
}

fn fault() -> String {
    "fault".into()
}

impl Experiment {
    /// The row with nothing evicted for `op`, which every evicted row of it is taken against.
    fn hot(&self, op: &str) -> &RowSpec {
        self.row
            .iter()
            .find(|r| r.op == op && r.evict_kib == 0)
            .expect("parse checked every operation has a hot row")
    }
}

pub fn parse(place: &str, text: &str) -> Result<Experiment> {
    let e: Experiment = super::file::read(place, text)?;
    let bad = |msg: String| Err(Error::at(place, msg));
    let evicted: Vec<&str> = e
        .row
        .iter()
        .filter(|r| r.evict_kib > 0)
        .map(|r| r.label.as_str())
        .collect();
    for fit in &e.fit {
        fit.check(place, &[LLC, DRAM], &evicted)?;
    }
    match e.fit.as_slice() {
        [a, b] if a.parameter == b.parameter || a.row == b.row => {
            return bad(
                "fit: expected two different parameters fitted to two different evicted rows"
                    .into(),
            )
        }
        f if f.len() > 2 => return bad(format!("fit: expected at most 2, got {}", f.len())),
        _ => {}
    }
    if !(1..=1000).contains(&e.runs) {
        return bad(format!("runs: expected 1..1000, got {}", e.runs));
    }
    for r in &e.row {
        Op::parse(&r.op)
            .map_err(|err| Error::at(place, format!("row \"{}\" op: {err}", r.label)))?;
        if r.evict_kib > MAX_EVICT_KIB {
            return bad(format!(
                "row \"{}\" evict_kib: expected at most {MAX_EVICT_KIB}, got {}",
                r.label, r.evict_kib
            ));
        }
        if r.evict_kib == 0 {
            continue;
        }
        let Some(hot) = e.row.iter().find(|h| h.op == r.op && h.evict_kib == 0) else {
            return bad(format!(
                "row \"{}\": expected a row of {} with evict_kib = 0 to take it against",
                r.label, r.op
            ));
        };
        if r.published <= hot.published {
            return bad(format!(
                "row \"{}\" published: expected more than its hot row's {} ns, got {}",
                r.label, hot.published, r.published
            ));
        }
    }
    Ok(e)
}

fn simulate(m: &MachineProfile, r: &RowSpec, runs: u32, params: &Params) -> Result<Runs> {
    let mut k = Kernel::boot_with(
        m.clone(),
        defense::parse_list("none")?,
        params,
        Default::default(),
    );
    evict_fault::run(&mut k, Op::parse(&r.op)?, r.evict_kib, runs)
}

/// The model's median of row `r` as a + b / llc_overlap + c / dram_overlap: only lines
/// beyond L2 depend on the overlaps, each waiting its latency over its level's, and nothing
/// else in this single-CPU benchmark depends on time. Three simulations give a, b and c.
fn affine(e: &Experiment, m: &MachineProfile, params: &Params, r: &RowSpec) -> Result<[f64; 3]> {
    let at = |llc: f64, dram: f64| -> Result<f64> {
        let mut m = m.clone();
        (m.memory.llc_miss_overlap, m.memory.dram_miss_overlap) = (llc, dram);
        Ok(simulate(&m, r, e.runs, params)?.median_ns())
    };
    // The three simulations on every core: serial, then each overlap halved.
    let points = [(1.0, 1.0), (2.0, 1.0), (1.0, 2.0)];
    let mut medians =
        crate::sim::parallel::map_indices(3, |i| at(points[i].0, points[i].1)).into_iter();
    let mut next = || medians.next().expect("a median per point");
    let t = next()?;
    let b = 2.0 * (t - next()?);
    let c = 2.0 * (t - next()?);
    Ok([t - b - c, b, c])
}

/// Fits the experiment's overlaps into `m`: each fitted row's added time, a linear function
/// of the overlaps' inverses, equals its published one (one equation per fit; a parameter
/// not fitted keeps its value).
fn fit_overlaps(e: &Experiment, m: &mut MachineProfile, params: &Params) -> Result<Vec<String>> {
    let index = |path: &str| usize::from(path == DRAM);
    // Rows of [coefficient of 1/llc, coefficient of 1/dram | right-hand side].
    let mut eq = vec![];
    // Each operation's hot row once, however many fitted rows take it as their base.
    let mut hot_of = std::collections::BTreeMap::new();
    for f in &e.fit {
        let r = e.row.iter().find(|r| r.label == f.row).unwrap();
        let hot_row = e.hot(&r.op);
        let hot = match hot_of.get(&r.op) {
            Some(&hot) => hot,
            None => {
                let hot = affine(e, m, params, hot_row)?;
                hot_of.insert(&r.op, hot);
                hot
            }
        };
        let t = affine(e, m, params, r)?;
        eq.push([
            t[1] - hot[1],
            t[2] - hot[2],
            r.published - hot_row.published - (t[0] - hot[0]),
        ]);
    }
    let fixed = [
        1.0 / m.memory.llc_miss_overlap,
        1.0 / m.memory.dram_miss_overlap,
    ];
    let inverse = match e.fit.as_slice() {
        [] => return Ok(vec![]),
        [f] => {
            let (i, j) = (index(&f.parameter), 1 - index(&f.parameter));
            let mut v = fixed;
            v[i] = (eq[0][2] - eq[0][j] * fixed[j]) / eq[0][i];
            v
        }
        [f, _] => {
            // Cramer's rule, the unknowns in the order the fits name them.
            let (i, j) = (index(&f.parameter), 1 - index(&f.parameter));
            let det = eq[0][i] * eq[1][j] - eq[0][j] * eq[1][i];
            let mut v = [0.0; 2];
            v[i] = (eq[0][2] * eq[1][j] - eq[0][j] * eq[1][2]) / det;
            v[j] = (eq[0][i] * eq[1][2] - eq[0][2] * eq[1][i]) / det;
            v
        }
        _ => unreachable!("parse allows at most two fits"),
    };
    let mut fitted = vec![];
    for f in &e.fit {
        let inv = inverse[index(&f.parameter)];
        if !(inv.is_finite() && inv > 0.0 && inv <= 1.0) {
            return Err(Error::new(format!(
                "{}: fit of {} impossible: \"{}\" would need an overlap of {:.2} (at least 1: no overlap at all)",
                e.header.name, f.parameter, f.row, 1.0 / inv
            )));
        }
        let x = (100.0 / inv).round() / 100.0;
        if f.parameter == LLC {
            m.memory.llc_miss_overlap = x;
        } else {
            m.memory.dram_miss_overlap = x;
        }
        fitted.push(format!("{} = {x}, fitted to \"{}\"", f.parameter, f.row));
    }
    Ok(fitted)
}

/// The overlaps of machine `m` at which the model's `op` after evicting `l2_cold.0` and
/// `dram_cold.0` KiB adds what it adds on the host (`(kib, ns)`, against a `hot_ns` run),
/// as `reproduce evict-fault` fits them: `kharden kernel evict-fault --fit` measures a host
/// and calls this with its profile.
pub fn fit_machine(
    m: &MachineProfile,
    params: &Params,
    op: Op,
    hot_ns: f64,
    l2_cold: (u64, f64),
    dram_cold: (u64, f64),
) -> Result<(f64, f64)> {
    let row = |label: &str, (evict_kib, published): (u64, f64)| RowSpec {
        label: label.into(),
        op: op.name().into(),
        evict_kib,
        published,
        judging: Judging::default(),
    };
    let fit = |parameter: &str, row: &str| Fit {
        parameter: parameter.into(),
        row: row.into(),
        start: None,
    };
    let e = Experiment {
        header: Header {
            name: "evict-fault --fit".into(),
            kind: "evict-fault".into(),
            title: String::new(),
            source: String::new(),
        },
        machine: m.name.clone(),
        runs: 5,
        tolerance_pct: 15.0,
        fit: vec![fit(LLC, "LLC warm"), fit(DRAM, "LLC cold")],
        row: vec![
            row("hot", (0, hot_ns)),
            row("LLC warm", l2_cold),
            row("LLC cold", dram_cold),
        ],
    };
    let mut m = m.clone();
    fit_overlaps(&e, &mut m, params)?;
    Ok((m.memory.llc_miss_overlap, m.memory.dram_miss_overlap))
}

pub fn run(e: &Experiment, overrides: &Overrides) -> Result<Reproduction> {
    let mut m = overrides.apply_machine(&machine::load(&e.machine)?)?;
    let mut params = Params::linux();
    overrides.apply(&mut params)?;
    let overlaps = |m: &MachineProfile| [m.memory.llc_miss_overlap, m.memory.dram_miss_overlap];
    let committed = overlaps(&m);
    let fitted = fit_overlaps(e, &mut m, &params)?;
    let mut notes = vec![];
    if overlaps(&m) != committed {
        let now = overlaps(&m);
        notes.push(format!(
            "machines/{}.toml gives {LLC} = {}, {DRAM} = {}, which every other experiment uses; this fit gives {} and {}",
            e.machine, committed[0], committed[1], now[0], now[1]
        ));
    }
    let mut medians = std::collections::BTreeMap::new();
    let mut measured = vec![];
    let runs = crate::sim::parallel::map_indices(e.row.len(), |i| {
        simulate(&m, &e.row[i], e.runs, &params)
    });
    for (r, f) in e.row.iter().zip(runs) {
        let f = f?;
        medians.insert(r.label.clone(), f.median_ns());
        measured.push((r.label.clone(), f));
    }
    let mut rows = vec![];
    for r in &e.row {
        let mut row = if r.evict_kib == 0 {
            Row::compared(
                &r.label,
                "ns",
                r.published,
                medians[&r.label],
                e.tolerance_pct,
            )
        } else {
            let hot = e.hot(&r.op);
            Row::compared(
                &r.label,
                "ns added",
                r.published - hot.published,
                medians[&r.label] - medians[&hot.label],
                e.tolerance_pct,
            )
        };
        r.judging.mark(&mut row);
        row.fitted = e.fit.iter().any(|f| f.row == r.label);
        rows.push(row);
    }
    notes.push(format!(
        "an evicted row is its operation's median after the eviction less its hot median, natively (interleaved runs) and in the model; {} timed runs per simulated row",
        e.runs
    ));
    Ok(Reproduction {
        rows,
        fitted_parameters: fitted.len() as u32,
        fitted,
        breakdowns: vec![breakdown(&e.header.title, &measured)],
        notes,
        params: Some(params.to_json()),
        ..e.header.reproduction()
    })
}

/// Where an operation's time goes, and where its lines came from, per run.
fn breakdown(title: &str, measured: &[(String, Runs)]) -> Table {
    let cats = [
        TimeCategory::InterruptEntry,
        TimeCategory::SyscallInsn,
        TimeCategory::Kernel,
        TimeCategory::KernelCacheMiss,
        TimeCategory::KernelTlbRefill,
    ];
    let counters = [
        Counter::KernelTextLines,
        Counter::KernelDataLines,
        Counter::KernelLineL1Misses,
        Counter::KernelLinesFromMemory,
        Counter::KernelStoreLinesFromMemory,
        Counter::StructPagesFromMemory,
        Counter::PageWalks,
    ];
    let mut header = vec!["row"];
    header.extend(cats.iter().map(|c| c.name()));
    header.extend(counters.iter().map(|c| c.name()));
    let mut t = Table::new(format!("{title}: ns and events per run"), &header);
    for (label, f) in measured {
        let n = f.times.len().max(1) as f64;
        let mut row = vec![label.clone()];
        row.extend(
            cats.iter()
                .map(|&c| format!("{:.0}", f.stats.time(c).ns() / n)),
        );
        row.extend(
            counters
                .iter()
                .map(|&c| format!("{:.1}", f.stats.counter(c) as f64 / n)),
        );
        t.push(row);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committed() -> String {
        super::super::source_text("evict-fault")
            .unwrap()
            .to_string()
    }

    #[test]
    fn the_committed_overlaps_are_what_the_experiment_fits() {
        let r = super::super::reproduce("evict-fault", &Overrides::default()).unwrap();
        assert_eq!(r.fitted_parameters, 2);
        // A note says when the machine file and the fit disagree: the model changed and
        // machines/recording-host-epyc-zen4-kvm.toml needs the new values.
        assert!(
            !r.notes
                .iter()
                .any(|n| n.contains("which every other experiment uses")),
            "{:?}",
            r.notes
        );
        for row in r.rows.iter().filter(|r| r.fitted) {
            assert!(
                row.error_pct.unwrap().abs() < 1.0,
                "{}: {:?}",
                row.label,
                row.error_pct
            );
        }
    }

    #[test]
    fn bad_files_are_one_line_errors() {
        let good = committed();
        let cases = [
            (
                good.replacen(
                    "machine.memory.llc_miss_overlap",
                    "kernel.copy_page_cycles",
                    1,
                ),
                "fit.parameter: expected",
            ),
            (
                good.replacen("published = 1582", "published = 1000", 1),
                "published: expected more than its hot row's 1442 ns, got 1000",
            ),
            (
                good.replacen("evict_kib = 256", "evict_kib = 99999999", 1),
                "evict_kib: expected at most 1048576, got 99999999",
            ),
            (
                good.replacen("runs = 3", "runs = 0", 1),
                "runs: expected 1..1000, got 0",
            ),
            (
                good.replacen(
                    "machine.memory.dram_miss_overlap",
                    "machine.memory.llc_miss_overlap",
                    1,
                ),
                "fit: expected two different parameters",
            ),
            (
                good.replacen("op = \"getppid\"", "op = \"fork\"", 1),
                "op: unknown operation 'fork'",
            ),
        ];
        for (text, want) in cases {
            let err = parse("e.toml", &text).unwrap_err().to_string();
            assert!(err.contains(want) && !err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn a_target_no_overlap_can_reach_is_refused() {
        // Slower than the model with every line beyond L2 waiting in full: an overlap
        // below 1 would be needed.
        let text = committed().replacen("published = 4256", "published = 90000", 1);
        let e = parse("e.toml", &text).unwrap();
        let err = run(&e, &Overrides::default()).unwrap_err().to_string();
        assert!(err.contains("impossible"), "{err}");
    }
}
