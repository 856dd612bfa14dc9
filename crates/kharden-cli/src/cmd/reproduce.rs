//! `kharden reproduce NAME|all [--json|--csv]`: published vs simulated for each table row.

use clap::Args as ClapArgs;
use kharden::params::Overrides;
use kharden::report::Reproduction;
use kharden::{experiment, Error, Result};

#[derive(ClapArgs)]
pub struct Args {
    /// Experiment name, "all", or a path to an experiment file (*.toml).
    name: String,
    /// Machine-readable output: one JSON object per experiment (a JSON array for "all").
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Rows as CSV: experiment,label,unit,published,simulated,error_pct,tolerance_pct,fitted,difference_pp,tolerance_pp (gains compared in percentage points).
    #[arg(long)]
    csv: bool,
    /// Write the charts the reproductions draw (NAME.svg) into this directory.
    #[arg(long, value_name = "DIR")]
    figures: Option<std::path::PathBuf>,
    #[command(flatten)]
    set: super::params::SetArgs,
}

/// Every experiment kharden knows, in the order `reproduce all` runs them: the simulator's
/// own, then those run by other crates (refcount: native code and the arm64 cost model).
fn all_names() -> Vec<&'static str> {
    let mut names = experiment::names();
    names.push("refcount");
    names
}

fn run_one(name: &str, overrides: &Overrides) -> Result<Reproduction> {
    match name {
        "refcount" => kharden_refcount::reproduce(),
        _ => experiment::reproduce(name, overrides),
    }
}

pub fn run(args: Args) -> Result<()> {
    let overrides = args.set.resolve()?;
    if args.name.ends_with(".toml") {
        let text = kharden::machine::validate::read_bounded(&args.name, "experiment file")?;
        let rep = experiment::run_text(&args.name, &text, &overrides)?;
        return print(&args, &[rep]);
    }
    let names: Vec<&str> = if args.name == "all" {
        all_names()
    } else if all_names().contains(&args.name.as_str()) {
        vec![args.name.as_str()]
    } else {
        return Err(Error::new(format!(
            "reproduce: unknown experiment '{}': expected all or one of {}",
            args.name,
            all_names().join(", ")
        )));
    };
    let mut reps = vec![];
    let mut progress = kharden_trace::progress::Progress::on_terminal();
    for (i, n) in names.iter().enumerate() {
        progress.show_bar(i, names.len(), &format!("reproduce: {n}"));
        reps.push(run_one(n, &overrides)?);
    }
    progress.clear();
    print(&args, &reps)
}

fn print(args: &Args, reps: &[Reproduction]) -> Result<()> {
    if let Some(dir) = &args.figures {
        write_figures(dir, reps)?;
    }
    if !args.json && !args.csv {
        for rep in reps {
            println!("{rep}");
        }
    }
    if args.json {
        let text = if args.name == "all" {
            serde_json::to_string_pretty(reps)
        } else {
            serde_json::to_string_pretty(&reps[0])
        };
        println!("{}", text.map_err(|e| Error::new(e.to_string()))?);
    } else if args.csv {
        print!("{}", kharden::report::csv::reproductions(reps));
    } else {
        let rows: usize = reps.iter().map(|r| r.rows.len()).sum();
        let predicted: Vec<&kharden::report::Row> =
            reps.iter().flat_map(|r| r.predicted_rows()).collect();
        let within = predicted.iter().filter(|r| !r.misses()).count();
        let fitted_rows: usize = reps.iter().map(|r| r.fitted_rows()).sum();
        let fitted: u32 = reps.iter().map(|r| r.fitted_parameters).sum();
        println!(
            "summary: {} experiments, {rows} published rows: {within} of {} predicted rows within tolerance, {fitted_rows} rows fitted ({fitted} fitted parameters)",
            reps.len(),
            predicted.len()
        );
    }
    Ok(())
}

/// Writes every figure of `reps` to `dir`/NAME.svg.
fn write_figures(dir: &std::path::Path, reps: &[Reproduction]) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::new(format!("--figures {}: {e}", dir.display())))?;
    for f in reps.iter().flat_map(|r| &r.figures) {
        let path = dir.join(format!("{}.svg", f.name));
        std::fs::write(&path, &f.svg)
            .map_err(|e| Error::new(format!("--figures: writing {}: {e}", path.display())))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
