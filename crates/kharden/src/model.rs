//! The model assembled above its parts. Each part declares its own parameters (the kernel,
//! each defense family of the registry, the workloads, virtualization); this file alone lists
//! them all and reads the built-in parameter file against the list, so params/ stays below
//! what it describes and the kernel never names a defense. The constructors that need every
//! declaration (`Params::linux`, `Params::from_file_text`, `Overrides::parse`, `Kernel::boot`)
//! are defined here for that reason; only code above the parts (experiments, the command
//! line) and tests call them.

use crate::error::Result;
use crate::kernel::{Defense, Kernel, OracleMode};
use crate::machine::MachineProfile;
use crate::params::{split_assignment, Decl, Overrides, Params, Provenance};

const BUILTIN_PLACE: &str = "kernels/linux.toml";
const BUILTIN: &str = include_str!("../../../kernels/linux.toml");

/// Every declaration: the kernel's, each registered defense's and the workloads'.
pub fn declarations() -> Vec<Decl> {
    let mut all: Vec<Decl> = crate::kernel::params::DECLS.to_vec();
    for d in crate::defense::registry::FAMILIES {
        all.extend_from_slice(d.params);
    }
    all.extend_from_slice(crate::workload::PARAMS);
    all.extend_from_slice(crate::workload::fio::PARAMS);
    all.extend_from_slice(crate::virt::params::DECLS);
    all
}

impl Params {
    /// The declared parameters with the values of the built-in `kernels/linux.toml`,
    /// parsed once per process: every boot without explicit parameters asks for them.
    pub fn linux() -> Params {
        static PARSED: std::sync::OnceLock<Params> = std::sync::OnceLock::new();
        PARSED
            .get_or_init(|| {
                Params::parse(BUILTIN_PLACE, BUILTIN, &declarations()).unwrap_or_else(|e| {
                    panic!("the built-in parameter file is checked by a test: {e}")
                })
            })
            .clone()
    }

    /// Parses a parameter file (the format of kernels/linux.toml).
    pub fn from_file_text(place: &str, text: &str) -> Result<Params> {
        Params::parse(place, text, &declarations())
    }
}

impl Overrides {
    /// Parses `--set` flags; software paths are checked against the declarations now,
    /// machine paths when a profile is at hand.
    pub fn parse(specs: &[String]) -> Result<Overrides> {
        let mut o = Overrides::default();
        let mut check = Params::linux();
        for spec in specs {
            let (path, value) = split_assignment(spec)?;
            if let Some(rest) = path.strip_prefix("machine.") {
                o.machine.push((rest.to_string(), value.to_string()));
            } else {
                check.set_text("--set", path, value, Provenance::Set { by: "--set".into() })?;
                o.software.push((path.to_string(), value.to_string()));
            }
        }
        Ok(o)
    }
}

impl Kernel {
    /// Boots the kernel on `machine` with `defenses` plugged in, the built-in parameters
    /// and sampled oracle checks.
    pub fn boot(machine: MachineProfile, defenses: Vec<Box<dyn Defense>>) -> Kernel {
        Kernel::boot_with(machine, defenses, &Params::linux(), OracleMode::default())
    }
}
