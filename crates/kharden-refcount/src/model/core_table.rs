//! Each core's cost per instruction class (`cores/*.toml`, every number with its source),
//! with a value the sources do not supply fitted once to a published figure.

use super::published::published;
use super::trace::{find, traces, Class, LoopTrace};
use crate::{Impl, Op, Variant};
use kharden::machine::{Arch, MachineProfile};
use kharden::{Error, Result};
use serde::Deserialize;
use std::sync::OnceLock;

const CORE_FILES: &[(&str, &str)] = &[
    (
        "cores/cortex-a57.toml",
        include_str!("../../cores/cortex-a57.toml"),
    ),
    (
        "cores/neoverse-n1.toml",
        include_str!("../../cores/neoverse-n1.toml"),
    ),
    (
        "cores/thunderx2.toml",
        include_str!("../../cores/thunderx2.toml"),
    ),
    ("cores/x86-64.toml", include_str!("../../cores/x86-64.toml")),
];

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Param {
    Value(f64),
    Fit { fit: String },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct CycleTable {
    other: f64,
    barrier: f64,
    #[serde(default)]
    exclusive_pair: Option<Param>,
    #[serde(default)]
    lse_atomic: Option<f64>,
    #[serde(default)]
    locked_rmw: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct CoreFile {
    name: String,
    isa: String,
    matches: Vec<String>,
    reference_frequency_ghz: f64,
    cycles: CycleTable,
}

/// A core's instruction costs, with fitted values resolved.
#[derive(Debug, Clone)]
pub struct Core {
    pub name: String,
    pub isa: String,
    pub matches: Vec<String>,
    pub reference_frequency_ghz: f64,
    pub other: f64,
    pub barrier: f64,
    pub exclusive_pair: Option<f64>,
    pub lse_atomic: Option<f64>,
    pub locked_rmw: Option<f64>,
    /// Parameters fitted to a published figure, with the figure.
    pub fitted: Vec<String>,
    /// Where a value came from something other than the table (e.g. a host measurement).
    pub notes: Vec<String>,
}

impl Core {
    /// Cycles of one execution of an instruction of `class`.
    pub fn cost(&self, class: Class) -> Result<f64> {
        let need = |v: Option<f64>, what: &str| {
            v.ok_or_else(|| {
                Error::new(format!(
                    "cores/{}.toml: cycles.{what} is needed for this loop but not given",
                    self.name
                ))
            })
        };
        Ok(match class {
            Class::ExclusiveLoad => need(self.exclusive_pair, "exclusive_pair")?,
            Class::ExclusiveStore => 0.0,
            Class::LseAtomic => need(self.lse_atomic, "lse_atomic")?,
            Class::LockedRmw => need(self.locked_rmw, "locked_rmw")?,
            Class::Barrier => self.barrier,
            _ => self.other,
        })
    }
    /// Cycles of one iteration of a traced loop.
    pub fn cycles(&self, t: &LoopTrace) -> Result<f64> {
        t.insns
            .iter()
            .map(|i| Ok(i.count * self.cost(i.class)?))
            .sum()
    }
}

/// LKDTM totals (instructions, cycles) for the loop bound `bound`: bound-1 increments, then
/// bound dec_and_test.
pub(super) fn lkdtm_totals(
    core: &Core,
    inc: &LoopTrace,
    dec: &LoopTrace,
    bound: u64,
) -> Result<(f64, f64)> {
    let (ni, nd) = ((bound - 1) as f64, bound as f64);
    Ok((
        ni * inc.instructions() + nd * dec.instructions(),
        ni * core.cycles(inc)? + nd * core.cycles(dec)?,
    ))
}

fn resolve(place: &str, file: CoreFile, traces: &[LoopTrace]) -> Result<Core> {
    let c = &file.cycles;
    let mut core = Core {
        name: file.name.clone(),
        isa: file.isa.clone(),
        matches: file.matches.clone(),
        reference_frequency_ghz: file.reference_frequency_ghz,
        other: c.other,
        barrier: c.barrier,
        exclusive_pair: None,
        lse_atomic: c.lse_atomic,
        locked_rmw: c.locked_rmw,
        fitted: vec![],
        notes: vec![],
    };
    match &c.exclusive_pair {
        None => {}
        Some(Param::Value(v)) => core.exclusive_pair = Some(*v),
        Some(Param::Fit { fit }) if fit == "seed001.ATOMIC_TIMING.cycles" => {
            // Solve published cycles = (N-1)(E x_inc + o_inc) + N (E x_dec + o_dec) for E.
            let p = published()?;
            let row = p.row.iter().find(|r| r.implementation == "atomic_t").ok_or_else(|| Error::at("published/seed001.toml", "no atomic_t row"))?;
            let variant = Variant::from_name(&p.variant).ok_or_else(|| Error::at("published/seed001.toml", "unknown variant"))?;
            let inc = find(traces, variant, Some(Impl::Atomic), Op::Inc)?;
            let dec = find(traces, variant, Some(Impl::Atomic), Op::DecAndTest)?;
            core.exclusive_pair = Some(0.0);
            let (_, rest) = lkdtm_totals(&core, inc, dec, p.lkdtm_bound)?;
            let (ni, nd) = ((p.lkdtm_bound - 1) as f64, p.lkdtm_bound as f64);
            let pairs = ni * inc.count(Class::ExclusiveLoad) + nd * dec.count(Class::ExclusiveLoad);
            let e = (row.cycles - rest) / pairs;
            core.exclusive_pair = Some(e);
            core.fitted.push(format!(
                "{}: exclusive_pair = {e:.2} cycles, fitted to seed 001's ATOMIC_TIMING cycles ({:.0})",
                core.name, row.cycles
            ));
        }
        Some(Param::Fit { fit }) => return Err(Error::at(place, format!("cycles.exclusive_pair: unknown fit target '{fit}', expected \"seed001.ATOMIC_TIMING.cycles\""))),
    }
    Ok(core)
}

/// Every core table, resolved (fits computed); once per process.
pub fn cores() -> Result<&'static [Core]> {
    static CORES: OnceLock<Result<Vec<Core>>> = OnceLock::new();
    CORES
        .get_or_init(|| {
            let traces = traces()?;
            CORE_FILES
                .iter()
                .map(|(place, text)| {
                    let f: CoreFile =
                        toml::from_str(text).map_err(|e| Error::at(place, e.message().trim()))?;
                    resolve(place, f, traces)
                })
                .collect()
        })
        .as_deref()
        .map_err(Clone::clone)
}

pub(super) fn core_named(cores: &[Core], name: &str) -> Result<Core> {
    cores
        .iter()
        .find(|c| c.name == name)
        .cloned()
        .ok_or_else(|| Error::new(format!("no core table '{name}'")))
}

/// The core table serving a machine profile (by machine name or microarchitecture), with a
/// host measurement of the locked increment taking precedence on x86 when the profile has one.
pub fn core_for(machine: &MachineProfile) -> Result<Core> {
    let cores = cores()?;
    let isa = match machine.arch {
        Arch::X86_64 => "x86-64",
        Arch::Aarch64 => "arm64",
    };
    let keys = [
        machine.name.to_lowercase(),
        machine.cpu.microarchitecture.to_lowercase(),
        machine.cpu.model.to_lowercase(),
    ];
    let mut core = cores
        .iter()
        .filter(|c| c.isa == isa)
        .find(|c| c.matches.iter().any(|m| keys.iter().any(|k| k == m || k.contains(m.as_str()))))
        .cloned()
        .ok_or_else(|| {
            Error::new(format!(
                "machine '{}': no refcount core table for microarchitecture '{}' (cores/*.toml cover: {})",
                machine.name,
                machine.cpu.microarchitecture,
                cores.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
            ))
        })?;
    if machine.arch == Arch::X86_64 {
        if let Some(ns) = machine
            .measured
            .as_ref()
            .and_then(|m| m.atomic_increment_ns)
        {
            core.locked_rmw = Some(ns * machine.cpu.frequency_ghz);
            core.notes.push(format!(
                "locked_rmw from this machine's measured atomic_increment_ns ({ns} ns)"
            ));
        }
    }
    Ok(core)
}

/// The form a machine runs: LSE when the profile says the CPU has it (the kernel patches it
/// in at boot), else LL/SC; x86-64 on x86.
pub fn variant_for(machine: &MachineProfile) -> Variant {
    match machine.arch {
        Arch::X86_64 => Variant::X86_64,
        Arch::Aarch64 if machine.cpu.features.lse_atomics => Variant::Arm64Lse,
        Arch::Aarch64 => Variant::Arm64Llsc,
    }
}
