//! `kharden machines [show NAME | detect [FLAGS] | cpuid-tlbs FILE]`.
use clap::builder::NonEmptyStringValueParser;
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
    /// which).
    Detect(DetectArgs),
    /// Print the `[[tlb]]` arrays a published CPUID dump describes (InstLatx64's or AIDA64's
    /// text, `CPUID 00000002: EAX-EBX-ECX-EDX` per leaf), to source a profile's TLB geometry
    /// from the part's own CPUID.
    CpuidTlbs {
        /// The dump's text file.
        file: String,
    },
}

/// What `machines detect` was asked to do.
#[derive(ClapArgs, Debug, PartialEq)]
struct DetectArgs {
    /// Profile name (default: detected-<cpu model>).
    #[arg(long, value_name = "NAME", value_parser = profile_name)]
    name: Option<String>,
    /// Read what the host reports, time nothing.
    #[arg(long)]
    no_measure: bool,
    /// Write the TOML to FILE instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE", value_parser = NonEmptyStringValueParser::new())]
    output: Option<String>,
}

/// `--name`'s value: letters, digits, '-', '_' and '.' only (it becomes a file name).
fn profile_name(v: &str) -> Result<String, String> {
    if !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    {
        Ok(v.to_string())
    } else {
        Err("expected letters, digits, '-', '_' or '.'".to_string())
    }
}

pub fn run(args: Args) -> kharden::Result<()> {
    match args.action {
        None => {
            let mut t = Table::new(
                "",
                &[
                    "machine",
                    "arch",
                    "cpu",
                    "threads",
                    "nodes",
                    "GHz",
                    "pcid",
                    "invpcid",
                    "broadcast inval",
                ],
            );
            for name in machine::names() {
                let m = machine::load(name)?;
                let f = &m.cpu.features;
                let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
                let broadcast = if f.invlpgb {
                    "INVLPGB"
                } else if f.tlbi_broadcast {
                    "TLBI IS"
                } else {
                    "no"
                };
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
        Some(Action::Detect(f)) => {
            let opts = machine::detect::DetectOptions {
                name: f.name,
                measure: !f.no_measure,
                ..Default::default()
            };
            let d = machine::detect::detect(&opts)?;
            match f.output {
                Some(path) => std::fs::write(&path, &d.text)
                    .map_err(|e| machine::detect::write_error(&path, e))?,
                None => print!("{}", d.text),
            }
            Ok(())
        }
        Some(Action::CpuidTlbs { file }) => {
            let text = std::fs::read_to_string(&file).map_err(|e| kharden::Error::at(&file, e))?;
            print!("{}", machine::detect::tlbs_from_cpuid_dump(&file, &text)?);
            Ok(())
        }
        Some(Action::Show { name }) => {
            machine::load(&name)?;
            match machine::source_text(&name) {
                Some(text) => print!("{text}"),
                None => print!(
                    "{}",
                    std::fs::read_to_string(&name).map_err(|e| kharden::Error::at(&name, e))?
                ),
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cli, Command};
    use clap::error::ErrorKind;
    use clap::Parser;

    fn detect(flags: &[&str]) -> Result<DetectArgs, clap::Error> {
        let argv = ["kharden", "machines", "detect"].iter().chain(flags);
        match Cli::try_parse_from(argv)?.command {
            Command::Machines(Args {
                action: Some(Action::Detect(f)),
            }) => Ok(f),
            _ => panic!("{flags:?}: not parsed as 'machines detect'"),
        }
    }

    #[test]
    fn detect_flags_parse() {
        let f = detect(&["--name", "box", "--no-measure", "-o", "x.toml"]).unwrap();
        assert_eq!(
            f,
            DetectArgs {
                name: Some("box".into()),
                no_measure: true,
                output: Some("x.toml".into())
            }
        );
        assert_eq!(
            detect(&["--name=box"]).unwrap().name.as_deref(),
            Some("box")
        );
        assert_eq!(
            detect(&["--output=x.toml"]).unwrap().output.as_deref(),
            Some("x.toml")
        );
        assert_eq!(
            detect(&[]).unwrap(),
            DetectArgs {
                name: None,
                no_measure: false,
                output: None
            }
        );
        assert_eq!(
            detect(&["--help"]).unwrap_err().kind(),
            ErrorKind::DisplayHelp
        );
    }

    #[test]
    fn bad_detect_flags_name_the_flag() {
        for (bad, kind, expect) in [
            (
                vec!["--frobnicate"],
                ErrorKind::UnknownArgument,
                "'--frobnicate'",
            ),
            (vec!["--name"], ErrorKind::InvalidValue, "'--name <NAME>'"),
            (
                vec!["--name", "a b"],
                ErrorKind::ValueValidation,
                "for '--name <NAME>': expected letters",
            ),
            (
                vec!["--name="],
                ErrorKind::ValueValidation,
                "for '--name <NAME>': expected letters",
            ),
            (
                vec!["--output", "--no-measure"],
                ErrorKind::InvalidValue,
                "'--output <FILE>'",
            ),
            (
                vec!["--output="],
                ErrorKind::InvalidValue,
                "'--output <FILE>'",
            ),
            (
                vec!["--no-measure=yes"],
                ErrorKind::TooManyValues,
                "'--no-measure'",
            ),
        ] {
            let e = detect(&bad).unwrap_err();
            let first = e.to_string().lines().next().unwrap_or_default().to_string();
            assert_eq!(e.kind(), kind, "{bad:?}: {e}");
            assert!(first.contains(expect), "{bad:?}: {first}");
        }
    }
}
