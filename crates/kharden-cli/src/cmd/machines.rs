//! `kharden machines [show NAME | detect [FLAGS]]`.
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
    /// Write a profile of this host: topology, features and TLB geometry as the host reports
    /// them, user-space timings, and the rest from the closest library profile (each value says
    /// which). Flags: --name NAME, --no-measure, --output FILE.
    #[command(disable_help_flag = true)]
    Detect {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        flags: Vec<String>,
    },
}

const DETECT_USAGE: &str = "usage: kharden machines detect [--name NAME] [--no-measure] [--output FILE]";

/// What `machines detect` was asked to do.
#[derive(Debug, PartialEq)]
struct DetectFlags {
    name: Option<String>,
    measure: bool,
    output: Option<String>,
    help: bool,
}

/// Parses `detect`'s flags by hand so every mistake is one line naming the flag.
fn parse_detect_flags(args: &[String]) -> kharden::Result<DetectFlags> {
    let mut f = DetectFlags { name: None, measure: true, output: None, help: false };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let mut value = |what: &str| -> kharden::Result<String> {
            let v = match &inline {
                Some(v) => v.clone(),
                None => it.next().cloned().ok_or_else(|| kharden::Error::at(flag, format!("expected {what} after it")))?,
            };
            if v.is_empty() || v.starts_with("--") {
                return Err(kharden::Error::at(flag, format!("expected {what}, got '{v}'")));
            }
            Ok(v)
        };
        match flag {
            "--name" => {
                let v = value("a profile name")?;
                if !v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.') {
                    return Err(kharden::Error::at("--name", format!("expected letters, digits, '-', '_' or '.', got '{v}'")));
                }
                f.name = Some(v);
            }
            "--output" | "-o" => f.output = Some(value("a file path")?),
            "--no-measure" if inline.is_none() => f.measure = false,
            "--help" | "-h" if inline.is_none() => f.help = true,
            _ => return Err(kharden::Error::at(a, format!("unknown flag for 'machines detect'; {DETECT_USAGE}"))),
        }
    }
    Ok(f)
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
        Some(Action::Detect { flags }) => {
            let f = parse_detect_flags(&flags)?;
            if f.help {
                println!("{DETECT_USAGE}");
                println!("  --name NAME     profile name (default: detected-<cpu model>)");
                println!("  --no-measure    read what the host reports, time nothing");
                println!("  --output FILE   write the TOML to FILE instead of standard output");
                return Ok(());
            }
            let opts = machine::detect::DetectOptions { name: f.name, measure: f.measure, ..Default::default() };
            let d = machine::detect::detect(&opts)?;
            match f.output {
                Some(path) => std::fs::write(&path, &d.text).map_err(|e| machine::detect::write_error(&path, e))?,
                None => print!("{}", d.text),
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn detect_flags_parse() {
        let f = parse_detect_flags(&args(&["--name", "box", "--no-measure", "-o", "x.toml"])).unwrap();
        assert_eq!(f, DetectFlags { name: Some("box".into()), measure: false, output: Some("x.toml".into()), help: false });
        let f = parse_detect_flags(&args(&["--name=box"])).unwrap();
        assert_eq!(f.name.as_deref(), Some("box"));
        assert!(parse_detect_flags(&args(&["--help"])).unwrap().help);
    }

    #[test]
    fn bad_detect_flags_are_one_line_errors() {
        for (bad, expect) in [
            (vec!["--frobnicate"], "--frobnicate: unknown flag"),
            (vec!["--name"], "--name: expected a profile name after it"),
            (vec!["--name", "a b"], "--name: expected letters"),
            (vec!["--output", "--no-measure"], "--output: expected a file path"),
            (vec!["--no-measure=yes"], "unknown flag"),
        ] {
            let e = parse_detect_flags(&args(&bad)).unwrap_err().to_string();
            assert!(e.contains(expect), "{bad:?}: {e}");
            assert!(!e.contains('\n'));
        }
    }
}
