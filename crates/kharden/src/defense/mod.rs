//! Hardening mechanisms as plug-ins. Each implements the hooks it needs of one trait; the
//! kernel calls hooks at named events and never knows which defense is plugged in. A
//! defense acts only through the kernel's mechanism API (write_cr3, invlpg, invpcid, touch,
//! compute, page-table maps) and states its security property as an oracle check.

pub mod asi;
pub mod boot_options;
pub mod kernexec;
pub mod pti;
pub mod registry;
pub mod text_repl;
pub mod xpfo;

use crate::error::{Error, Result};
pub use crate::kernel::hooks::{Defense, Running};
use crate::machine::MachineProfile;
use crate::params::Decl;
use crate::sim::OwnedCounter;

/// One command-line name of a family.
pub struct Variant {
    /// As given to --defense, e.g. "pti:linux".
    pub name: &'static str,
    /// Other spellings accepted for it ("pti", "pti=on").
    pub aliases: &'static [&'static str],
    pub description: &'static str,
    /// A deliberately broken variant, which the oracle must catch.
    pub broken: bool,
    pub make: fn(&CounterSlots) -> Box<dyn Defense>,
}

impl Variant {
    pub const fn new(
        name: &'static str,
        aliases: &'static [&'static str],
        description: &'static str,
        broken: bool,
        make: fn(&CounterSlots) -> Box<dyn Defense>,
    ) -> Variant {
        Variant {
            name,
            aliases,
            description,
            broken,
            make,
        }
    }
}

/// A mechanism: its variants (at most one per run), parameters and counters.
pub struct Family {
    pub name: &'static str,
    /// Boot options configure before defenses, which then see the final boot choices.
    pub boot_option: bool,
    pub variants: &'static [Variant],
    pub params: &'static [Decl],
    /// Families that cannot run beside this one (ASI turns PTI off).
    pub excludes: &'static [&'static str],
    /// (counter name, what it counts): kept in every CPU's stats beside the kernel's own.
    pub counters: &'static [(&'static str, &'static str)],
}

/// The stats slots of the counters the families own, by name, numbered by the registry
/// (defense/registry.rs) and handed to each defense it builds.
pub struct CounterSlots {
    /// Every owned counter's name, in slot order.
    pub names: Vec<&'static str>,
}

impl CounterSlots {
    /// The slot of a counter a family declared (a missing name is a bug in the family).
    pub fn get(&self, name: &str) -> OwnedCounter {
        let slot = self
            .names
            .iter()
            .position(|n| *n == name)
            .unwrap_or_else(|| panic!("no family declares the counter {name}"));
        OwnedCounter(slot as u8)
    }
}

/// One line per defense name: (name, what it is, whether it is a deliberately broken variant).
pub fn catalogue() -> Vec<(&'static str, &'static str, bool)> {
    let mut lines = vec![("none", "no hardening", false)];
    for f in registry::FAMILIES {
        lines.extend(f.variants.iter().map(|v| (v.name, v.description, v.broken)));
    }
    lines
}

/// Defenses that live in other crates (they may need the machine to set themselves up),
/// so a new mechanism plugs in without touching this file.
pub struct Extension {
    /// Names it answers to, with one line each for `kharden defenses`.
    pub catalogue: &'static [(&'static str, &'static str, bool)],
    pub make: MakeDefense,
}

/// Builds the named defense for a machine; `None` when the name is not this extension's.
pub type MakeDefense = fn(name: &str, machine: &MachineProfile) -> Option<Result<Box<dyn Defense>>>;

/// Parses a comma-separated defense list, e.g. "pti:linux,nopcid" or "none".
pub fn parse_list(spec: &str) -> Result<Vec<Box<dyn Defense>>> {
    parse_list_with(spec, None, &[])
}

/// parse_list() that also knows the defenses of `extensions`, built for `machine`.
pub fn parse_list_with(
    spec: &str,
    machine: Option<&MachineProfile>,
    extensions: &[Extension],
) -> Result<Vec<Box<dyn Defense>>> {
    let mut out: Vec<Box<dyn Defense>> = vec![];
    for item in spec.split(',').map(str::trim) {
        let extended = machine.and_then(|m| extensions.iter().find_map(|e| (e.make)(item, m)));
        if let Some(d) = extended {
            out.push(d?);
            continue;
        }
        if item == "none" || item.is_empty() {
            if spec.trim().is_empty() {
                return Err(Error::new("--defense: expected a comma-separated list of defenses or \"none\", got an empty string"));
            }
            continue;
        }
        let Some(variant) = registry::variant(item) else {
            let extra = extensions.iter().flat_map(|e| e.catalogue.iter().copied());
            let known: Vec<&str> = catalogue()
                .into_iter()
                .chain(extra)
                .map(|(n, _, _)| n)
                .collect();
            return Err(Error::new(format!(
                "--defense: unknown defense '{other}': expected a comma-separated list of {}",
                known.join(", "),
                other = item
            )));
        };
        let d = (variant.make)(&registry::counter_slots());
        if out.iter().any(|o| o.name() == d.name()) {
            return Err(Error::new(format!("--defense: '{item}' given twice")));
        }
        out.push(d);
    }
    // Boot options first, so defenses configure against the final boot choices.
    out.sort_by_key(|d| !registry::family_of(&d.name()).is_some_and(|f| f.boot_option));
    let families: Vec<&str> = out
        .iter()
        .filter_map(|d| registry::family_of(&d.name()))
        .map(|f| f.name)
        .collect();
    for f in registry::FAMILIES
        .iter()
        .filter(|f| families.contains(&f.name))
    {
        if let Some(other) = f.excludes.iter().find(|e| families.contains(e)) {
            return Err(Error::new(format!(
                "--defense: {} turns {other} off (its variants cannot run beside it): drop one of them",
                f.name
            )));
        }
    }
    for f in registry::FAMILIES {
        if out
            .iter()
            .filter(|d| registry::family_of(&d.name()).is_some_and(|g| g.name == f.name))
            .count()
            > 1
        {
            return Err(Error::new(format!(
                "--defense: at most one {} variant",
                f.name
            )));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn parses_lists_and_rejects_unknown_names() {
        assert_eq!(parse_list("none").unwrap().len(), 0);
        let v = parse_list("pti:linux, nopcid").unwrap();
        assert_eq!(
            v.iter().map(|d| d.name()).collect::<Vec<_>>(),
            vec!["nopcid", "pti:linux"]
        );
        let e = parse_list("pti:bogus").err().unwrap().to_string();
        assert!(
            e.contains("unknown defense 'pti:bogus'") && e.contains("pti:freebsd"),
            "{e}"
        );
        assert!(parse_list("pti:linux,pti:freebsd").is_err());
        assert!(parse_list("nopcid,nopcid").is_err());
    }
}
