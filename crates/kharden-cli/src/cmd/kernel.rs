//! `kharden kernel record-footprint | footprint [show PATH | compare [PATH] | data [PATH]] |
//! evict-fault | drive SCENARIO`.
use clap::{Args as ClapArgs, Subcommand};
use kharden::kernel::footprints::footprint::Footprints;
use kharden::kernel::footprints::path_footprint::pages_of;
use kharden::kernel::footprints::traced::{base_name, completeness, TracedFootprints};
use kharden::kernel::paths::table::{KernelPaths, EMPTY_SYSCALL};
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
    /// Print the cc flags the execve scenario builds its exec_chain with, for a guest without
    /// a compiler (scripts/kernel_ftrace/run.sh prebuilds it).
    #[command(hide = true)]
    ExecChainFlags {
        /// With window markers (KHARDEN_WINDOW_MARKERS set: scripts/kernel_memtrace/).
        #[arg(long)]
        markers: bool,
    },
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
    /// This host's machine profile, which the model derives each path's work against: a
    /// library name or a TOML file (default: `machines detect` now, written beside the
    /// output as OUTPUT-host.toml).
    #[arg(long, value_name = "NAME|FILE")]
    host_machine: Option<String>,
}

#[derive(ClapArgs)]
struct FootprintArgs {
    /// A footprint file (default: the committed kernels/ recording).
    #[arg(long, value_name = "FILE")]
    file: Option<String>,
    #[command(subcommand)]
    show: Option<View>,
}

#[derive(Subcommand)]
enum View {
    /// One path's functions, pages and lines.
    Show {
        path: String,
        /// Also list every estimated line index.
        #[arg(long)]
        lines: bool,
    },
    /// How complete the sampled recording is: each path's functions as ftrace saw them on
    /// a traced kernel (scripts/kernel_ftrace/) against the recording's.
    Compare {
        /// A trace file (default: the committed kernels/linux-6.1.0-47-amd64-ftrace.toml).
        #[arg(long, value_name = "FILE")]
        traced: Option<String>,
        /// List one path's per-operation functions the recording lacks, and the reverse.
        path: Option<String>,
    },
    /// The data lines each path touched on a traced kernel (scripts/kernel_memtrace/), by
    /// region, beside the lines the model touches.
    Data {
        /// A memtrace file (default: the committed kernels/linux-6.1.0-47-amd64-memtrace.toml).
        #[arg(long, value_name = "FILE")]
        memtrace: Option<String>,
        /// Show one path's regions and its rodata, data and bss lines.
        path: Option<String>,
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
        Action::ExecChainFlags { markers } => {
            println!(
                "{}",
                kharden_footprint::driver::exec_chain_flags(markers).join(" ")
            );
            Ok(())
        }
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
    let host_machine = recording_host(a.host_machine.as_deref(), a.output.as_deref())?;
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
        host_machine,
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

/// The recording host's profile as the footprint file will name it: the one given (checked
/// to load), or this host detected now and written beside `output` (named relative to it).
fn recording_host(given: Option<&str>, output: Option<&str>) -> kharden::Result<String> {
    if let Some(m) = given {
        kharden::machine::load(m).map_err(|e| kharden::Error::at("--host-machine", e))?;
        let absolute = std::path::Path::new(m).canonicalize();
        return Ok(match absolute {
            Ok(p) if kharden::machine::is_path(m) => p.display().to_string(),
            _ => m.to_string(),
        });
    }
    let output = output.ok_or_else(|| {
        kharden::Error::at(
            "--host-machine",
            "expected with no -o: a detected profile is written beside the output file",
        )
    })?;
    let out = std::path::Path::new(output);
    let stem = out
        .file_stem()
        .map_or("footprints".into(), |s| s.to_string_lossy());
    let file = format!("{stem}-host.toml");
    let d = kharden::machine::detect::detect(&Default::default())?;
    let place = out.with_file_name(&file).display().to_string();
    std::fs::write(&place, &d.text)
        .map_err(|e| kharden::machine::detect::write_error(&place, e))?;
    eprintln!("kharden: this host's profile (machines detect) written to {place}");
    Ok(file)
}

fn footprint(a: FootprintArgs) -> kharden::Result<()> {
    let f = Footprints::load(a.file.as_deref())?;
    let ghz = f.kernel.host_ghz;
    let paths = KernelPaths::compile(&f, &f.host_profile()?)?;
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
                "work cycles: a path's p10 latency minus the empty syscall's ({EMPTY_SYSCALL}), minus the difference of their modelled warm-loop cache stalls on {} (kernel/paths/table.rs)",
                f.kernel.host_machine
            );
            for &(name, _) in kharden::kernel::params::LATENCIES_TIMED_APART {
                print_timed_apart(&paths, name);
            }
            for d in kharden::kernel::footprints::derived::DERIVED {
                if f.path(d.name).is_some() {
                    println!(
                        "{}: derived from {}, less the functions its code skips, its latency the share of the samples left, ESTIMATE (kernel/footprints/derived.rs): {}",
                        d.name, d.from, d.why
                    );
                }
            }
            Ok(())
        }
        Some(View::Show { path, lines }) => {
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
            print_timed_apart(&paths, &p.name);
            let host = p.instrumentation_share();
            if host > 0.0 {
                println!(
                    "the recording host's BPF programs: {:.1}% of the path's samples, left out of its lines (their time stays in the latency)",
                    100.0 * host
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
        Some(View::Compare { traced, path }) => compare(&f, traced.as_deref(), path.as_deref()),
        Some(View::Data { memtrace, path }) => {
            super::footprint_data::show(&paths, memtrace.as_deref(), path.as_deref())
        }
    }
}

/// `kharden kernel footprint compare`: the sampled recording `f` against a traced kernel.
fn compare(f: &Footprints, traced: Option<&str>, path: Option<&str>) -> kharden::Result<()> {
    let t = TracedFootprints::load(traced)?;
    println!(
        "sampled: kernel {} (perf cpu-clock on the recording host); traced: kernel {} (ftrace function tracer under qemu)",
        f.kernel.release, t.kernel.release
    );
    if let Some(name) = path {
        let (s, tp) = f.path(name).zip(t.path(name)).ok_or_else(|| {
            kharden::Error::new(format!(
                "compare: path '{name}' is not in both files: expected one of {}",
                f.names()
                    .into_iter()
                    .filter(|n| t.path(n).is_some())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        let (absent, here) = (t.absent(), t.recording_functions());
        let c = completeness(tp, s, &absent, &here);
        println!(
            "{name}: {} of the {} functions traced on every operation are in the recording",
            c.per_op_in_sampled, c.per_op
        );
        for (fun, per_op) in &c.missing {
            let why = if absent.contains(base_name(fun)) {
                "not in the recording's kernel"
            } else {
                "in the recording's kernel, not sampled"
            };
            println!("  {why}: {fun} ({per_op:.2} calls per operation)");
        }
        for fun in &c.sampled_not_traced {
            let b = base_name(fun);
            let why = if here.absent.contains(b) {
                "not in the traced kernel"
            } else if here.untraceable.contains(b) {
                "untraceable there"
            } else {
                "traceable there, not run"
            };
            println!("  sampled, never traced ({why}): {fun}");
        }
        return Ok(());
    }
    let mut table = Table::new(
        "",
        &[
            "path",
            "traced ops",
            "fns per op",
            "in recording",
            "missing: not in its kernel",
            "lines per op",
            "missing lines in its kernel",
            "pages per op",
            "recording lines est",
            "recording pages est",
            "sampled not traced",
            "of them traceable, not run",
        ],
    );
    let (absent, here) = (t.absent(), t.recording_functions());
    let (mut all, mut found, mut renamed) = (0, 0, 0);
    let (mut lines, mut missed_lines) = (0, 0);
    for s in &f.path {
        let Some(tp) = t.path(&s.name).filter(|p| p.ops > 0) else {
            continue;
        };
        let c = completeness(tp, s, &absent, &here);
        all += c.per_op;
        found += c.per_op_in_sampled;
        renamed += c.missing_absent;
        lines += c.traced_lines;
        missed_lines += c.missing_present_lines;
        table.push(vec![
            s.name.clone(),
            tp.ops.to_string(),
            c.per_op.to_string(),
            c.per_op_in_sampled.to_string(),
            c.missing_absent.to_string(),
            c.traced_lines.to_string(),
            c.missing_present_lines.to_string(),
            c.traced_pages.to_string(),
            c.sampled_lines.to_string(),
            c.sampled_pages.to_string(),
            c.sampled_not_traced.len().to_string(),
            c.sampled_not_run.to_string(),
        ]);
    }
    print!("{table}");
    let comparable = all - renamed;
    println!(
        "{found} of {all} functions traced on every operation ({:.0}%) are in the recording, by name (clone suffixes dropped); {renamed} of the others have no symbol in the recording's kernel{}; of the {comparable} that do, the recording has {:.0}%",
        100.0 * found as f64 / all.max(1) as f64,
        t.recording_kernel.as_ref().map_or(String::new(), |r| format!(" (symbols of {})", r.symbols_from)),
        100.0 * found as f64 / comparable.max(1) as f64
    );
    println!(
        "lines: the per-operation functions the recording's kernel has but the recording lacks span {missed_lines} of the {lines} traced lines ({:.0}%), an upper bound on the text its sampling missed (6.18's path may skip them: faults take per-VMA locks there, cond_resched is patched out)",
        100.0 * missed_lines as f64 / lines.max(1) as f64
    );
    println!("traced lines are whole functions, the recording's estimated lines run to each function's furthest sample; notrace and noinstr code (entry, the scheduler's core) is never traced, the recording lists it from the source");
    Ok(())
}

/// For a path whose work the model derives from a latency timed apart from the recording
/// (fork, exit), that latency and the work it gives.
fn print_timed_apart(paths: &KernelPaths, name: &str) {
    let timed = kharden::kernel::params::LATENCIES_TIMED_APART
        .iter()
        .find(|(path, _)| *path == name);
    let (Some(&(_, param)), Some(id)) = (timed, paths.id(name)) else {
        return;
    };
    let ns = kharden::params::Params::linux().num(param);
    println!(
        "{name}: the model's work is derived by the same rule from {param} = {ns:.0} ns (kernels/linux.toml), timed apart from the recording: {:.0} cycles",
        paths.work_from_native_ns(id, ns)
    );
}
