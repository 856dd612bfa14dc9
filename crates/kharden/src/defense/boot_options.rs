//! Boot options that are not defenses themselves but change what a defense costs.

use super::Defense;
use crate::kernel::BootConfig;
use crate::machine::MachineProfile;

/// `nopcid`: run without PCIDs even where the CPU has them.
pub struct NoPcid;

impl Defense for NoPcid {
    fn name(&self) -> String {
        "nopcid".into()
    }
    fn configure(&mut self, config: &mut BootConfig, _machine: &MachineProfile) {
        config.use_pcid = false;
    }
}
