//! `--defense refcount:IMPL`: the simulator's kernel paths carry their refcount_t operations;
//! this plug-in prices each one at what IMPL costs over plain atomic_t on the simulated
//! machine, from the same overlap model `kharden refcount model` uses.

use crate::{op_cycles, Impl, Op};
use kharden::defense::{Defense, Extension};
use kharden::kernel::{CpuId, Kernel};
use kharden::machine::MachineProfile;
use kharden::sim::TimeCategory;
use kharden::Result;

pub struct RefcountDefense {
    name: String,
    /// Extra cycles of an increment plus a decrement-and-test over atomic_t.
    extra_per_pair: f64,
}

impl RefcountDefense {
    pub fn new(name: &str, imp: Impl, machine: &MachineProfile) -> Result<RefcountDefense> {
        let pair = |i: Impl| -> Result<f64> {
            Ok(op_cycles(machine, i, Op::Inc)? + op_cycles(machine, i, Op::DecAndTest)?)
        };
        let extra_per_pair = pair(imp)? - pair(Impl::Atomic)?;
        Ok(RefcountDefense {
            name: name.into(),
            extra_per_pair,
        })
    }
}

impl Defense for RefcountDefense {
    /// Its name and per-pair cost are fixed at boot: no state.
    fn canon(&self, _c: &mut kharden::sim::Canon) {}

    fn name(&self) -> String {
        self.name.clone()
    }

    fn on_refcount_ops(&mut self, k: &mut Kernel, cpu: CpuId, n: u32) {
        k.compute(
            cpu,
            self.extra_per_pair * n as f64 / 2.0,
            TimeCategory::Refcount,
        );
    }
}

const CATALOGUE: &[(&str, &str, bool)] = &[
    (
        "refcount:fast",
        "refcount_t with fast checks (x86 v4.14 / arm64 v4.15): priced per operation over atomic_t",
        false,
    ),
    (
        "refcount:full",
        "refcount_t with CONFIG_REFCOUNT_FULL's cmpxchg loops (v4.13)",
        false,
    ),
    (
        "refcount:fetch-add",
        "refcount_t as generic fetch_add (v5.5 onward)",
        false,
    ),
];

fn make(name: &str, machine: &MachineProfile) -> Option<Result<Box<dyn Defense>>> {
    let imp = match name {
        "refcount:fast" => Impl::Fast,
        "refcount:full" => Impl::Full,
        "refcount:fetch-add" => Impl::FetchAdd,
        _ => return None,
    };
    Some(RefcountDefense::new(name, imp, machine).map(|d| Box::new(d) as Box<dyn Defense>))
}

/// The plug-in, for `kharden::defense::parse_list_with`.
pub const EXTENSION: Extension = Extension {
    catalogue: CATALOGUE,
    make,
};
