//! Boot options that are not defenses themselves but change what a defense costs.

use super::{Defense, Family, Variant};
use crate::kernel::BootConfig;
use crate::machine::MachineProfile;
use crate::params::Params;

pub const NOPCID: Family = Family {
    name: "nopcid",
    boot_option: true,
    variants: &[Variant {
        name: "nopcid",
        aliases: &[],
        description: "boot option: do not use PCIDs even where the CPU has them",
        broken: false,
        make: |_| Box::new(NoPcid),
    }],
    params: &[],
    excludes: &[],
    counters: &[],
};

/// `nopcid`: run without PCIDs even where the CPU has them.
pub struct NoPcid;

impl Defense for NoPcid {
    fn name(&self) -> String {
        "nopcid".into()
    }
    fn configure(&mut self, config: &mut BootConfig, _machine: &MachineProfile, _params: &Params) {
        config.use_pcid = false;
    }
    fn canon(&self, _c: &mut crate::sim::Canon) {} // no state
}
