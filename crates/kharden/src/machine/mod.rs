//! The machine library: profiles in `machines/*.toml`, embedded at build time, plus any
//! profile file a user names by path.

pub mod detect;
pub mod profile;
pub mod validate;

pub use profile::*;

use crate::error::{Error, Result};

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/machines.rs"));
}

/// Names of the machines in the library, sorted.
pub fn names() -> Vec<&'static str> {
    embedded::MACHINE_FILES
        .iter()
        .map(|(name, _)| *name)
        .collect()
}

/// The library's TOML text of a machine, for `machines show`.
pub fn source_text(name: &str) -> Option<&'static str> {
    embedded::MACHINE_FILES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| *text)
}

/// A machine by library name, or by path to a TOML file (anything containing '/' or ending in .toml).
pub fn load(name_or_path: &str) -> Result<MachineProfile> {
    if let Some(text) = source_text(name_or_path) {
        return parse(&format!("machines/{name_or_path}.toml"), text);
    }
    if is_path(name_or_path) {
        let text = validate::read_bounded(name_or_path, "machine file")?;
        return parse(name_or_path, &text);
    }
    Err(Error::new(format!(
        "unknown machine '{name_or_path}': expected one of {} or a path to a .toml profile",
        names().join(", ")
    )))
}

/// Whether a machine argument names a file rather than a library profile.
pub fn is_path(name_or_path: &str) -> bool {
    name_or_path.contains('/') || name_or_path.ends_with(".toml")
}

/// Parses and validates one profile; `place` names the file in errors.
pub fn parse(place: &str, text: &str) -> Result<MachineProfile> {
    validate::finite_numbers(place, text)?;
    let profile: MachineProfile =
        toml::from_str(text).map_err(|e| Error::at(place, toml_message(&e, text)))?;
    validate::topology(place, &profile)?;
    profile.validate().map_err(|e| Error::at(place, e))?;
    Ok(profile)
}

/// toml's messages span several lines; keep the line number and the reason.
pub(crate) fn toml_message(e: &toml::de::Error, text: &str) -> String {
    let line = e
        .span()
        .map(|s| text[..s.start.min(text.len())].lines().count().max(1));
    let msg = e.message().trim().to_string();
    match line {
        Some(l) => format!("line {l}: {msg}"),
        None => msg,
    }
}

impl MachineProfile {
    pub fn threads(&self) -> u32 {
        self.topology.sockets * self.topology.cores_per_socket * self.topology.threads_per_core
    }
    pub fn numa_nodes(&self) -> u32 {
        self.topology.sockets * self.topology.numa_nodes_per_socket
    }
    /// Picoseconds per core cycle.
    pub fn ps_per_cycle(&self) -> f64 {
        1000.0 / self.cpu.frequency_ghz
    }

    /// A locked read-modify-write's cycles (`costs.locked_rmw_cycles`), else what
    /// `machine detect` measured of a dependent atomic increment; None when neither is known.
    pub fn locked_rmw_cycles(&self) -> Option<f64> {
        self.costs.locked_rmw_cycles.or_else(|| {
            let ns = self.measured.as_ref()?.atomic_increment_ns?;
            Some(ns * self.cpu.frequency_ghz)
        })
    }

    /// Checks what serde cannot: ranges and consistency between features and costs.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let t = &self.topology;
        for (field, v) in [
            ("topology.sockets", t.sockets),
            ("topology.cores_per_socket", t.cores_per_socket),
            ("topology.threads_per_core", t.threads_per_core),
            ("topology.numa_nodes_per_socket", t.numa_nodes_per_socket),
        ] {
            if v == 0 {
                return Err(format!("{field}: expected a positive integer, got 0"));
            }
        }
        if self.threads() > 4096 {
            return Err(format!(
                "topology: {} hardware threads, expected at most 4096",
                self.threads()
            ));
        }
        if !(self.cpu.frequency_ghz > 0.05 && self.cpu.frequency_ghz < 10.0) {
            return Err(format!(
                "cpu.frequency_ghz: expected 0.05..10, got {}",
                self.cpu.frequency_ghz
            ));
        }
        if self.tlb.is_empty() {
            return Err("tlb: expected at least one [[tlb]] array".into());
        }
        for (i, a) in self.tlb.iter().enumerate() {
            let place = format!("tlb[{i}] ({})", a.name);
            if a.entries == 0 || a.ways == 0 || a.entries % a.ways != 0 {
                return Err(format!("{place}: expected entries a positive multiple of ways, got {} entries, {} ways", a.entries, a.ways));
            }
            if !(a.entries / a.ways).is_power_of_two() {
                return Err(format!(
                    "{place}: expected a power-of-two number of sets, got {}",
                    a.entries / a.ways
                ));
            }
            if !(1..=2).contains(&a.level) {
                return Err(format!("{place}: level: expected 1 or 2, got {}", a.level));
            }
            if a.page_sizes.is_empty() {
                return Err(format!(
                    "{place}: page_sizes: expected at least one of \"4k\", \"2m\", \"1g\""
                ));
            }
        }
        let f = &self.cpu.features;
        let c = &self.costs;
        let invpcid_costs = [
            c.invpcid_individual_cycles,
            c.invpcid_single_context_cycles,
            c.invpcid_all_incl_global_cycles,
            c.invpcid_all_non_global_cycles,
        ];
        if f.invpcid && invpcid_costs.iter().any(Option::is_none) {
            return Err("costs: cpu has INVPCID, expected invpcid_{individual,single_context,all_incl_global,all_non_global}_cycles".into());
        }
        if !f.invpcid && invpcid_costs.iter().any(Option::is_some) {
            return Err("costs: invpcid_*_cycles given but cpu.features.invpcid is false".into());
        }
        if f.invpcid && !f.pcid {
            return Err("cpu.features: invpcid requires pcid".into());
        }
        if f.invlpgb != c.invlpgb_ns.is_some() {
            return Err(
                "costs.invlpgb_ns: expected exactly when cpu.features.invlpgb is true".into(),
            );
        }
        if f.tlbi_broadcast != c.tlbi_broadcast_ns.is_some() {
            return Err("costs.tlbi_broadcast_ns: expected exactly when cpu.features.tlbi_broadcast is true".into());
        }
        // Bounds that keep a simulation's arithmetic and memory sane (no real part is near them).
        for a in &self.tlb {
            if a.entries > 65_536 || a.hit_cycles > 10_000 {
                return Err(format!(
                    "tlb ({}): expected at most 65536 entries and 10000 hit_cycles",
                    a.name
                ));
            }
        }
        let p = &self.paging_structure_cache;
        if p.pml4e_entries.max(p.pdpte_entries).max(p.pde_entries) > 4096 {
            return Err("paging_structure_cache: expected at most 4096 entries per level".into());
        }
        let cycles = [
            (
                "costs.syscall_roundtrip_cycles",
                Some(c.syscall_roundtrip_cycles),
            ),
            (
                "costs.cr3_write_noflush_cycles",
                Some(c.cr3_write_noflush_cycles),
            ),
            (
                "costs.cr3_write_flush_cycles",
                Some(c.cr3_write_flush_cycles),
            ),
            ("costs.invlpg_cycles", Some(c.invlpg_cycles)),
            (
                "costs.interrupt_entry_cycles",
                Some(c.interrupt_entry_cycles),
            ),
            ("costs.ipi_send_cycles", Some(c.ipi_send_cycles)),
            (
                "costs.invpcid_*_cycles",
                invpcid_costs.iter().flatten().max().copied(),
            ),
        ];
        for (field, v) in cycles {
            if v.is_some_and(|v| v > 1_000_000) {
                return Err(format!("{field}: expected at most 1000000 cycles"));
            }
        }
        if let Some(n) = c.ipi_cpus_per_write {
            if ![1, 8, 16].contains(&n) {
                return Err(format!("costs.ipi_cpus_per_write: expected 1 (physical destination), 8 (xAPIC flat logical) or 16 (x2APIC cluster), got {n}"));
            }
            let t = &self.topology;
            let cpus = t.sockets * t.cores_per_socket * t.threads_per_core;
            if n == 8 && cpus > 8 {
                return Err(format!("costs.ipi_cpus_per_write: 8 (xAPIC flat logical) addresses at most 8 CPUs, this machine has {cpus}"));
            }
        }
        if let Some(v) = c.locked_rmw_cycles {
            if !(v > 0.0 && v <= 10_000.0) {
                return Err(format!(
                    "costs.locked_rmw_cycles: expected 0..10000 cycles, got {v}"
                ));
            }
        }
        let ns = [
            c.invlpgb_ns.unwrap_or(0.0),
            c.tlbi_broadcast_ns.unwrap_or(0.0),
            c.ipi_latency_ns.same_core_ns,
            c.ipi_latency_ns.same_socket_ns,
            c.ipi_latency_ns.remote_socket_ns,
            c.line_transfer_ns.same_core_ns.unwrap_or(0.0),
            c.line_transfer_ns.same_socket_ns.unwrap_or(0.0),
            c.line_transfer_ns.remote_socket_ns.unwrap_or(0.0),
            self.memory.dram_remote_ns,
        ];
        if ns.iter().any(|&v| !(0.0..=1e6).contains(&v)) {
            return Err("costs/memory: expected latencies between 0 and 1000000 ns".into());
        }
        let m = &self.memory;
        for (i, s) in self.cstates.iter().enumerate() {
            if !(0.0..=100_000.0).contains(&s.exit_latency_us)
                || !(0.0..=1_000_000.0).contains(&s.target_residency_us)
            {
                return Err(format!("cstate[{i}] ({}): expected exit_latency_us in 0..100000 and target_residency_us in 0..1000000", s.name));
            }
            if i > 0 && s.target_residency_us < self.cstates[i - 1].target_residency_us {
                return Err(format!("cstate[{i}] ({}): expected states shallowest first (non-decreasing target_residency_us)", s.name));
            }
        }
        if m.l1d_kib
            .max(m.l1i_kib)
            .max(m.l2_kib)
            .max(m.llc_kib_per_socket)
            > 1 << 20
            || m.l1d_hit_cycles.max(m.l2_hit_cycles).max(m.llc_hit_cycles) > 10_000
        {
            return Err("memory: expected caches of at most 1 GiB and hit latencies of at most 10000 cycles".into());
        }
        if m.dram_local_ns <= 0.0 || m.dram_remote_ns < m.dram_local_ns {
            return Err("memory: expected 0 < dram_local_ns <= dram_remote_ns".into());
        }
        if !(1..=256).contains(&m.lines_in_flight) {
            return Err("memory.lines_in_flight: expected 1..256 lines".into());
        }
        for (field, v) in [
            ("llc_miss_overlap", m.llc_miss_overlap),
            ("dram_miss_overlap", m.dram_miss_overlap),
        ] {
            if !(1.0..=64.0).contains(&v) {
                return Err(format!(
                    "memory.{field}: expected 1..64 (misses overlapped), got {v}"
                ));
            }
        }
        for (field, kib, ways) in [
            ("l1d", m.l1d_kib, m.l1d_ways),
            ("l1i", m.l1i_kib, m.l1i_ways),
            ("l2", m.l2_kib, m.l2_ways),
            ("llc", m.llc_kib_per_socket, m.llc_ways),
        ] {
            if kib == 0 || ways == 0 || (kib * 1024 / 64) % ways != 0 {
                return Err(format!("memory.{field}: expected a positive size divisible into {ways} ways of 64-byte lines"));
            }
            // The cache model compares a set's ways in one 64-bit mask (arch/caches).
            if ways > 64 {
                return Err(format!(
                    "memory.{field}_ways: expected at most 64 ways, got {ways}"
                ));
            }
        }
        if let Some(h) = &self.measured {
            for (field, v) in [
                ("syscall_getppid_ns", h.syscall_getppid_ns),
                ("minor_fault_ns", h.minor_fault_ns),
                ("tlb_shootdown_ns", h.tlb_shootdown_ns),
                ("atomic_increment_ns", h.atomic_increment_ns),
                ("stlb_hit_ns", h.stlb_hit_ns),
            ] {
                if let Some(v) = v {
                    if !(v.is_finite() && v > 0.0) {
                        return Err(format!(
                            "measured.{field}: expected a positive number of nanoseconds, got {v}"
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_library_machine_parses_and_validates() {
        assert!(!names().is_empty());
        for name in names() {
            let m = load(name).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                m.name, name,
                "machines/{name}.toml: name must equal the file stem"
            );
        }
    }

    /// Every number in a profile needs its source: each `key = value` line carries a comment,
    /// on the line itself or on the line just above. In a `[[tlb]]` array the comment on its
    /// `name` line is the source of the whole array.
    #[test]
    fn every_hardware_number_has_a_source_comment() {
        for name in names() {
            let text = source_text(name).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            let mut tlb_block_sourced = false;
            for (i, line) in lines.iter().enumerate() {
                let code = line.split('#').next().unwrap().trim();
                if code.starts_with('[') {
                    tlb_block_sourced = false;
                }
                if code.starts_with("name") && line.contains('#') {
                    tlb_block_sourced = lines[..i]
                        .iter()
                        .rev()
                        .find(|l| l.trim().starts_with('['))
                        .is_some_and(|h| h.trim() == "[[tlb]]");
                }
                let Some((_, value)) = code.split_once('=') else {
                    continue;
                };
                let value = value.trim();
                let numeric = value.starts_with(|c: char| c.is_ascii_digit())
                    || value == "true"
                    || value == "false";
                if !numeric {
                    continue;
                }
                let commented = tlb_block_sourced
                    || line.contains('#')
                    || (i > 0 && lines[i - 1].trim_start().starts_with('#'));
                assert!(
                    commented,
                    "machines/{name}.toml line {}: '{}' has no source comment",
                    i + 1,
                    line.trim()
                );
            }
        }
    }

    #[test]
    fn errors_name_the_file_and_field() {
        let err = parse("bad.toml", "name = 3").unwrap_err().to_string();
        assert!(err.starts_with("bad.toml: line 1:"), "{err}");
        assert!(!err.contains('\n'));
        let err = load("no-such-machine").unwrap_err().to_string();
        assert!(err.contains("unknown machine 'no-such-machine'"), "{err}");
    }

    #[test]
    fn validation_rejects_inconsistent_profiles() {
        let good = source_text("haswell-i7-4770").unwrap();
        let bad = good.replace("entries = 64\nways = 4", "entries = 64\nways = 5");
        let err = parse("x.toml", &bad).unwrap_err().to_string();
        assert!(err.contains("multiple of ways"), "{err}");
        let bad = good.replace("sockets = 1 ", "sockets = 0 ");
        let err = parse("x.toml", &bad).unwrap_err().to_string();
        assert!(err.contains("topology.sockets"), "{err}");
        let bad = good.replace("lines_in_flight = 10 ", "lines_in_flight = 0 ");
        let err = parse("x.toml", &bad).unwrap_err().to_string();
        assert!(
            err.contains("memory.lines_in_flight: expected 1..256"),
            "{err}"
        );
        assert!(!err.contains('\n'));
        let bad = good.replace("llc_miss_overlap = 1.0 ", "llc_miss_overlap = 0.5 ");
        let err = parse("x.toml", &bad).unwrap_err().to_string();
        assert!(
            err.contains("memory.llc_miss_overlap: expected 1..64 (misses overlapped), got 0.5"),
            "{err}"
        );
        let bad = good.replace("ipi_cpus_per_write = 8 ", "ipi_cpus_per_write = 4 ");
        let err = parse("x.toml", &bad).unwrap_err().to_string();
        assert!(
            err.contains("costs.ipi_cpus_per_write: expected 1 (physical destination), 8 (xAPIC flat logical) or 16 (x2APIC cluster), got 4"),
            "{err}"
        );
        let bad = good.replace("sockets = 1 ", "sockets = 2 ");
        let err = parse("x.toml", &bad).unwrap_err().to_string();
        assert!(
            err.contains("8 (xAPIC flat logical) addresses at most 8 CPUs, this machine has 16"),
            "{err}"
        );
    }
}
