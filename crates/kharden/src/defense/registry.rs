//! The defenses this crate provides, one family per mechanism: its command-line variants,
//! the parameters it declares and the counters it owns. Adding a mechanism is one file in
//! defense/ and one line in FAMILIES.

use super::{asi, boot_options, kernexec, pti, text_repl, xpfo, CounterSlots, Family, Variant};
use crate::sim::OwnedCounter;

pub const FAMILIES: &[&Family] = &[
    &boot_options::NOPCID,
    &pti::FAMILY,
    &xpfo::FAMILY,
    &text_repl::FAMILY,
    &kernexec::FAMILY,
    &asi::FAMILY,
];

pub fn variant(name: &str) -> Option<&'static Variant> {
    FAMILIES
        .iter()
        .flat_map(|f| f.variants.iter())
        .find(|v| v.name == name || v.aliases.contains(&name))
}

pub fn family_of(defense_name: &str) -> Option<&'static Family> {
    FAMILIES
        .iter()
        .copied()
        .find(|f| f.variants.iter().any(|v| v.name == defense_name))
}

/// The families a --defense list names (unknown names are left out: parse_list reports them).
pub fn families_in(spec: &str) -> Vec<&'static str> {
    spec.split(',')
        .filter_map(|d| variant(d.trim()))
        .filter_map(|v| family_of(v.name))
        .map(|f| f.name)
        .collect()
}

/// Whether a run with the defense `families` depends on the parameter at `path`: a family's
/// own parameters only when it is plugged in, everything else (kernel, workloads) always.
pub fn param_applies(path: &str, families: &[&str]) -> bool {
    match FAMILIES.iter().find(|f| {
        path.strip_prefix(f.name)
            .is_some_and(|rest| rest.starts_with('.'))
    }) {
        Some(owner) => families.contains(&owner.name),
        None => true,
    }
}

/// The costs the defense `families` declare per counted event (`Decl::charged_per`): each
/// parameter's path and the counter of its events.
pub fn per_event_costs(families: &[&str]) -> Vec<(&'static str, OwnedCounter)> {
    FAMILIES
        .iter()
        .filter(|f| families.contains(&f.name))
        .flat_map(|f| f.params.iter())
        .filter_map(|d| Some((d.path, counter(d.per_event?))))
        .collect()
}

/// Every owned counter's name, in slot order.
pub fn counter_names() -> Vec<&'static str> {
    FAMILIES
        .iter()
        .flat_map(|f| f.counters.iter().map(|(n, _)| *n))
        .collect()
}

/// The owned counters' slots, for the defenses the registry builds.
pub fn counter_slots() -> CounterSlots {
    CounterSlots {
        names: counter_names(),
    }
}

/// The slot of a counter a family declared (a missing name is a bug in the family).
pub fn counter(name: &str) -> OwnedCounter {
    counter_slots().get(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_counters_are_unique_and_fit_the_stats() {
        let names: Vec<&str> = FAMILIES
            .iter()
            .flat_map(|f| {
                f.variants
                    .iter()
                    .flat_map(|v| std::iter::once(v.name).chain(v.aliases.iter().copied()))
            })
            .collect();
        for (i, n) in names.iter().enumerate() {
            assert!(!names[..i].contains(n), "{n} twice");
            let built = (variant(n).unwrap().make)(&counter_slots()).name();
            assert_eq!(
                family_of(&built).map(|f| f.name),
                Some(n.split([':', '=']).next().unwrap()),
                "{n}"
            );
        }
        let counters = counter_names();
        assert!(counters.len() <= crate::sim::OWNED_COUNTERS);
        for (i, c) in counters.iter().enumerate() {
            assert!(
                !counters[..i].contains(c)
                    && crate::sim::Counter::ALL.iter().all(|k| k.name() != *c)
            );
        }
    }
}
