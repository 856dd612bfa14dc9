//! Kernel text replication (seed 002): the gain of per-node text and rodata copies on each
//! of the cover letter's operations (workload/kernel_ops.rs), hot and cold, published vs
//! simulated in percentage points, with the fetches and walks that explain each row; then
//! the same rows on other two-node machines and the gain against the remote/local DRAM
//! latency ratio (predictions: nobody published them).

use super::file::Header;
use crate::defense;
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::machine::{self, MachineProfile};
use crate::params::{Overrides, Params};
use crate::report::table::Table;
use crate::report::{Figure, Judging, Reproduction, Row};
use crate::sim::{Counter, Stats};
use crate::workload::kernel_ops::{self, Caches, Op, OpResult};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    pub header: Header,
    pub machine: String,
    /// The base kernel's own defenses (both sides of every comparison run them).
    pub defenses: String,
    /// The nodes the benchmark runs on; a row's gain is the mean over them.
    pub nodes: Vec<u32>,
    pub tolerance_hot_pp: f64,
    pub tolerance_cold_pp: f64,
    /// Rows whose published gain is at least this must come out with the same sign.
    pub sign_from_pct: f64,
    pub row: Vec<RowSpec>,
    #[serde(default)]
    pub prediction: Vec<PredictionSpec>,
    #[serde(default)]
    pub ratio_sweep: Option<RatioSweep>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowSpec {
    pub op: String,
    pub caches: String,
    /// Published gain, percent.
    pub published: f64,
    #[serde(default)]
    pub judging: Judging,
}

/// Every row again on another machine, with its own base defenses.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PredictionSpec {
    pub machine: String,
    pub defenses: String,
}

/// The gain of some rows against dram_remote_ns / dram_local_ns on the experiment's machine.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RatioSweep {
    pub ratios: Vec<f64>,
    /// Rows by "op caches", e.g. "fork-1 cold".
    pub rows: Vec<String>,
}

pub fn parse(place: &str, text: &str) -> Result<Experiment> {
    let e: Experiment = super::file::read(place, text)?;
    for r in &e.row {
        Op::parse(&r.op).map_err(|err| Error::at(place, format!("row op: {err}")))?;
        Caches::parse(&r.caches).map_err(|err| Error::at(place, format!("row caches: {err}")))?;
    }
    if e.nodes.is_empty() {
        return Err(Error::at(place, "nodes: expected at least one node"));
    }
    if let Some(s) = &e.ratio_sweep {
        if s.ratios.iter().any(|&r| !(1.0..=10.0).contains(&r)) {
            return Err(Error::at(
                place,
                "ratio_sweep.ratios: expected ratios from 1 to 10",
            ));
        }
        for name in &s.rows {
            parse_row_name(name)
                .map_err(|err| Error::at(place, format!("ratio_sweep.rows: {err}")))?;
        }
    }
    Ok(e)
}

fn parse_row_name(name: &str) -> Result<(Op, Caches)> {
    let (op, caches) = name
        .split_once(' ')
        .ok_or_else(|| Error::new(format!("\"{name}\": expected \"OP hot|cold\"")))?;
    Ok((Op::parse(op)?, Caches::parse(caches)?))
}

/// One operation on one node, without and with replication.
struct Pair {
    base: OpResult,
    repl: OpResult,
}

impl Pair {
    fn gain_pct(&self) -> f64 {
        let (b, r) = (self.base.elapsed.ns(), self.repl.elapsed.ns());
        (b - r) / b * 100.0
    }
}

/// What one row ran: a pair per node.
struct Measured {
    pairs: Vec<(u32, Pair)>,
}

impl Measured {
    fn gain_pct(&self) -> f64 {
        self.pairs.iter().map(|(_, p)| p.gain_pct()).sum::<f64>() / self.pairs.len() as f64
    }
}

fn run_one(
    m: &MachineProfile,
    params: &Params,
    defenses: &str,
    op: Op,
    caches: Caches,
    node: u32,
) -> Result<OpResult> {
    let mut k = Kernel::boot_with(
        m.clone(),
        defense::parse_list(defenses)?,
        params,
        crate::oracle::OracleMode::default(),
    );
    let r = kernel_ops::run(&mut k, op, caches, node, false)?;
    if let Some(v) = k.violations.first() {
        return Err(Error::new(format!(
            "{} {} on {}: model fault under {defenses}: {}",
            op.name(),
            caches.name(),
            m.name,
            v.what
        )));
    }
    Ok(r)
}

fn with_replication(defenses: &str) -> String {
    match defenses {
        "" | "none" => "text-repl".into(),
        d => format!("{d},text-repl"),
    }
}

/// What one table of rows runs: every (op, caches) of `rows` on every node of `nodes`, both
/// variants.
struct Request<'a> {
    m: MachineProfile,
    defenses: &'a str,
    nodes: Vec<u32>,
    rows: Vec<(Op, Caches)>,
}

/// Runs every request's operations as one batch on every core (one batch keeps both cores
/// busy to the end, where a batch per table leaves one idle at each table's tail); the
/// results per request, per row.
fn measure(params: &Params, requests: &[Request]) -> Result<Vec<Vec<Measured>>> {
    let jobs: Vec<(usize, (Op, Caches), u32, bool)> = requests
        .iter()
        .enumerate()
        .flat_map(|(i, r)| {
            r.rows.iter().flat_map(move |&row| {
                r.nodes
                    .iter()
                    .flat_map(move |&n| [(i, row, n, false), (i, row, n, true)])
            })
        })
        .collect();
    let repl: Vec<String> = requests
        .iter()
        .map(|r| with_replication(r.defenses))
        .collect();
    let results = crate::sim::parallel::map_indices(jobs.len(), |j| {
        let (i, (op, caches), node, replicated) = jobs[j];
        let r = &requests[i];
        let d = if replicated {
            repl[i].as_str()
        } else {
            r.defenses
        };
        run_one(&r.m, params, d, op, caches, node)
    });
    let mut it = results.into_iter();
    let mut out = vec![];
    for r in requests {
        let mut measured = vec![];
        for _ in &r.rows {
            let mut pairs = vec![];
            for &n in &r.nodes {
                let base = it.next().expect("job")?;
                let repl = it.next().expect("job")?;
                pairs.push((n, Pair { base, repl }));
            }
            measured.push(Measured { pairs });
        }
        out.push(measured);
    }
    Ok(out)
}

pub fn run(e: &Experiment, overrides: &Overrides) -> Result<Reproduction> {
    let m = overrides.apply_machine(&machine::load(&e.machine)?)?;
    let mut params = Params::linux();
    overrides.apply(&mut params)?;
    let specs: Vec<(Op, Caches)> = e
        .row
        .iter()
        .map(|r| Ok((Op::parse(&r.op)?, Caches::parse(&r.caches)?)))
        .collect::<Result<_>>()?;
    // Every table's runs first, as one batch: the rows, the predictions, the cold loops
    // emptied before every iteration, the latency-ratio sweep.
    let on = |m: &MachineProfile, defenses, nodes: &[u32], rows: Vec<(Op, Caches)>| Request {
        m: m.clone(),
        defenses,
        nodes: nodes.to_vec(),
        rows,
    };
    let mut requests = vec![on(&m, &e.defenses, &e.nodes, specs.clone())];
    for p in &e.prediction {
        let pm = overrides.apply_machine(&machine::load(&p.machine)?)?;
        let nodes: Vec<u32> = (0..pm.numa_nodes().min(2)).collect();
        requests.push(on(&pm, &p.defenses, &nodes, specs.clone()));
    }
    let loops = cold_loops(&specs);
    let each = loops.iter().map(|&i| (specs[i].0, Caches::ColdEach));
    requests.push(on(&m, &e.defenses, &e.nodes, each.collect()));
    let sweep_rows: Vec<(Op, Caches)> = match &e.ratio_sweep {
        Some(s) => s
            .rows
            .iter()
            .map(|r| parse_row_name(r))
            .collect::<Result<_>>()?,
        None => vec![],
    };
    for &ratio in e.ratio_sweep.iter().flat_map(|s| &s.ratios) {
        let mut pm = m.clone();
        pm.memory.dram_remote_ns = pm.memory.dram_local_ns * ratio;
        requests.push(on(&pm, &e.defenses, &e.nodes, sweep_rows.clone()));
    }
    let mut results = measure(&params, &requests)?.into_iter();
    let mut next = || results.next().expect("a result per request");

    let measured = next();
    let mut rows = vec![];
    // Each row's gain on each node (`ROW/node0_gain_pct`) and, as base/replicated - 1, on
    // each node (`ROW/node1_speedup_pct`), for its known-miss text to quote.
    let mut values = std::collections::BTreeMap::new();
    let mut breakdown = breakdown_table(&format!(
        "\nper node, {} under {} (base) and {} (replicated); counts per timed operation:",
        m.name,
        e.defenses,
        with_replication(&e.defenses)
    ));
    for ((spec, &(op, caches)), res) in e.row.iter().zip(&specs).zip(&measured) {
        let tolerance = match caches {
            Caches::Hot => e.tolerance_hot_pp,
            Caches::Cold | Caches::ColdEach => e.tolerance_cold_pp,
        };
        let label = format!("{} {}", op.name(), caches.name());
        let mut row = Row::compared_points(
            &label,
            spec.published,
            res.gain_pct(),
            tolerance,
            spec.published >= e.sign_from_pct,
        );
        spec.judging.mark(&mut row);
        rows.push(row);
        for (node, pair) in &res.pairs {
            let (b, r) = (pair.base.elapsed.ns(), pair.repl.elapsed.ns());
            values.insert(format!("{label}/node{node}_gain_pct"), pair.gain_pct());
            values.insert(
                format!("{label}/node{node}_speedup_pct"),
                (b / r - 1.0) * 100.0,
            );
        }
        push_breakdown(&mut breakdown, &label, op, res);
    }
    let mut predictions = vec![];
    for request in &requests[1..=e.prediction.len()] {
        let res = next();
        for (&(op, caches), r) in specs.iter().zip(&res) {
            let label = format!("{} {} {}", request.m.name, op.name(), caches.name());
            predictions.push(Row::predicted(&label, "% gain", r.gain_pct()));
            push_breakdown(&mut breakdown, &label, op, r);
        }
    }
    let mut figures = vec![];
    let mut breakdowns = vec![
        breakdown,
        cold_each_table(e, &m, &specs, &measured, &loops, &next()),
        published_pairs_table(e, &m, &specs, &measured),
    ];
    if let Some(sweep) = &e.ratio_sweep {
        let at_ratios: Vec<Vec<Measured>> = sweep.ratios.iter().map(|_| next()).collect();
        let (table, figure) = ratio_sweep(e, sweep, &m, &at_ratios);
        breakdowns.push(table);
        figures.push(figure);
    }
    Ok(Reproduction {
        rows,
        predictions,
        breakdowns,
        figures,
        notes: vec![
            format!(
                "gain = (base - replicated) / base of the timed operation, the mean over a run on the first CPU of node{} {}; the kernel image (and, without replication, all kernel text) lives on node 0",
                if e.nodes.len() > 1 { "s" } else { "" },
                e.nodes.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(" and ")
            ),
            format!(
                "replication's memory: {} MiB of text and rodata and 3 page-table pages per extra node at boot, one more PGD per address space per extra node (4 KiB, 8 KiB under PTI with its user half)",
                crate::defense::text_repl::REPLICATED_BYTES >> 20
            ),
        ],
        values,
        params: Some(params.to_json()),
        ..e.header.reproduction()
    })
}

/// The cold rows of loops (more than one iteration).
fn cold_loops(specs: &[(Op, Caches)]) -> Vec<usize> {
    (0..specs.len())
        .filter(|&i| specs[i].1 == Caches::Cold && specs[i].0.iterations() > 1)
        .collect()
}

/// The cold loop rows again with caches emptied before every iteration (`each`, one per
/// row of `loops`), beside the rows' definition (emptied once, before the loop): the seed
/// does not say which it measured.
fn cold_each_table(
    e: &Experiment,
    m: &MachineProfile,
    specs: &[(Op, Caches)],
    measured: &[Measured],
    loops: &[usize],
    each: &[Measured],
) -> Table {
    let mut h = vec!["row".to_string(), "published".into(), "cold".into()];
    h.extend(e.nodes.iter().map(|n| format!("cold-each node {n}")));
    h.push("cold-each".into());
    let headers: Vec<&str> = h.iter().map(|s| s.as_str()).collect();
    let mut t = Table::new(
        format!(
            "\nloops with caches emptied before every iteration (cold-each) instead of once before the loop (cold, the rows' definition), {}; % gain:",
            m.name
        ),
        &headers,
    );
    for (&i, r) in loops.iter().zip(each) {
        let mut row = vec![
            format!("{} cold", specs[i].0.name()),
            format!("{:.1}", e.row[i].published),
            format!("{:.1}", measured[i].gain_pct()),
        ];
        row.extend(r.pairs.iter().map(|(_, p)| format!("{:+.1}", p.gain_pct())));
        row.push(format!("{:.1}", r.gain_pct()));
        t.push(row);
    }
    t
}

/// Whether each operation's published hot and cold gains can both hold. Run hot and cold,
/// an operation executes the same code; the cold run adds misses, and replication can only
/// make each of them cheaper or leave it. Where replication does no work of its own in the
/// operation (no PGD copies), the time it saves cold is then at least the time it saves hot:
/// cold gain x (cold time / hot time) >= hot gain. The time ratio is the model's, of the base
/// kernel, the mean over the nodes.
fn published_pairs_table(
    e: &Experiment,
    m: &MachineProfile,
    specs: &[(Op, Caches)],
    measured: &[Measured],
) -> Table {
    let mut t = Table::new(
        format!(
            "\npublished hot and cold gains against each other: the cold run saves at least the hot run's time where replication adds no work of its own (cold/hot time: {}, base kernel):",
            m.name
        ),
        &[
            "operation",
            "hot gain %",
            "cold gain %",
            "cold/hot time",
            "cold saving, % of hot time",
            "verdict",
        ],
    );
    let row_of = |op, caches| specs.iter().position(|&s| s == (op, caches));
    let pgd = crate::defense::registry::counter(crate::defense::text_repl::PGD_COPIES);
    for &op in Op::ALL {
        let (Some(h), Some(c)) = (row_of(op, Caches::Hot), row_of(op, Caches::Cold)) else {
            continue;
        };
        let (hot, cold) = (&measured[h], &measured[c]);
        let ratio = hot
            .pairs
            .iter()
            .zip(&cold.pairs)
            .map(|((_, ph), (_, pc))| pc.base.elapsed.ns() / ph.base.elapsed.ns())
            .sum::<f64>()
            / hot.pairs.len() as f64;
        let (gh, gc) = (e.row[h].published, e.row[c].published);
        let saving = gc * ratio;
        let own_work = [hot, cold]
            .iter()
            .flat_map(|r| &r.pairs)
            .any(|(_, p)| p.repl.stats.owned(pgd) > 0);
        let verdict = if own_work {
            "not checked: replication copies PGDs in it".to_string()
        } else if saving >= gh {
            "consistent".to_string()
        } else {
            format!("cold saves {:.1} points less than hot", gh - saving)
        };
        t.push(vec![
            op.name().to_string(),
            format!("{gh:.1}"),
            format!("{gc:.1}"),
            format!("{ratio:.2}"),
            format!("{saving:.1}"),
            verdict,
        ]);
    }
    t
}

/// The sweep's rows at each latency ratio (`at_ratios`, one per ratio: dram_remote_ns =
/// ratio x dram_local_ns).
fn ratio_sweep(
    e: &Experiment,
    s: &RatioSweep,
    m: &MachineProfile,
    at_ratios: &[Vec<Measured>],
) -> (Table, Figure) {
    let mut h = vec!["remote/local".to_string()];
    h.extend(s.rows.iter().cloned());
    let headers: Vec<&str> = h.iter().map(|s| s.as_str()).collect();
    let mut table = Table::new(
        format!(
            "\ngain (%) against the remote/local DRAM latency ratio, {} (local {} ns; predictions):",
            m.name, m.memory.dram_local_ns
        ),
        &headers,
    );
    let mut series: Vec<crate::report::svg::Series> = s
        .rows
        .iter()
        .map(|r| crate::report::svg::Series {
            label: r.clone(),
            points: vec![],
            dashed: r.ends_with("hot"),
        })
        .collect();
    for (&ratio, res) in s.ratios.iter().zip(at_ratios) {
        let mut row = vec![format!("{ratio:.2}")];
        for (i, r) in res.iter().enumerate() {
            row.push(format!("{:.1}", r.gain_pct()));
            series[i].points.push((ratio, r.gain_pct()));
        }
        table.push(row);
    }
    let svg = crate::report::svg::linear_chart(
        &format!(
            "{}: replication gain vs remote/local DRAM latency ({})",
            e.header.name, m.name
        ),
        "remote / local DRAM latency",
        "gain, % of the base time",
        &series,
    );
    (
        table,
        Figure {
            name: format!("{}-ratio", e.header.name),
            svg,
        },
    )
}

fn breakdown_table(title: &str) -> Table {
    Table::new(
        title,
        &[
            "row",
            "node",
            "base us",
            "repl us",
            "gain %",
            "text lines",
            "text DRAM base (remote)",
            "text DRAM repl (remote)",
            "walks base/repl",
            "walk DRAM base (remote)",
            "walk DRAM repl (remote)",
            "PGD copies",
            "stores DRAM base/repl",
        ],
    )
}

fn push_breakdown(t: &mut Table, label: &str, op: Op, r: &Measured) {
    let n = op.iterations().max(1) as f64;
    let per = |s: &Stats, c: Counter| format!("{:.1}", s.counter(c) as f64 / n);
    let pgd = crate::defense::registry::counter(crate::defense::text_repl::PGD_COPIES);
    // "all (of them remote)", per timed operation
    let of_which =
        |s: &Stats, all: Counter, remote: Counter| format!("{} ({})", per(s, all), per(s, remote));
    for (node, p) in &r.pairs {
        let (b, rp) = (&p.base.stats, &p.repl.stats);
        t.push(vec![
            label.to_string(),
            node.to_string(),
            format!("{:.2}", p.base.elapsed.ns() / 1e3),
            format!("{:.2}", p.repl.elapsed.ns() / 1e3),
            format!("{:+.1}", p.gain_pct()),
            per(b, Counter::KernelTextLines),
            of_which(
                b,
                Counter::KernelTextFromMemory,
                Counter::KernelTextFromRemoteMemory,
            ),
            of_which(
                rp,
                Counter::KernelTextFromMemory,
                Counter::KernelTextFromRemoteMemory,
            ),
            format!(
                "{}/{}",
                per(b, Counter::PageWalks),
                per(rp, Counter::PageWalks)
            ),
            of_which(b, Counter::WalkLoadsDram, Counter::WalkLoadsRemoteDram),
            of_which(rp, Counter::WalkLoadsDram, Counter::WalkLoadsRemoteDram),
            format!("{:.2}", rp.owned(pgd) as f64 / n),
            format!(
                "{}/{}",
                per(b, Counter::KernelStoreLinesFromMemory),
                per(rp, Counter::KernelStoreLinesFromMemory)
            ),
        ]);
    }
}
