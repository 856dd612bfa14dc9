//! `kharden sweep FILE`: a sweep file's points on every core (or on a Ray cluster), one
//! Parquet row per point, resumed where a previous run stopped.

use kharden::experiment::sweep_file::{self, Options, Sweep};
use kharden::params::Overrides;
use kharden::{Error, Result};
use std::path::{Path, PathBuf};

/// Where a sweep file's rows go unless `--output` says: beside it, as NAME.parquet.
pub fn default_output(file: &str) -> PathBuf {
    Path::new(file).with_extension("parquet")
}

pub fn run(
    file: &str,
    output: Option<&str>,
    threads: usize,
    ray: Option<&str>,
    overrides: &Overrides,
) -> Result<()> {
    let sweep = Sweep::load(file, overrides, super::defenses::EXTENSIONS)?;
    let output = output.map_or_else(|| default_output(file), PathBuf::from);
    if let Some(address) = ray {
        return on_ray(file, &output, address, overrides);
    }
    let mut progress = kharden_trace::progress::Progress::on_terminal();
    let started = std::time::Instant::now();
    let summary = sweep_file::run_to_file(
        &sweep,
        &output,
        Options {
            threads,
            ..Options::default()
        },
        super::defenses::EXTENSIONS,
        &mut |done, total| progress.show_bar(done, total, "points"),
    )?;
    progress.clear();
    let (rows, _) = sweep_file::read(&output)?;
    for r in rows.iter().filter(|r| r.error().is_some()) {
        eprintln!("failed: {}: {}", r.key, r.error().unwrap_or_default());
    }
    eprintln!(
        "sweep: {} points: {} already in {}, {} ran ({} failed) in {:.1} s; wrote {}",
        summary.points,
        summary.skipped,
        output.display(),
        summary.ran,
        summary.failed,
        started.elapsed().as_secs_f64(),
        output.display()
    );
    Ok(())
}

/// `--ray ADDRESS`: the Python package runs one Ray task per point and writes the same file;
/// a chosen `--footprints` file goes with every task.
fn on_ray(file: &str, output: &Path, address: &str, overrides: &Overrides) -> Result<()> {
    let mut cmd = std::process::Command::new("python3");
    cmd.args(["-m", "kharden.ray_sweep", file, "--address", address])
        .arg("--output")
        .arg(output);
    // The footprints given (--footprints) go to the workers as texts.
    if let Some(p) = overrides
        .recording
        .as_ref()
        .and_then(|r| r.portable.as_ref())
    {
        cmd.arg("--footprints").arg(&p.place);
    }
    for (p, v) in &overrides.software {
        cmd.arg("--set").arg(format!("{p}={v}"));
    }
    for (p, v) in &overrides.machine {
        cmd.arg("--set").arg(format!("machine.{p}={v}"));
    }
    let status = cmd.status().map_err(|e| {
        Error::at(
            "--ray",
            format!("cannot run python3 ({e}): the Ray path needs Python with the kharden package and ray (README, Optional: Python and Ray)"),
        )
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(Error::at(
            "--ray",
            format!("the Ray sweep failed ({status}); its error is above"),
        ))
    }
}
