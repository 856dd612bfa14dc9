//! `kharden defenses`: the plug-ins and their variants.
use kharden::defense::CATALOGUE;
use kharden::report::table::Table;

pub fn run() -> kharden::Result<()> {
    let mut t = Table::new("", &["defense", "broken on purpose", "what it is"]);
    for (name, what, broken) in CATALOGUE {
        t.push(vec![name.to_string(), if *broken { "yes" } else { "no" }.into(), what.to_string()]);
    }
    print!("{t}");
    Ok(())
}
