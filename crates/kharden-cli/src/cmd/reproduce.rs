//! `kharden reproduce NAME|all [--json|--csv]`: published vs simulated for each table row.

use clap::Args as ClapArgs;
use kharden::params::Overrides;
use kharden::report::{summary, Reproduction};
use kharden::{experiment, Error, Result};

#[derive(ClapArgs)]
pub struct Args {
    /// Experiment name, "all", or a path to an experiment file (*.toml).
    name: String,
    /// Machine-readable output: one JSON object per experiment (a JSON array for "all").
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Rows as CSV: experiment,label,unit,published,simulated,error_pct,tolerance_pct,fitted,difference_pp,tolerance_pp (gains compared in percentage points),baseline,added_published_pct,added_simulated_pct,added_error_pct (a mechanism row's cost over its baseline),verdict.
    #[arg(long)]
    csv: bool,
    /// For "all": every experiment's tables, breakdowns and known-miss reasons instead of the
    /// one-screen summary (`reproduce NAME` always prints them).
    #[arg(long, conflicts_with_all = ["json", "csv"])]
    detail: bool,
    /// Write the charts the reproductions draw (NAME.svg) into this directory; for "all" also
    /// added-costs.svg (each mechanism's M/B, published against simulated) and rows.svg
    /// (every other row, simulated over published), each with its tolerance band.
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
    if args.json {
        let text = if args.name == "all" {
            serde_json::to_string_pretty(reps)
        } else {
            serde_json::to_string_pretty(&reps[0])
        };
        println!("{}", text.map_err(|e| Error::new(e.to_string()))?);
    } else if args.csv {
        print!("{}", kharden::report::csv::reproductions(reps));
    } else if args.name == "all" && !args.detail {
        print!("{}", summary::one_screen(reps, terminal_width()));
    } else {
        for rep in reps {
            println!("{rep}");
        }
        println!("{}", summary::Counts::of(reps).line(reps.len()));
    }
    Ok(())
}

/// Columns of the terminal on standard output (COLUMNS, else the tty's, else 100).
fn terminal_width() -> usize {
    if let Some(c) = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()) {
        return c;
    }
    // SAFETY: TIOCGWINSZ writes a winsize into the struct we own; a non-tty fails cleanly.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    if ok && ws.ws_col > 0 {
        usize::from(ws.ws_col)
    } else {
        100
    }
}

/// Writes every figure of `reps` to `dir`/NAME.svg.
fn write_figures(dir: &std::path::Path, reps: &[Reproduction]) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::new(format!("--figures {}: {e}", dir.display())))?;
    // Every run draws its reproductions' own charts; `all` adds the pictures of the results.
    let summary = if reps.len() > 1 {
        kharden::report::results_svg::figures(reps)
    } else {
        vec![]
    };
    for f in reps.iter().flat_map(|r| &r.figures).chain(&summary) {
        let path = dir.join(format!("{}.svg", f.name));
        std::fs::write(&path, &f.svg)
            .map_err(|e| Error::new(format!("--figures: writing {}: {e}", path.display())))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
