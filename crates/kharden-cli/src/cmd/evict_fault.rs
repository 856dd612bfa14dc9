//! `kharden kernel evict-fault`: anonymous faults timed on this host after reading an
//! eviction buffer, beside the model's figure for a machine profile of this host.

use clap::Args as ClapArgs;
use kharden::kernel::Kernel;
use kharden::params::Params;
use kharden::report::table::Table;
use kharden::workload::evict_fault::{self, native};
use kharden::{defense, machine, Error, Result};

#[derive(ClapArgs)]
pub struct Args {
    /// Eviction buffer sizes in KiB, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0,256,1024,4096,16384,65536"
    )]
    evict_kib: Vec<u64>,
    /// Timed faults per run.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    faults: u32,
    /// Native runs per size; the median of their medians is reported.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    repeats: u32,
    /// The machine profile of the model's column (a profile of this host).
    #[arg(long, default_value = kharden::kernel::path::RECORDING_HOST)]
    machine: String,
    /// Only the model's column (no native runs).
    #[arg(long)]
    model_only: bool,
    #[command(flatten)]
    set: super::params::SetArgs,
}

/// Most eviction this command reads per fault (the model simulates every line).
const MAX_EVICT_KIB: u64 = 1 << 20;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn run(a: Args) -> Result<()> {
    if let Some(&kib) = a.evict_kib.iter().find(|&&k| k > MAX_EVICT_KIB) {
        return Err(Error::at(
            "--evict-kib",
            format!("expected at most {MAX_EVICT_KIB} KiB per size, got {kib}"),
        ));
    }
    let overrides = a.set.overrides()?;
    let m = overrides.apply_machine(&machine::load(&a.machine)?)?;
    let mut params = Params::linux();
    overrides.apply(&mut params)?;
    let mut header = vec!["evict KiB"];
    if !a.model_only {
        header.extend(["native p10 ns", "native p50 ns", "native p90 ns"]);
    }
    header.push("model p50 ns");
    let mut t = Table::new(
        format!(
            "anonymous fault after reading an eviction buffer: {} faults{}; model on {}",
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
            let mut ns = native::fault_times(kib, a.faults)?;
            ns.sort_by(f64::total_cmp);
            for (j, q) in [0.1, 0.5, 0.9].into_iter().enumerate() {
                native[i][j].push(ns[((ns.len() - 1) as f64 * q).round() as usize]);
            }
        }
    }
    for (&kib, pct) in a.evict_kib.iter().zip(native) {
        let mut row = vec![kib.to_string()];
        if !a.model_only {
            row.extend(pct.into_iter().map(|v| format!("{:.0}", median(v))));
        }
        let mut k = Kernel::boot_with(
            m.clone(),
            defense::parse_list("none")?,
            &params,
            Default::default(),
        );
        let model = evict_fault::run(&mut k, kib, a.faults.min(15))?;
        row.push(format!("{:.0}", model.median_ns()));
        t.push(row);
    }
    print!("{t}");
    Ok(())
}
