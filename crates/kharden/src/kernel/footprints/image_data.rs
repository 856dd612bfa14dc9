//! The kernel image's data each footprint path reads and writes (kernels/*-memtrace.toml,
//! written by scripts/kernel_memtrace/): every data access of kernel code, traced under qemu
//! TCG by a plugin while the driver's scenarios ran on Debian's 6.1 kernel. The sampled
//! recording (footprint.rs) sees instructions only; this file gives, per path, the lines of
//! rodata, data and bss every operation touches (as offsets from the section's start), its
//! recurring direct-map lines (guest physical addresses) and kernel-stack lines, and how many
//! lines of each region (direct map, vmalloc stacks, vmemmap, cpu_entry_area, user memory) it
//! touches (docs/design/kernel-data.md).

use super::footprint::{from_toml, read_file};
use super::path_footprint::LINE_BYTES;
use crate::kernel::memory::layout::KERNEL_STACK_BYTES;
use crate::{Error, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// The committed measurement of Debian's 6.1 kernel.
pub const BUILTIN_PLACE: &str = "kernels/linux-6.1.0-47-amd64-memtrace.toml";
pub const BUILTIN: &str = include_str!("../../../../../kernels/linux-6.1.0-47-amd64-memtrace.toml");

/// The image sections whose recurring lines are listed by offset.
pub const LISTED: [&str; 3] = ["rodata", "data", "bss"];
/// Other places whose recurring lines are listed: the direct map (by guest physical line) and
/// the kernel stack (by line within it).
pub const LISTED_ELSEWHERE: [&str; 2] = ["direct_map", "stack"];
/// Every region a line can be classed in.
pub const REGIONS: [&str; 12] = [
    "rodata",
    "data",
    "bss",
    "init",
    "text",
    "direct_map",
    "vmalloc",
    "vmemmap",
    "cpu_entry_area",
    "user",
    "modules",
    "other",
];

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageData {
    pub kernel_release: String,
    /// The driver's loop scale in the guest.
    pub scale: f64,
    pub commands: Vec<String>,
    /// Share of a window's operations that must touch a line for it to be every one's.
    pub recurring_share: f64,
    pub sections: BTreeMap<String, Section>,
    pub paths: BTreeMap<String, PathData>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Section {
    /// Virtual address in the traced kernel (hex).
    pub start: String,
    pub bytes: u64,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathData {
    pub windows: u64,
    pub ops: u64,
    /// Recurring lines of each listed section, as line offsets from its start, ascending.
    pub rodata_lines: Vec<u64>,
    pub data_lines: Vec<u64>,
    pub bss_lines: Vec<u64>,
    /// Recurring direct-map lines (slab objects, per-CPU areas, the task), as the guest's
    /// physical address / 64, ascending: one guest, so two paths' common line is one object.
    #[serde(default)]
    pub direct_map_lines: Vec<u64>,
    /// Recurring kernel-stack lines, as offset / 64 within the 16 KiB stack, ascending.
    #[serde(default)]
    pub stack_lines: Vec<u64>,
    /// Regions the path touched (none listed: it touched nothing).
    #[serde(default)]
    pub regions: BTreeMap<String, RegionUse>,
}

/// What a path does to one region per operation.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegionUse {
    /// Lines touched by at least `recurring_share` of a window's operations (median window).
    pub recurring: f64,
    /// Further distinct lines per operation.
    pub other_per_op: f64,
    pub reads_per_op: f64,
    pub writes_per_op: f64,
}

impl PathData {
    /// The recurring line offsets of listed section `name`.
    pub fn lines(&self, name: &str) -> &[u64] {
        match name {
            "rodata" => &self.rodata_lines,
            "data" => &self.data_lines,
            "bss" => &self.bss_lines,
            "direct_map" => &self.direct_map_lines,
            "stack" => &self.stack_lines,
            _ => &[],
        }
    }
}

impl ImageData {
    pub fn builtin() -> &'static ImageData {
        static D: OnceLock<ImageData> = OnceLock::new();
        D.get_or_init(|| {
            ImageData::parse(BUILTIN_PLACE, BUILTIN).expect("committed image-data file is valid")
        })
    }

    /// The committed file, or the file at `path`.
    pub fn load(path: Option<&str>) -> Result<ImageData> {
        match path {
            None => Ok(ImageData::builtin().clone()),
            Some(p) => ImageData::parse(p, &read_file(p, "image-data file")?),
        }
    }

    /// Parses and validates; `place` names the file in errors.
    pub fn parse(place: &str, text: &str) -> Result<ImageData> {
        let d: ImageData = from_toml(place, text)?;
        d.validate().map_err(|e| Error::at(place, e))?;
        Ok(d)
    }

    pub fn path(&self, name: &str) -> Option<&PathData> {
        self.paths.get(name)
    }

    /// Bytes of section `name` (0 when the file does not give it).
    pub fn section_bytes(&self, name: &str) -> u64 {
        self.sections.get(name).map_or(0, |s| s.bytes)
    }

    fn validate(&self) -> std::result::Result<(), String> {
        if !(self.scale > 0.0 && self.scale.is_finite()) {
            return Err(format!(
                "scale: expected a positive number, got {}",
                self.scale
            ));
        }
        if !(self.recurring_share > 0.0 && self.recurring_share <= 1.0) {
            return Err(format!(
                "recurring_share: expected a share in (0, 1], got {}",
                self.recurring_share
            ));
        }
        for (name, s) in &self.sections {
            let start = s.start.strip_prefix("0x").unwrap_or(&s.start);
            if u64::from_str_radix(start, 16).is_err() {
                return Err(format!(
                    "sections.{name}.start: expected a hex address, got '{}'",
                    s.start
                ));
            }
        }
        for section in LISTED {
            if !self.sections.contains_key(section) {
                return Err(format!("sections: expected a '{section}' section"));
            }
        }
        for (name, p) in &self.paths {
            if p.ops == 0 || p.windows == 0 {
                return Err(format!(
                    "paths.{name}: expected at least one window and one operation"
                ));
            }
            for section in LISTED.into_iter().chain(LISTED_ELSEWHERE) {
                let limit = match section {
                    "direct_map" => u64::MAX,
                    "stack" => KERNEL_STACK_BYTES / LINE_BYTES,
                    s => self.section_bytes(s) / LINE_BYTES,
                };
                let lines = p.lines(section);
                if let Some(w) = lines.windows(2).find(|w| w[0] >= w[1]) {
                    return Err(format!(
                        "paths.{name}.{section}_lines: expected ascending offsets, got {} then {}",
                        w[0], w[1]
                    ));
                }
                if let Some(&l) = lines.iter().find(|&&l| l >= limit) {
                    return Err(format!(
                        "paths.{name}.{section}_lines: line {l} lies past the {section}'s {limit} lines"
                    ));
                }
            }
            for (region, u) in &p.regions {
                if !REGIONS.contains(&region.as_str()) {
                    return Err(format!(
                        "paths.{name}.regions: unknown region '{region}', expected one of {}",
                        REGIONS.join(", ")
                    ));
                }
                let figures = [u.recurring, u.other_per_op, u.reads_per_op, u.writes_per_op];
                if figures.iter().any(|v| !(v.is_finite() && *v >= 0.0)) {
                    return Err(format!(
                        "paths.{name}.regions.{region}: expected non-negative finite figures"
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = r#"
kernel_release = "6.1.0"
scale = 0.01
commands = ["x"]
recurring_share = 0.5
[sections]
rodata = { start = "0xffffffff82000000", bytes = 4096 }
data = { start = "0xffffffff82a00000", bytes = 4096 }
bss = { start = "0xffffffff8330d000", bytes = 4096 }
[paths."getppid"]
windows = 1
ops = 10
rodata_lines = [1, 2]
data_lines = []
bss_lines = [63]
direct_map_lines = [7, 1214216]
stack_lines = [255]
regions.direct_map = { recurring = 17, other_per_op = 0.1, reads_per_op = 50, writes_per_op = 30 }
"#;

    #[test]
    fn the_committed_file_is_valid_and_covers_the_syscall_paths() {
        let d = ImageData::builtin();
        for name in [
            "getppid",
            "fork",
            "kill",
            "mount-proc",
            "fault-anon",
            "open-close",
        ] {
            assert!(d.path(name).is_some(), "{name} missing");
        }
    }

    #[test]
    fn a_malformed_file_is_refused_with_its_place() {
        assert!(ImageData::parse("m.toml", ONE).is_ok());
        let cases = [
            (
                "bss_lines = [63]",
                "bss_lines = [64]",
                "line 64 lies past the bss's 64 lines",
            ),
            (
                "stack_lines = [255]",
                "stack_lines = [256]",
                "stack_lines: line 256 lies past the stack's 256 lines",
            ),
            (
                "direct_map_lines = [7, 1214216]",
                "direct_map_lines = [1214216, 7]",
                "direct_map_lines: expected ascending offsets",
            ),
            (
                "rodata_lines = [1, 2]",
                "rodata_lines = [2, 1]",
                "expected ascending offsets",
            ),
            (
                "regions.direct_map",
                "regions.heap",
                "unknown region 'heap'",
            ),
            ("recurring = 17", "recurring = -1", "non-negative finite"),
            (
                "scale = 0.01",
                "scale = 0",
                "scale: expected a positive number",
            ),
            (
                "ops = 10",
                "ops = 0",
                "at least one window and one operation",
            ),
            ("\"0xffffffff82000000\"", "\"zz\"", "expected a hex address"),
        ];
        for (from, to, want) in cases {
            let e = ImageData::parse("m.toml", &ONE.replace(from, to))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("m.toml"), "{e}");
            assert!(e.contains(want), "{to}: {e}");
        }
        let e = ImageData::parse("m.toml", "scale = [")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("m.toml"), "{e}");
    }
}
