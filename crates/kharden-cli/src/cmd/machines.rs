//! `kharden machines [show NAME]`.
use clap::{Args as ClapArgs, Subcommand};
use kharden::machine;
use kharden::report::table::Table;

#[derive(ClapArgs)]
pub struct Args {
    #[command(subcommand)]
    action: Option<Action>,
}

#[derive(Subcommand)]
enum Action {
    /// Print one profile (the library's TOML, with its source comments).
    Show { name: String },
}

pub fn run(args: Args) -> kharden::Result<()> {
    match args.action {
        None => {
            let mut t = Table::new("", &["machine", "arch", "cpu", "threads", "nodes", "GHz", "pcid", "invpcid", "broadcast inval"]);
            for name in machine::names() {
                let m = machine::load(name)?;
                let f = &m.cpu.features;
                let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
                let broadcast = if f.invlpgb { "INVLPGB" } else if f.tlbi_broadcast { "TLBI IS" } else { "no" };
                t.push(vec![
                    m.name.clone(),
                    format!("{:?}", m.arch).to_lowercase(),
                    m.cpu.model.clone(),
                    m.threads().to_string(),
                    m.numa_nodes().to_string(),
                    format!("{:.2}", m.cpu.frequency_ghz),
                    yes(f.pcid),
                    yes(f.invpcid),
                    broadcast.to_string(),
                ]);
            }
            print!("{t}");
            Ok(())
        }
        Some(Action::Show { name }) => {
            machine::load(&name)?;
            match machine::source_text(&name) {
                Some(text) => print!("{text}"),
                None => print!("{}", std::fs::read_to_string(&name).map_err(|e| kharden::Error::at(&name, e))?),
            }
            Ok(())
        }
    }
}
