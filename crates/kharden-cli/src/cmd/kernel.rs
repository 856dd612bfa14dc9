//! `kharden kernel record-footprint | footprint [show PATH] | evict-fault | drive SCENARIO`.
use clap::{Args as ClapArgs, Subcommand};
use kharden::kernel::footprint::{pages_of, Footprints};
use kharden::kernel::path::{KernelPaths, EMPTY_SYSCALL, RECORDING_HOST};
use kharden::report::table::Table;

#[derive(ClapArgs)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand)]
enum Action {
    /// Measure kernel path footprints on this host (needs root and perf): each path runs in a
    /// loop under `perf record -e cpu-clock:k`, then bare for its latency.
    RecordFootprint(RecordArgs),
    /// Summarise the footprint file (every path's counts), or show one path's text.
    Footprint(FootprintArgs),
    /// Time a kernel operation (an anonymous fault, getppid, open/close) on this host after
    /// reading an eviction buffer, beside the model's figure (the data of `reproduce
    /// evict-fault`).
    EvictFault(super::evict_fault::Args),
    /// Run one driver scenario and write its windows (the recorder runs this under perf).
    #[command(hide = true)]
    Drive(DriveArgs),
}

#[derive(ClapArgs)]
struct RecordArgs {
    /// Write the data file here (default: standard output).
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<String>,
    /// Record only this scenario (repeatable; default all).
    #[arg(long, value_name = "NAME")]
    scenario: Vec<String>,
    /// Loop counts of the recording, as a fraction of about a second of bare work per path.
    #[arg(long, default_value_t = 0.25)]
    scale: f64,
    /// Bare repeats per scenario for the latencies.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(1..))]
    latency_repeats: u32,
    /// Loop counts of a latency repeat, as a fraction of the recording's.
    #[arg(long, default_value_t = 0.1)]
    latency_scale: f64,
}

#[derive(ClapArgs)]
struct FootprintArgs {
    /// A footprint file (default: the committed kernels/ recording).
    #[arg(long, value_name = "FILE")]
    file: Option<String>,
    #[command(subcommand)]
    show: Option<Show>,
}

#[derive(Subcommand)]
enum Show {
    /// One path's functions, pages and lines.
    Show {
        path: String,
        /// Also list every estimated line index.
        #[arg(long)]
        lines: bool,
    },
}

#[derive(ClapArgs)]
struct DriveArgs {
    scenario: String,
    #[arg(long, value_name = "FILE")]
    windows: String,
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    #[arg(long, default_value_t = 1)]
    repeats: u32,
}

pub fn run(args: Args) -> kharden::Result<()> {
    match args.action {
        Action::RecordFootprint(a) => record(a),
        Action::Footprint(a) => footprint(a),
        Action::EvictFault(a) => super::evict_fault::run(a),
        Action::Drive(a) => {
            if !(a.scale > 0.0 && a.scale.is_finite()) {
                return Err(kharden::Error::at("--scale", "expected a positive number"));
            }
            let s = kharden_footprint::driver::scenario(&a.scenario)?;
            kharden_footprint::driver::drive(
                s,
                a.scale,
                a.repeats,
                std::path::Path::new(&a.windows),
            )
        }
    }
}

fn record(a: RecordArgs) -> kharden::Result<()> {
    for (flag, v) in [("--scale", a.scale), ("--latency-scale", a.latency_scale)] {
        if !(v > 0.0 && v.is_finite()) {
            return Err(kharden::Error::at(flag, "expected a positive number"));
        }
    }
    let work = std::env::temp_dir().join(format!("kharden-record-{}", std::process::id()));
    std::fs::create_dir_all(&work)
        .map_err(|e| kharden::Error::at(work.display(), format!("cannot create: {e}")))?;
    let invocation = std::iter::once("kharden".to_string())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let opts = kharden_footprint::Options {
        scenarios: a.scenario,
        scale: a.scale,
        latency_scale: a.latency_scale,
        latency_repeats: a.latency_repeats,
        invocation,
        work: &work,
    };
    let text = kharden_footprint::record_all(&opts, |m| eprintln!("kharden: {m}"));
    let _ = std::fs::remove_dir_all(&work);
    let text = text?;
    match a.output {
        Some(f) => std::fs::write(&f, text)
            .map_err(|e| kharden::Error::at(&f, format!("cannot write: {e}"))),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

fn footprint(a: FootprintArgs) -> kharden::Result<()> {
    let f = Footprints::load(a.file.as_deref())?;
    let ghz = f.kernel.host_ghz;
    let host = kharden::machine::load(RECORDING_HOST)?;
    let paths = KernelPaths::compile(&f, &host)?;
    match a.show {
        None => {
            println!(
                "kernel {} ({} text bytes), recorded at {ghz} GHz",
                f.kernel.release, f.kernel.text_bytes
            );
            let mut t = Table::new(
                "",
                &[
                    "path",
                    "samples",
                    "functions",
                    "src-only",
                    "lines sampled",
                    "lines est",
                    "lines whole",
                    "pages est",
                    "new lines last 10%",
                    "ns p10",
                    "cycles p10",
                    "work cycles",
                    "data B",
                ],
            );
            for (p, compiled) in f.path.iter().zip(&paths.paths) {
                let est = p.estimated_lines();
                let lat = p
                    .latency_ns
                    .map_or("-".to_string(), |l| format!("{:.0}", l[0]));
                let cyc = p
                    .latency_cycles(ghz)
                    .map_or("-".to_string(), |c| format!("{c:.0}"));
                t.push(vec![
                    p.name.clone(),
                    p.samples.to_string(),
                    p.functions.len().to_string(),
                    p.functions
                        .iter()
                        .filter(|u| u.samples() == 0)
                        .count()
                        .to_string(),
                    p.sampled_lines.len().to_string(),
                    est.len().to_string(),
                    p.whole_lines().len().to_string(),
                    pages_of(est.iter().copied()).len().to_string(),
                    p.new_lines_last_tenth.to_string(),
                    lat,
                    cyc,
                    compiled
                        .work_cycles
                        .map_or("-".to_string(), |c| format!("{c:.0}")),
                    p.data_bytes(&f.objects).to_string(),
                ]);
            }
            print!("{t}");
            println!(
                "work cycles: a path's p10 latency minus the empty syscall's ({EMPTY_SYSCALL}), minus the difference of their modelled warm-loop cache stalls on {RECORDING_HOST} (kernel/path.rs)"
            );
            Ok(())
        }
        Some(Show::Show { path, lines }) => {
            let p = f.path(&path).ok_or_else(|| {
                kharden::Error::new(format!(
                    "unknown path '{path}': expected one of {}",
                    f.names().join(", ")
                ))
            })?;
            let est = p.estimated_lines();
            println!(
                "{} (scenario {}): {} samples over {} ops; {} functions, {} lines sampled, {} estimated, {} whole; {} pages estimated ({} sampled); {} lines new in the last 10% of samples",
                p.name, p.scenario, p.samples, p.ops, p.functions.len(), p.sampled_lines.len(), est.len(), p.whole_lines().len(),
                pages_of(est.iter().copied()).len(), p.sampled_pages().len(), p.new_lines_last_tenth
            );
            if let Some(l) = p.latency_ns {
                println!(
                    "latency {:.1} ns p10 ({:.0} cycles at {ghz} GHz), median {:.1}, p90 {:.1}",
                    l[0],
                    l[0] * ghz,
                    l[1],
                    l[2]
                );
            }
            println!(
                "data (ESTIMATE): {} = {} bytes",
                p.data.join(", "),
                p.data_bytes(&f.objects)
            );
            let mut t = Table::new(
                "",
                &[
                    "function",
                    "offset",
                    "size",
                    "samples",
                    "reach",
                    "page",
                    "lines est",
                ],
            );
            for u in &p.functions {
                let r = u.estimated_lines();
                t.push(vec![
                    u.name().to_string(),
                    format!("{:#x}", u.offset()),
                    u.size().to_string(),
                    if u.samples() == 0 {
                        "source".to_string()
                    } else {
                        u.samples().to_string()
                    },
                    u.reach().to_string(),
                    (u.offset() / 4096).to_string(),
                    (r.end() - r.start() + 1).to_string(),
                ]);
            }
            print!("{t}");
            let pages: Vec<String> = pages_of(est.iter().copied())
                .iter()
                .map(|p| p.to_string())
                .collect();
            println!("pages (estimated): {}", pages.join(" "));
            if lines {
                let l: Vec<String> = est.iter().map(|l| l.to_string()).collect();
                println!("lines (estimated): {}", l.join(" "));
            }
            Ok(())
        }
    }
}
