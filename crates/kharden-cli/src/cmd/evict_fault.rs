//! `kharden kernel evict-fault`: a kernel operation (an anonymous fault, getppid,
//! open/close) timed on this host after reading an eviction buffer, beside the model's
//! figure for a machine profile of this host.

use clap::Args as ClapArgs;
use kharden::experiment::evict_fault as evict_fault_experiment;
use kharden::kernel::Kernel;
use kharden::machine::MachineProfile;
use kharden::params::Params;
use kharden::report::table::Table;
use kharden::workload::evict_fault::{self, median, native, Op, MAX_EVICT_KIB};
use kharden::{defense, machine, Error, Result};
use kharden_footprint::latency::percentile;

#[derive(ClapArgs)]
pub struct Args {
    /// Eviction buffer sizes in KiB, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0,256,1024,4096,16384,65536"
    )]
    evict_kib: Vec<u64>,
    /// The operation timed: fault, getppid or open-close (default: fault; with --fit,
    /// open-close, the path `reproduce evict-fault` fits the overlaps to).
    #[arg(long)]
    op: Option<String>,
    /// Timed operations per run.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    faults: u32,
    /// Native runs per size; the median of their medians is reported.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    repeats: u32,
    /// The machine profile of the model's column (a profile of this host).
    #[arg(long, default_value = kharden::kernel::paths::table::RECORDING_HOST)]
    machine: String,
    /// Only the model's column (no native runs).
    #[arg(long, conflicts_with = "fit")]
    model_only: bool,
    /// Also fit the machine's llc_miss_overlap and dram_miss_overlap to this host's runs
    /// (an eviction that empties L2 and leaves the LLC warm, and one of at least twice the
    /// LLC; 0 among the sizes) and print them as profile lines.
    #[arg(long)]
    fit: bool,
    #[command(flatten)]
    set: super::params::SetArgs,
}

pub fn run(a: Args) -> Result<()> {
    if let Some(&kib) = a.evict_kib.iter().find(|&&k| k > MAX_EVICT_KIB) {
        return Err(Error::at(
            "--evict-kib",
            format!("expected at most {MAX_EVICT_KIB} KiB per size, got {kib}"),
        ));
    }
    let default = if a.fit { "open-close" } else { "fault" };
    let op = Op::parse(a.op.as_deref().unwrap_or(default))
        .map_err(|e| Error::at("--op", e.to_string()))?;
    let overrides = a.set.resolve()?;
    let m = overrides.apply_machine(&machine::load(&a.machine)?)?;
    let mut params = Params::linux();
    overrides.apply(&mut params)?;
    let fit_at = if a.fit { Some(fit_rows(&a, &m)?) } else { None };
    let mut header = vec!["evict KiB"];
    if !a.model_only {
        header.extend(["native p10 ns", "native p50 ns", "native p90 ns"]);
    }
    header.push("model p50 ns");
    let mut t = Table::new(
        format!(
            "{} after reading an eviction buffer: {} runs{}; model on {}",
            op.name(),
            a.faults,
            if a.model_only {
                String::new()
            } else {
                format!(", {} native runs (median of each percentile)", a.repeats)
            },
            m.name
        ),
        &header,
    );
    // Native runs round-robin over the sizes, so the host's drift reaches every size alike.
    let mut native: Vec<[Vec<f64>; 3]> = vec![Default::default(); a.evict_kib.len()];
    for _ in 0..if a.model_only { 0 } else { a.repeats } {
        for (i, &kib) in a.evict_kib.iter().enumerate() {
            let mut ns = native::op_times(op, kib, a.faults)?;
            ns.sort_by(f64::total_cmp);
            for (j, q) in [0.1, 0.5, 0.9].into_iter().enumerate() {
                native[i][j].push(percentile(&ns, q));
            }
        }
    }
    // Per size, the median over the runs of each percentile.
    let native: Vec<[f64; 3]> = native.into_iter().map(|p| p.map(median)).collect();
    let medians: Vec<f64> = native.iter().map(|p| p[1]).collect();
    let fit_lines = match fit_at {
        Some(rows) => Some(fit(&a, op, &m, &params, rows, &medians)?),
        None => None,
    };
    for (&kib, pct) in a.evict_kib.iter().zip(native) {
        let mut row = vec![kib.to_string()];
        if !a.model_only {
            row.extend(pct.iter().map(|v| format!("{v:.0}")));
        }
        let mut k = Kernel::boot_with(
            m.clone(),
            defense::parse_list("none")?,
            &params,
            Default::default(),
        );
        let model = evict_fault::run(&mut k, op, kib, a.faults.min(15))?;
        row.push(format!("{:.0}", model.median_ns()));
        t.push(row);
    }
    print!("{t}");
    if let Some(lines) = fit_lines {
        println!("{lines}");
    }
    Ok(())
}

/// The rows the fit uses, by index: the hot fault; the smallest eviction from 4x the L2 to
/// a quarter of the LLC (L2 cold, LLC warm: the host's LLC, unlike the model's LRU one,
/// loses lines well before it is full), for the LLC's overlap; the largest eviction, at
/// least twice the LLC, for DRAM's.
fn fit_rows(a: &Args, m: &MachineProfile) -> Result<[usize; 3]> {
    let llc_kib = m.memory.llc_kib_per_socket as u64;
    let sizes = &a.evict_kib;
    let hot = sizes.iter().position(|&k| k == 0);
    let warm = (0..sizes.len())
        .filter(|&i| sizes[i] >= 4 * m.memory.l2_kib as u64 && 4 * sizes[i] <= llc_kib)
        .min_by_key(|&i| sizes[i]);
    let cold = (0..sizes.len())
        .filter(|&i| sizes[i] >= 2 * llc_kib)
        .max_by_key(|&i| sizes[i]);
    match (hot, warm, cold) {
        (Some(h), Some(w), Some(c)) => Ok([h, w, c]),
        _ => Err(Error::at(
            "--fit",
            format!(
                "expected --evict-kib to hold 0, a size from {} to {} KiB (L2 cold, LLC warm) and one of at least {} KiB (LLC cold) for {}",
                4 * m.memory.l2_kib,
                llc_kib / 4,
                2 * llc_kib,
                m.name
            ),
        )),
    }
}

/// The overlaps fitted to this host's medians at `rows` (fit_rows), as the profile's lines.
fn fit(
    a: &Args,
    op: Op,
    m: &MachineProfile,
    params: &Params,
    rows: [usize; 3],
    medians: &[f64],
) -> Result<String> {
    let [hot, warm, cold] = rows;
    let (llc, dram) = evict_fault_experiment::fit_machine(
        m,
        params,
        op,
        medians[hot],
        (a.evict_kib[warm], medians[warm]),
        (a.evict_kib[cold], medians[cold]),
    )?;
    let how = format!(
        "kharden kernel evict-fault --fit --op {} --faults {} --repeats {}",
        op.name(),
        a.faults,
        a.repeats
    );
    Ok(format!(
        "llc_miss_overlap = {llc}  # fitted: `{how}`, this host's {} after a {} KiB eviction (L2 cold, LLC warm), jointly with the next\ndram_miss_overlap = {dram}  # fitted: the same, after a {} KiB eviction (LLC and TLBs cold)",
        op.name(),
        a.evict_kib[warm],
        a.evict_kib[cold]
    ))
}
