//! `kharden sweep`: XPFO's cost against the number of CPUs, per machine family.

use clap::Args as ClapArgs;
use kharden::experiment::sweep;
use kharden::report::svg::{line_chart, Series};
use kharden::{machine, Error, Result};

#[derive(ClapArgs)]
pub struct Args {
    /// A sweep file (TOML: machines, defenses, workloads, parameter values; see
    /// examples/*.toml). Without it: the built-in XPFO-against-CPUs sweep.
    #[arg(conflicts_with_all = ["family", "cpus", "svg", "json", "window_cpu_ms"])]
    file: Option<String>,
    /// Sweep file: the Parquet output (default: FILE with .parquet); rows already there
    /// are kept and their points skipped.
    #[arg(long, short, requires = "file")]
    output: Option<String>,
    /// Sweep file: threads running points (default: one per core).
    #[arg(long, default_value_t = 0, requires = "file")]
    threads: usize,
    /// Sweep file: run the points as Ray tasks on the cluster at ADDRESS ("auto", or
    /// "local" for a Ray started on this machine); needs the Python package.
    #[arg(long, requires = "file")]
    ray: Option<String>,
    /// Machine families to scale (repeatable). Default: xeon-platinum-8160 (IPIs) and
    /// epyc-7763-2s (INVLPGB broadcast invalidation).
    #[arg(long)]
    family: Vec<String>,
    /// CPU counts (hardware threads), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "4,8,16,32,64,128,256")]
    cpus: Vec<u32>,
    /// CPU time of the build measured per point, milliseconds.
    #[arg(long, default_value_t = 300.0)]
    window_cpu_ms: f64,
    /// Parameters by path, e.g. a what-if cost per XPFO user page: `--set
    /// xpfo.page_cycles=300`.
    #[command(flatten)]
    set: super::params::SetArgs,
    /// Write the plot here (SVG).
    #[arg(long)]
    svg: Option<String>,
    /// Points as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<()> {
    if let Some(file) = &args.file {
        let overrides = args.set.resolve()?;
        return super::sweep_file::run(
            file,
            args.output.as_deref(),
            args.threads,
            args.ray.as_deref(),
            &overrides,
        );
    }
    let families = if args.family.is_empty() {
        vec!["xeon-platinum-8160".to_string(), "epyc-7763-2s".to_string()]
    } else {
        args.family.clone()
    };
    let overrides = args.set.resolve()?;
    let mut params = kharden::params::Params::linux();
    overrides.apply(&mut params)?;
    let profiles = families
        .iter()
        .map(|f| overrides.apply_machine(&machine::load(f)?))
        .collect::<Result<Vec<_>>>()?;
    if args.cpus.is_empty() || args.cpus.iter().any(|&c| c == 0 || c > 1024) {
        return Err(Error::new("--cpus: expected CPU counts between 1 and 1024"));
    }
    if !(args.window_cpu_ms > 0.0 && args.window_cpu_ms <= 100_000.0) {
        return Err(Error::new("--window-cpu-ms: expected 0 < ms <= 100000"));
    }
    // sweep::run reports no progress of its own: one line says what is running.
    let mut progress = kharden_trace::progress::Progress::on_terminal();
    progress.show_now(&format!(
        "sweep: {} machine families x {} sizes, each under every configuration...",
        profiles.len(),
        args.cpus.len()
    ));
    let points = sweep::run(&profiles, &args.cpus, args.window_cpu_ms, &params)?;
    progress.clear();
    if args.json {
        let v = serde_json::json!({ "points": points, "set": overrides.to_json(), "params": params.to_json() });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| Error::new(e.to_string()))?
        );
    } else {
        print!("{}", sweep::table(&points));
    }
    if let Some(path) = &args.svg {
        let mut series = vec![];
        for (fi, f) in families.iter().enumerate() {
            for (label, _) in &sweep::CONFIGS[1..] {
                let pts = points
                    .iter()
                    .filter(|p| &p.family == f && p.config == *label)
                    .map(|p| (p.cpus as f64, p.ratio))
                    .collect();
                series.push(Series {
                    label: format!("{f}: {label}"),
                    points: pts,
                    dashed: fi % 2 == 1,
                });
            }
        }
        let svg = line_chart(
            "XPFO system time relative to the unhardened build (make -j 5/8 of the CPUs)",
            "hardware threads",
            "system time / baseline",
            &series,
        );
        std::fs::write(path, svg).map_err(|e| Error::at(path, format!("cannot write: {e}")))?;
        eprintln!("wrote {path}");
    }
    Ok(())
}
