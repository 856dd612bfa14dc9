//! Where the guest's kernel objects and user pages sit in guest-physical memory
//! (`guest.placement`): measured in a freshly booted Linux guest, packed into consecutive
//! frames, or scattered over its RAM. Under the TDP MMU this decides how many 2 MiB regions a
//! rebuilt root faults back, so it is a measurement where one exists.

use crate::arch::x86::PhysAddr;
use crate::error::{Error, Result};
use serde::Deserialize;

/// The measurement: workloads/ssdd-guest-placement.toml (its header says how it was made).
pub const BUILTIN: &str = include_str!("../../../../workloads/ssdd-guest-placement.toml");
const BUILTIN_PLACE: &str = "workloads/ssdd-guest-placement.toml";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Addresses traced in a freshly booted guest (`MeasuredPlacement`).
    Measured,
    /// Consecutive frames above the image, as successive buddy allocations of a fresh guest.
    Packed,
    /// Uniformly anywhere in RAM above the image, as in a long-running guest.
    Scattered,
}

impl Placement {
    pub const NAMES: &'static [&'static str] = &["measured", "packed", "scattered"];

    pub fn named(name: &str) -> Option<Placement> {
        [Placement::Measured, Placement::Packed, Placement::Scattered]
            .into_iter()
            .zip(Self::NAMES)
            .find(|(_, n)| **n == name)
            .map(|(p, _)| p)
    }
}

/// One process's objects: tracers (even indices) with the user pages their step touches,
/// tracees (odd) without.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessPlacement {
    /// The task_struct (three pages from here on: it is 8.4 KiB, in an order-3 slab).
    pub task: u64,
    pub signal: u64,
    pub sighand: u64,
    pub mm: u64,
    pub cred: u64,
    /// The four pages of the vmalloc'd kernel stack, lowest first.
    pub kstack: [u64; 4],
    /// Its page-table pages in allocation order, the PGD first.
    pub page_tables: Vec<u64>,
    pub data: Option<u64>,
    pub stack: Option<u64>,
    pub libc_data: Option<u64>,
}

/// The kernel half's page tables on the walks a step makes, below the PGD: per range, its
/// PUD, PMD and PTE tables (each level in the order the walks met them).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelTables {
    /// The kernel image (level3_kernel_pgt, level2_kernel_pgt).
    pub image: [Vec<u64>; 3],
    /// The direct map: its PUD, then a PMD per GiB walked (the objects' GiB first).
    pub direct_map: [Vec<u64>; 3],
    /// The vmalloc'd kernel stacks.
    pub vmalloc: [Vec<u64>; 3],
}

impl KernelTables {
    fn all(&self) -> impl Iterator<Item = u64> + '_ {
        [&self.image, &self.direct_map, &self.vmalloc]
            .into_iter()
            .flatten()
            .flatten()
            .copied()
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeasuredPlacement {
    /// The guest RAM of the measurement; a run must have the same.
    pub ram_mib: u64,
    /// Where the kernel image's .data and .bss start (the kernel half's boot page tables,
    /// PaX's per-CPU PGD).
    pub kernel_data: u64,
    pub kernel_bss: u64,
    /// CPU 0's per-CPU unit, and the offsets of the per-CPU symbols the step uses in it.
    pub percpu_unit: u64,
    pub percpu_current_task: u64,
    pub percpu_preempt_count: u64,
    pub percpu_runqueues: u64,
    pub user_text: u64,
    /// The pages of libc's waitpid, ptrace, sigaction (and restorer) and kill wrappers.
    pub libc_text: [u64; 4],
    pub kernel_tables: KernelTables,
    pub process: Vec<ProcessPlacement>,
}

impl MeasuredPlacement {
    /// The committed measurement (parsed once; checked by the tests, so this never fails in
    /// a build).
    pub fn builtin() -> &'static MeasuredPlacement {
        static P: std::sync::OnceLock<MeasuredPlacement> = std::sync::OnceLock::new();
        P.get_or_init(|| {
            parse(BUILTIN_PLACE, BUILTIN).expect("the committed placement file is valid")
        })
    }

    pub fn pairs(&self) -> u64 {
        self.process.len() as u64 / 2
    }

    pub fn page(addr: u64) -> PhysAddr {
        PhysAddr(addr & !0xfff)
    }
}

pub fn parse(place: &str, text: &str) -> Result<MeasuredPlacement> {
    let p: MeasuredPlacement = toml::from_str(text)
        .map_err(|e| Error::at(place, crate::machine::toml_message(&e, text)))?;
    let ram = p.ram_mib << 20;
    let inside = |what: &str, addr: u64| {
        if addr >= ram {
            Err(Error::at(
                place,
                format!(
                    "{what}: expected an address below ram_mib ({} MiB), got {addr:#x}",
                    p.ram_mib
                ),
            ))
        } else {
            Ok(())
        }
    };
    if p.ram_mib == 0 || p.process.len() < 2 || p.process.len() % 2 != 0 {
        return Err(Error::at(
            place,
            format!(
                "expected ram_mib > 0 and [[process]] tables in tracer/tracee pairs, got {} MiB and {} processes",
                p.ram_mib,
                p.process.len()
            ),
        ));
    }
    inside("kernel_data", p.kernel_data)?;
    inside("kernel_bss", p.kernel_bss)?;
    inside("percpu_unit", p.percpu_unit)?;
    for (name, offset) in [
        ("percpu_current_task", p.percpu_current_task),
        ("percpu_preempt_count", p.percpu_preempt_count),
        ("percpu_runqueues", p.percpu_runqueues),
    ] {
        if offset >= 2 << 20 {
            return Err(Error::at(
                place,
                format!("{name}: expected an offset in the 2 MiB per-CPU unit, got {offset:#x}"),
            ));
        }
        inside(name, p.percpu_unit + offset)?;
    }
    inside("user_text", p.user_text)?;
    for a in p.libc_text {
        inside("libc_text", a)?;
    }
    for a in p.kernel_tables.all() {
        inside("kernel_tables", a)?;
    }
    let t = &p.kernel_tables;
    if [&t.image, &t.direct_map, &t.vmalloc]
        .iter()
        .any(|levels| levels[0].is_empty() || levels[1].is_empty())
    {
        return Err(Error::at(
            place,
            "kernel_tables: expected a PUD and a PMD for each of image, direct_map and vmalloc",
        ));
    }
    for (i, q) in p.process.iter().enumerate() {
        let at = |field: &str| format!("process {i}: {field}");
        for (field, a) in [
            ("task", q.task + 3 * 4096 - 1),
            ("signal", q.signal),
            ("sighand", q.sighand),
            ("mm", q.mm),
            ("cred", q.cred),
        ] {
            inside(&at(field), a)?;
        }
        for a in q.kstack {
            inside(&at("kstack"), a)?;
        }
        if q.page_tables.is_empty() {
            return Err(Error::at(
                place,
                at("page_tables: expected the PGD and the tables under it, got none"),
            ));
        }
        for &a in &q.page_tables {
            inside(&at("page_tables"), a)?;
        }
        let user = [q.data, q.stack, q.libc_data];
        if i % 2 == 0 && user.iter().any(Option::is_none) {
            return Err(Error::at(
                place,
                at("data, stack, libc_data: expected in every tracer (even index)"),
            ));
        }
        for a in user.into_iter().flatten() {
            inside(&at("user page"), a)?;
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_measurement_loads() {
        let p = MeasuredPlacement::builtin();
        assert_eq!(p.pairs(), 10);
        assert_eq!(p.ram_mib, 2048);
    }

    #[test]
    fn a_malformed_placement_is_a_one_line_error_naming_the_place() {
        let cut = BUILTIN.replace("ram_mib = 2048", "ram_mib = 64");
        let e = parse("p.toml", &cut).unwrap_err().to_string();
        assert!(
            e.starts_with("p.toml: ") && e.contains("below ram_mib"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
        let odd = format!("{BUILTIN}\n[[process]]\ntask = 0\nsignal = 0\nsighand = 0\nmm = 0\ncred = 0\nkstack = [0, 0, 0, 0]\npage_tables = [0]\n");
        let e = parse("p.toml", &odd).unwrap_err().to_string();
        assert!(e.contains("tracer/tracee pairs"), "{e}");
        let e = parse("p.toml", "ram_mib = \"big\"")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("p.toml"), "{e}");
        let no_vmalloc_pmd = BUILTIN.replace("[[0x4800000], [0x49b0000]", "[[0x4800000], []");
        let e = parse("p.toml", &no_vmalloc_pmd).unwrap_err().to_string();
        assert!(
            e.starts_with("p.toml: kernel_tables: expected a PUD and a PMD"),
            "{e}"
        );
    }

    #[test]
    fn placements_are_named() {
        assert_eq!(Placement::named("measured"), Some(Placement::Measured));
        assert_eq!(Placement::named("scattered"), Some(Placement::Scattered));
        assert_eq!(Placement::named("tidy"), None);
    }
}
