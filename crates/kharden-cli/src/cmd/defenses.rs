//! `kharden defenses`: the plug-ins and their variants.
use kharden::defense::{self, Defense, Extension};
use kharden::machine::MachineProfile;
use kharden::report::table::Table;

/// Defenses that live in other crates of the workspace.
pub const EXTENSIONS: &[Extension] = &[kharden_refcount::plugin::EXTENSION];

/// Parses a --defense list for `machine`, the workspace's plug-ins included.
/// An empty list or an empty item (`--defense ''`, `a,,b`) is an error: "none" says no defense.
pub fn parse(spec: &str, machine: &MachineProfile) -> kharden::Result<Vec<Box<dyn Defense>>> {
    if spec.split(',').any(|item| item.trim().is_empty()) {
        return Err(kharden::Error::at(
            "--defense",
            format!("empty defense name in '{spec}' (expected a comma-separated list of names from 'kharden defenses', or 'none')"),
        ));
    }
    defense::parse_list_with(spec, Some(machine), EXTENSIONS)
}

pub fn run() -> kharden::Result<()> {
    let mut t = Table::new("", &["defense", "broken on purpose", "what it is"]);
    let extra = EXTENSIONS.iter().flat_map(|e| e.catalogue.iter().copied());
    for (name, what, broken) in defense::catalogue().into_iter().chain(extra) {
        t.push(vec![
            name.to_string(),
            if broken { "yes" } else { "no" }.into(),
            what.to_string(),
        ]);
    }
    print!("{t}");
    Ok(())
}
