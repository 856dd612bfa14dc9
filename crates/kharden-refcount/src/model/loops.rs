//! LKDTM's loops and one refcount operation, modelled on a core: the traced instructions run
//! on the core's overlap model.

use super::core_table::{core_for, lkdtm_total, variant_for, Core};
use super::overlap::Timing;
use super::trace::{find, traces};
use crate::{Impl, Op, Variant};
use kharden::machine::MachineProfile;
use kharden::Result;
use std::collections::BTreeMap;

/// Cycles of one refcount operation of `imp` on `machine`: the modelled cycles of one
/// iteration of LKDTM's loop for that operation minus those of the same loop with no
/// operation (loop control). arm64 and x86-64 alike come from the overlap model on the
/// traced instruction sequences (x86: the LOCK'd instruction's latency from the machine
/// profile, MachineProfile::locked_rmw_cycles, when it has one, else cores/x86-64-*.toml). Contention is not
/// modelled: one CPU, the line in its L1.
pub fn op_cycles(machine: &MachineProfile, imp: Impl, op: Op) -> Result<f64> {
    let core = core_for(machine)?;
    let traces = traces()?;
    let variant = variant_for(machine);
    let with = core.cycles(find(traces, variant, Some(imp), op)?)?;
    let without = core.cycles(find(traces, variant, None, op)?)?;
    Ok((with - without).max(0.0))
}

/// Modelled figures of LKDTM's loop for one implementation on one core.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Modelled {
    pub core: String,
    pub variant: &'static str,
    pub implementation: &'static str,
    pub frequency_ghz: f64,
    pub instructions: f64,
    pub cycles: f64,
    pub seconds: f64,
    /// Per inc+dec pair.
    pub instructions_per_pair: f64,
    pub cycles_per_pair: f64,
    /// One iteration of each loop, with its bounds.
    pub inc: Timing,
    pub dec: Timing,
    /// Instruction counts per inc+dec pair by kind.
    pub by_kind: BTreeMap<&'static str, f64>,
}

pub fn lkdtm(
    core: &Core,
    variant: Variant,
    imp: Impl,
    frequency_ghz: f64,
    bound: u64,
) -> Result<Modelled> {
    let traces = traces()?;
    let inc = find(traces, variant, Some(imp), Op::Inc)?;
    let dec = find(traces, variant, Some(imp), Op::DecAndTest)?;
    let (ti, td) = (core.timing(inc)?, core.timing(dec)?);
    let instructions = lkdtm_total(bound, inc.instructions(), dec.instructions());
    let cycles = lkdtm_total(bound, ti.cycles, td.cycles);
    let mut by_kind = BTreeMap::new();
    for i in inc.insns.iter().chain(&dec.insns) {
        *by_kind.entry(i.effect.kind.name()).or_insert(0.0) += 1.0;
    }
    Ok(Modelled {
        core: core.name.clone(),
        variant: variant.name(),
        implementation: imp.name(),
        frequency_ghz,
        instructions,
        cycles,
        seconds: cycles / (frequency_ghz * 1e9),
        instructions_per_pair: inc.instructions() + dec.instructions(),
        cycles_per_pair: ti.cycles + td.cycles,
        inc: ti,
        dec: td,
        by_kind,
    })
}
