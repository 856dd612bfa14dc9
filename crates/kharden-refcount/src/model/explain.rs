//! `kharden refcount model --schedule IMPL`: where the time of one implementation's LKDTM
//! loops goes on a core, instruction by instruction, in the steady state.

use super::core_table::{core_for, core_named, cores, variant_for};
use super::overlap::schedule;
use super::published::published;
use super::trace::{find, traces};
use crate::{Impl, Op, Variant};
use kharden::machine::MachineProfile;
use kharden::report::table::Table;
use kharden::{Error, Result};

/// One table per loop (increment, decrement): each instruction's issue and completion in
/// cycles from the iteration's first issue, under the cycles per iteration and their bounds.
/// On `machine`'s core and form, or on seed 001's (the Cortex-A57, LL/SC) when none is given.
pub fn schedule_report(machine: Option<&MachineProfile>, imp: Impl) -> Result<Vec<Table>> {
    let (core, variant) = match machine {
        Some(m) => (core_for(m)?, variant_for(m)),
        None => {
            let p = published()?;
            let v = Variant::from_name(&p.variant)
                .ok_or_else(|| Error::at("published/seed001.toml", "unknown variant"))?;
            (core_named(cores()?, &p.core)?, v)
        }
    };
    let mut tables = vec![];
    for op in [Op::Inc, Op::DecAndTest] {
        let t = find(traces()?, variant, Some(imp), op)?;
        let timing = core.timing(t)?;
        let times = schedule(&core.pipeline, &t.insns)
            .map_err(|e| Error::new(format!("cores/{}.toml: {e}", core.name)))?;
        let mut table = Table::new(
            format!(
                "{} {} {} {}: {:.1} cycles per iteration (chain {:.1}, dispatch {:.1}, ports {:.1}: {}-bound)",
                core.name,
                variant.name(),
                imp.name(),
                op.name(),
                timing.cycles,
                timing.chain,
                timing.dispatch,
                timing.ports,
                timing.bound()
            ),
            &["issue", "done", "kind", "instruction"],
        );
        for (i, (issue, done)) in t.insns.iter().zip(times) {
            table.push(vec![
                format!("{issue:.1}"),
                format!("{done:.1}"),
                i.effect.kind.name().into(),
                i.text.clone(),
            ]);
        }
        tables.push(table);
    }
    Ok(tables)
}
