//! `kharden params [--machine M] [--defense D] [--set PATH=VALUE]`: the resolved parameter
//! tree of a run, each value with its unit and provenance (the way gem5 dumps a run's
//! config); and the `--set` flag the simulating commands share.

use clap::Args as ClapArgs;
use kharden::defense::registry;
use kharden::kernel::paths::recording::Recording;
use kharden::model::declarations;
use kharden::params::{machine_params, Overrides, Params, Value};
use kharden::{machine, Error, Result};

/// `--set PATH=VALUE`, repeatable: overrides a declared parameter (`kharden params` lists
/// them) or a machine-profile field (`machine.costs.interrupt_entry_cycles=900`); and
/// `--footprints FILE`, the kernel recording the model runs.
#[derive(ClapArgs, Debug, Clone, Default)]
pub struct SetArgs {
    /// Override a parameter (`kharden params` lists them) or a machine field
    /// (machine.costs.interrupt_entry_cycles=900); repeatable
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
    /// Run the kernel paths of this footprint file (`kharden kernel record-footprint` on your
    /// kernel) instead of the committed kernels/ recording
    #[arg(long, value_name = "FILE")]
    pub footprints: Option<String>,
}

impl SetArgs {
    /// The overrides, with the recording of the `--footprints` file (if any) read and
    /// compiled.
    pub fn resolve(&self) -> Result<Overrides> {
        let mut o = Overrides::parse(&self.set)?;
        if let Some(file) = &self.footprints {
            o.recording = Some(std::sync::Arc::new(Recording::read(file)?));
        }
        Ok(o)
    }
}

#[derive(ClapArgs)]
pub struct Args {
    /// Also list this machine's profile fields (`machine.*`), with their source comments.
    #[arg(long)]
    machine: Option<String>,
    /// Only the parameters of these defenses' families (and the kernel's and workloads').
    #[arg(long)]
    defense: Option<String>,
    #[command(flatten)]
    set: SetArgs,
    /// Print as JSON (path -> value, unit, provenance).
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<()> {
    let overrides = args.set.resolve()?;
    let mut params = Params::linux();
    overrides.apply(&mut params)?;
    let families: Option<Vec<&str>> = match &args.defense {
        None => None,
        Some(spec) => {
            kharden::defense::parse_list(spec)?;
            Some(registry::families_in(spec))
        }
    };
    let shown = |path: &str| match &families {
        Some(wanted) => registry::param_applies(path, wanted),
        None => true,
    };
    let machine = match &args.machine {
        None => None,
        Some(name) => {
            let m = overrides.apply_machine(&machine::load(name)?)?;
            let text = if name.ends_with(".toml") {
                std::fs::read_to_string(name).ok()
            } else {
                machine::source_text(name).map(str::to_string)
            };
            Some((m, text))
        }
    };
    if args.json {
        let mut all = params.to_json();
        let map = all.as_object_mut().expect("an object");
        map.retain(|path, _| shown(path));
        if let Some((m, text)) = &machine {
            for leaf in machine_params::leaves(m, text.as_deref()) {
                map.insert(
                    format!("machine.{}", leaf.path),
                    serde_json::json!({ "value": toml_to_json(&leaf.value), "provenance": leaf.source }),
                );
            }
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&all).map_err(|e| Error::new(e.to_string()))?
        );
        return Ok(());
    }
    let decls = declarations();
    let width = decls.iter().map(|d| d.path.len()).max().unwrap_or(0);
    for p in params.iter().filter(|p| shown(p.decl.path)) {
        let value = match &p.value {
            Value::Num(v) => format!("{v} {}", p.decl.unit.name()),
            other => other.to_string(),
        };
        println!("{:<width$}  {value:<16}  {}", p.decl.path, p.decl.help);
        println!("{:<width$}  {:<16}  from {}", "", "", p.provenance);
    }
    if let Some((m, text)) = machine {
        println!();
        for leaf in machine_params::leaves(&m, text.as_deref()) {
            let path = format!("machine.{}", leaf.path);
            let source = if leaf.source.is_empty() {
                "-".into()
            } else {
                leaf.source
            };
            println!("{path:<40}  {:<16}  {source}", leaf.value.to_string());
        }
    }
    Ok(())
}

fn toml_to_json(v: &toml::Value) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}
