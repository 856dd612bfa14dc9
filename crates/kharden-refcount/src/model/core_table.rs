//! Each core's pipeline (`cores/*.toml`, every number with its source): dispatch width,
//! window, latencies and issue ports for the overlap model, with a value the sources do not
//! supply fitted once to a published figure.

use super::isa::Port;
use super::overlap::{self, Latencies, Pipeline, PortGroup, Timing};
use super::published::published;
use super::trace::{find, traces, LoopTrace};
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
    (
        "cores/x86-64-intel.toml",
        include_str!("../../cores/x86-64-intel.toml"),
    ),
    (
        "cores/x86-64-amd.toml",
        include_str!("../../cores/x86-64-amd.toml"),
    ),
];

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Param {
    Value(f64),
    Fit { fit: String },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct PipelineTable {
    width: f64,
    window: usize,
    #[serde(default)]
    loads_wait_for_locked: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct LatencyTable {
    alu: f64,
    load: f64,
    store: f64,
    branch: f64,
    barrier: f64,
    #[serde(default)]
    exclusive_pair: Option<Param>,
    #[serde(default)]
    lse_atomic: Option<f64>,
    #[serde(default)]
    locked_rmw: Option<f64>,
    #[serde(default)]
    stack_engine: Option<f64>,
    #[serde(default)]
    serialise: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct PortTable {
    serves: Vec<Port>,
    count: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct CoreFile {
    name: String,
    isa: String,
    matches: Vec<String>,
    reference_frequency_ghz: f64,
    pipeline: PipelineTable,
    latency: LatencyTable,
    #[serde(default)]
    ports: Vec<PortTable>,
}

/// A core: its pipeline for the overlap model, with fitted values resolved.
#[derive(Debug, Clone)]
pub struct Core {
    pub name: String,
    pub isa: String,
    pub matches: Vec<String>,
    pub reference_frequency_ghz: f64,
    pub pipeline: Pipeline,
    /// Cycles per iteration of a back-to-back `ldxr; add; stxr; cbnz` loop on one L1 line.
    pub exclusive_pair: Option<f64>,
    /// Parameters fitted to a published figure, with the figure.
    pub fitted: Vec<String>,
    /// Where a value came from something other than the table (e.g. a host measurement).
    pub notes: Vec<String>,
}

impl Core {
    /// Cycles per iteration of a traced loop, with the bounds they come from.
    pub fn timing(&self, t: &LoopTrace) -> Result<Timing> {
        overlap::timing(&self.pipeline, &t.insns).map_err(|e| self.error(e))
    }
    /// Cycles per iteration of a traced loop.
    pub fn cycles(&self, t: &LoopTrace) -> Result<f64> {
        overlap::cycles(&self.pipeline, &t.insns).map_err(|e| self.error(e))
    }
    fn error(&self, e: String) -> Error {
        Error::new(format!("cores/{}.toml: {e}", self.name))
    }
    /// Has LSE atomic figures (so its LSE form can be modelled).
    pub fn has_lse(&self) -> bool {
        self.pipeline.latency.atomic.is_some()
    }
    fn set_exclusive_pair(&mut self, pair: f64) -> Result<()> {
        let l = &self.pipeline.latency;
        // The pair's loop is ldxr -> add -> stxr -> (the next ldxr reads what stxr wrote).
        let store = pair - l.load - l.alu;
        if store < 0.0 {
            return Err(Error::new(format!(
                "cores/{}.toml: latency.exclusive_pair {pair} is shorter than the load and ALU latencies in its own loop",
                self.name
            )));
        }
        self.exclusive_pair = Some(pair);
        self.pipeline.latency.exclusive_store = Some(store);
        Ok(())
    }
}

/// An LKDTM total for the loop bound `bound` from per-iteration figures: bound-1
/// increments, then bound dec_and_test.
pub(super) fn lkdtm_total(bound: u64, inc: f64, dec: f64) -> f64 {
    (bound - 1) as f64 * inc + bound as f64 * dec
}

/// Fits the exclusive pair's loop period so that seed 001's atomic_t loops take their
/// published cycles. The model's cycles grow monotonically with the pair's period (it lies
/// on every LL/SC loop's chain), so a bracketing search finds it.
fn fit_exclusive_pair(core: &mut Core, traces: &[LoopTrace]) -> Result<()> {
    let p = published()?;
    let row = p
        .row
        .iter()
        .find(|r| r.implementation == "atomic_t")
        .ok_or_else(|| Error::at("published/seed001.toml", "no atomic_t row"))?;
    let variant = Variant::from_name(&p.variant)
        .ok_or_else(|| Error::at("published/seed001.toml", "unknown variant"))?;
    let inc = find(traces, variant, Some(Impl::Atomic), Op::Inc)?;
    let dec = find(traces, variant, Some(Impl::Atomic), Op::DecAndTest)?;
    let (mut lo, mut hi) = (
        core.pipeline.latency.load + core.pipeline.latency.alu,
        10_000.0,
    );
    let name = core.name.clone();
    let mut gap = |pair: f64| -> Result<f64> {
        core.set_exclusive_pair(pair)?;
        Ok(lkdtm_total(p.lkdtm_bound, core.cycles(inc)?, core.cycles(dec)?) - row.cycles)
    };
    let (mut g_lo, mut g_hi) = (gap(lo)?, gap(hi)?);
    if g_lo > 0.0 || g_hi < 0.0 {
        return Err(Error::new(format!(
            "cores/{name}.toml: no exclusive_pair between {lo} and {hi} cycles gives seed 001's ATOMIC_TIMING cycles ({:.0})",
            row.cycles
        )));
    }
    // Regula falsi (Illinois): the cycles are piecewise linear in the pair's period, so it
    // lands in a few steps; stop within one cycle of the published total.
    let mut pair = lo;
    for _ in 0..100 {
        pair = (lo * g_hi - hi * g_lo) / (g_hi - g_lo);
        let g = gap(pair)?;
        if g.abs() < 1.0 {
            break;
        }
        if g < 0.0 {
            (lo, g_lo) = (pair, g);
            g_hi /= 2.0;
        } else {
            (hi, g_hi) = (pair, g);
            g_lo /= 2.0;
        }
    }
    core.set_exclusive_pair(pair)?;
    core.fitted.push(format!(
        "{}: exclusive_pair = {pair:.2} cycles (a back-to-back ldxr; add; stxr; cbnz loop), fitted to seed 001's ATOMIC_TIMING cycles ({:.0})",
        core.name, row.cycles
    ));
    Ok(())
}

fn resolve(place: &str, file: CoreFile, traces: &[LoopTrace]) -> Result<Core> {
    let l = &file.latency;
    if file.pipeline.width <= 0.0 || file.pipeline.window == 0 {
        return Err(Error::at(
            place,
            "pipeline.width and pipeline.window must be positive",
        ));
    }
    if let Some(p) = file
        .ports
        .iter()
        .find(|p| p.count <= 0.0 || p.serves.is_empty())
    {
        return Err(Error::at(
            place,
            format!("a [[ports]] group needs a positive count and at least one class (got {p:?})"),
        ));
    }
    let mut core = Core {
        name: file.name.clone(),
        isa: file.isa.clone(),
        matches: file.matches.clone(),
        reference_frequency_ghz: file.reference_frequency_ghz,
        pipeline: Pipeline {
            width: file.pipeline.width,
            window: file.pipeline.window,
            loads_wait_for_locked: file.pipeline.loads_wait_for_locked,
            latency: Latencies {
                alu: l.alu,
                load: l.load,
                store: l.store,
                branch: l.branch,
                barrier: l.barrier,
                exclusive_store: None,
                atomic: l.lse_atomic,
                locked_rmw: l.locked_rmw,
                stack_engine: l.stack_engine,
                serialise: l.serialise,
            },
            ports: file
                .ports
                .iter()
                .map(|p| PortGroup {
                    serves: p.serves.clone(),
                    count: p.count,
                })
                .collect(),
        },
        exclusive_pair: None,
        fitted: vec![],
        notes: vec![],
    };
    match &l.exclusive_pair {
        None => {}
        Some(Param::Value(v)) => core.set_exclusive_pair(*v)?,
        Some(Param::Fit { fit }) if fit == "seed001.ATOMIC_TIMING.cycles" => {
            fit_exclusive_pair(&mut core, traces)?
        }
        Some(Param::Fit { fit }) => return Err(Error::at(place, format!("latency.exclusive_pair: unknown fit target '{fit}', expected \"seed001.ATOMIC_TIMING.cycles\""))),
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

/// The core table serving a machine profile (by machine name or microarchitecture), with the
/// profile's locked read-modify-write (MachineProfile::locked_rmw_cycles) taking precedence on
/// x86 when it has one.
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
        if let Some(cycles) = machine.locked_rmw_cycles() {
            core.pipeline.latency.locked_rmw = Some(cycles);
            core.notes.push(format!(
                "locked_rmw from the machine profile ({cycles} cycles: costs.locked_rmw_cycles, else the measured atomic_increment_ns)"
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
