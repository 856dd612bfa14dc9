//! The bodies of the fuzz targets (fuzz/fuzz_targets), here so that the regression corpus
//! (fuzz/regressions) replays through them under an ordinary `cargo test`. Each takes
//! arbitrary bytes and returns Ok or the one-line error it gave; none may panic, allocate
//! without bound or run without end.

use crate::format::TraceReader;
use crate::{replay, scratch::Scratch, stats};

fn one_line(e: String) -> String {
    assert!(!e.contains('\n'), "error message spans lines: {e}");
    e
}

/// Trace bytes through the reader, to the end or the first error.
pub fn trace_reader(data: &[u8]) -> Result<u64, String> {
    let r = TraceReader::new(data, "fuzz").map_err(|e| one_line(e.to_string()))?;
    let mut n = 0;
    for e in r {
        e.map_err(|e| one_line(e.to_string()))?;
        n += 1;
    }
    Ok(n)
}

/// Trace bytes through `trace stats`.
pub fn trace_stats(data: &[u8]) -> Result<(), String> {
    let r = TraceReader::new(data, "fuzz").map_err(|e| one_line(e.to_string()))?;
    let s = stats::compute(r).map_err(|e| one_line(e.to_string()))?;
    let _ = s.tables();
    Ok(())
}

/// Trace bytes replayed on a small machine (split, then the engine run).
pub fn replay_trace(data: &[u8]) -> Result<(), String> {
    let dir = Scratch::new("fuzz").map_err(|e| e.to_string())?;
    let trace = dir.path().join("t.trace");
    std::fs::write(&trace, data).map_err(|e| e.to_string())?;
    let ops = dir.path().join("ops");
    std::fs::create_dir(&ops).map_err(|e| e.to_string())?;
    let m = kharden::machine::load("ivybridge-i5-3550").expect("library machine");
    let k = kharden::kernel::Kernel::boot(m, vec![]);
    let split = replay::split(&trace, &ops, &k.paths).map_err(|e| one_line(e.to_string()))?;
    let program = replay::root_program(&split, k.paths.clone(), 3.0, 1);
    replay::drive(k, program, |_| Ok(())).map_err(|e| one_line(e.to_string()))?;
    Ok(())
}

/// Bytes as a machine profile.
pub fn machine_profile(data: &[u8]) -> Result<(), String> {
    let text = std::str::from_utf8(data).map_err(|_| "not UTF-8".to_string())?;
    kharden::machine::parse("fuzz.toml", text).map_err(|e| one_line(e.to_string()))?;
    Ok(())
}

/// Bytes as a published CPUID dump, read for its TLB arrays (`kharden machines cpuid-tlbs`).
pub fn cpuid_dump(data: &[u8]) -> Result<(), String> {
    let text = std::str::from_utf8(data).map_err(|_| "not UTF-8".to_string())?;
    kharden::machine::detect::tlbs_from_cpuid_dump("fuzz.txt", text)
        .map_err(|e| one_line(e.to_string()))?;
    Ok(())
}

/// Bytes as a kernel footprint file: the sampled recording's format, the memtrace one, else
/// the traced one (whichever their keys name).
pub fn kernel_footprint(data: &[u8]) -> Result<(), String> {
    use kharden::kernel::footprints::{
        footprint::Footprints, image_data::ImageData, traced::TracedFootprints,
    };
    let text = std::str::from_utf8(data).map_err(|_| "not UTF-8".to_string())?;
    let r = if text.contains("host_ghz") {
        Footprints::parse("fuzz.toml", text).map(|_| ())
    } else if text.contains("recurring_share") {
        ImageData::parse("fuzz.toml", text).map(|_| ())
    } else {
        TracedFootprints::parse("fuzz.toml", text).map(|_| ())
    };
    r.map_err(|e| one_line(e.to_string()))
}

/// Bytes as an experiment file: the entry checks and the parse of either kind (not the run).
pub fn experiment_file(data: &[u8]) -> Result<(), String> {
    use kharden::experiment::{
        asi_table, flush_range, kbuild_table, kvm_spec, syscall_table, text_replication, validate,
    };
    let text = std::str::from_utf8(data).map_err(|_| "not UTF-8".to_string())?;
    let place = "fuzz.toml";
    validate::check(place, text).map_err(|e| one_line(e.to_string()))?;
    let kind = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("kind = "))
        .unwrap_or("");
    let parsed = if kind.contains("asi") {
        asi_table::parse(place, text).map(|_| ())
    } else if kind.contains("kbuild") {
        kbuild_table::parse(place, text).map(|_| ())
    } else if kind.contains("kvm") {
        kvm_spec::parse(place, text).map(|_| ())
    } else if kind.contains("text-replication") {
        text_replication::parse(place, text).map(|_| ())
    } else if kind.contains("flush-range") {
        flush_range::parse(place, text).map(|_| ())
    } else {
        syscall_table::parse(place, text).map(|_| ())
    };
    parsed.map_err(|e| one_line(e.to_string()))
}

/// Bytes as a sweep file: parsed, expanded and every point checked (not run).
pub fn sweep_file(data: &[u8]) -> Result<(), String> {
    use kharden::experiment::sweep_file::Sweep;
    let text = std::str::from_utf8(data).map_err(|_| "not UTF-8".to_string())?;
    let overrides = kharden::params::Overrides::default();
    Sweep::parse("fuzz.toml", text, &overrides, &[]).map_err(|e| one_line(e.to_string()))?;
    Ok(())
}
