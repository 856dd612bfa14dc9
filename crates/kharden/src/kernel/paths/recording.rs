//! Which kernel recording the model runs: the committed footprints (kernels/), or a file a
//! user recorded on their own kernel (`kharden kernel record-footprint`), chosen once per
//! process before the first simulation (`--footprints FILE`) and compiled against the
//! profile of the host it was recorded on. A chosen recording travels as its texts
//! (`Portable`) to processes that cannot see its files, Ray workers on other machines.

use super::table::KernelPaths;
use crate::kernel::footprints::footprint::{read_file, Footprints};
use crate::machine::MachineProfile;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, OnceLock};

/// A footprint file and its paths, compiled.
#[derive(Debug)]
pub struct Recording {
    pub footprints: Footprints,
    pub paths: Arc<KernelPaths>,
    /// Where it came from: the committed file's place or the path given.
    pub place: String,
    /// What another process needs to choose it too (None: the committed recording, which
    /// every process has).
    pub portable: Option<Portable>,
}

/// A recording as the texts it is made of: the footprint file, and its recording host's
/// profile when `kernel.host_machine` names a file rather than a library profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Portable {
    /// The path it was read from (errors name it; a process keeps one recording by it).
    pub place: String,
    pub footprints: String,
    pub host_profile: Option<String>,
}

impl Portable {
    /// The footprint file at `path`, with the host profile file it names, if any.
    pub fn read(path: &str) -> Result<Portable> {
        Portable::read_parsed(path).map(|(p, _)| p)
    }

    /// `read`, with the footprints parsed on the way.
    fn read_parsed(path: &str) -> Result<(Portable, Footprints)> {
        let footprints = read_file(path, "footprint file")?;
        let f = Footprints::parse_at(path, &footprints)?;
        let host = &f.kernel.host_machine;
        let host_profile = crate::machine::is_path(host)
            .then(|| {
                crate::machine::validate::read_bounded(host, "machine file")
                    .map_err(|e| Error::at(path, format!("kernel.host_machine: {e}")))
            })
            .transpose()?;
        let p = Portable {
            place: path.to_string(),
            footprints,
            host_profile,
        };
        Ok((p, f))
    }
}

static CURRENT: OnceLock<Recording> = OnceLock::new();

/// The recording every simulation in this process runs: the committed one unless `select`
/// chose another first.
pub fn current() -> &'static Recording {
    CURRENT.get_or_init(|| {
        let f = Footprints::builtin().clone();
        let host = f
            .host_profile()
            .expect("the committed recording's host is in the library");
        compile(
            f,
            &host,
            crate::kernel::footprints::footprint::BUILTIN_PLACE,
            None,
        )
        .expect("the committed footprints compile (kernel/paths/table.rs tests)")
    })
}

/// The paths every simulation in this process runs: those of `current()` (the committed
/// recording unless `--footprints` chose another).
pub fn paths() -> Arc<KernelPaths> {
    current().paths.clone()
}

/// The recording chosen for this process, as texts, if one was chosen (None: the
/// committed recording, chosen or not yet).
pub fn chosen() -> Option<Portable> {
    CURRENT.get().and_then(|r| r.portable.clone())
}

/// Makes the footprint file at `path` the recording of every later simulation in this
/// process. It must record every path the committed recording has (the model runs them
/// all), and it is refused once a simulation has run on another.
pub fn select(path: &str) -> Result<()> {
    if running(path) {
        return Ok(());
    }
    let (p, f) = Portable::read_parsed(path)?;
    choose(p, f)
}

/// `select` of a recording given as its texts (a Ray worker's, for every point it runs).
pub fn select_portable(p: Portable) -> Result<()> {
    if running(&p.place) {
        return Ok(());
    }
    let f = Footprints::parse_at(&p.place, &p.footprints)?;
    choose(p, f)
}

/// Whether the recording from `place` is already the one this process runs (nothing to
/// check or compile again).
fn running(place: &str) -> bool {
    CURRENT.get().is_some_and(|r| r.place == place)
}

fn choose(p: Portable, f: Footprints) -> Result<()> {
    let place = p.place.clone();
    let missing: Vec<&str> = Footprints::builtin()
        .names()
        .into_iter()
        .filter(|n| f.path(n).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(Error::at(
            &place,
            format!(
                "expected every path the model runs; missing {} (record every scenario: kharden kernel record-footprint without --scenario)",
                missing.join(", ")
            ),
        ));
    }
    let host = match &p.host_profile {
        Some(text) => {
            let host_place = format!("{place}: kernel.host_machine {}", f.kernel.host_machine);
            crate::machine::parse(&host_place, text)?
        }
        None => f.host_profile()?,
    };
    let r = compile(f, &host, &place, Some(p))?;
    if let Err(r) = CURRENT.set(r) {
        let now = &current().place;
        if *now != r.place {
            return Err(Error::at(
                &place,
                format!("this process already simulates with the footprints of {now}"),
            ));
        }
    }
    Ok(())
}

fn compile(
    footprints: Footprints,
    host: &MachineProfile,
    place: &str,
    portable: Option<Portable>,
) -> Result<Recording> {
    let paths = KernelPaths::compile(&footprints, host).map_err(|e| Error::at(place, e))?;
    Ok(Recording {
        footprints,
        paths: Arc::new(paths),
        place: place.to_string(),
        portable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file that lacks a path the model runs is refused with the names it lacks, before
    /// anything is compiled or chosen.
    #[test]
    fn a_recording_without_every_path_is_refused() {
        let dir = std::env::temp_dir().join(format!("kharden-rec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("partial.toml");
        let text = crate::kernel::footprints::footprint::BUILTIN;
        let cut = text.find("[[path]]\nname = \"getppid\"").unwrap();
        let next = cut + text[cut + 1..].find("[[path]]").unwrap() + 1;
        std::fs::write(&file, format!("{}{}", &text[..cut], &text[next..])).unwrap();
        let e = select(file.to_str().unwrap()).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(e.contains("missing getppid"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }

    const LIBRARY_HOST: &str = "host_machine = \"recording-host-epyc-zen4-kvm\"";

    /// A recording read for another process carries its host profile's text when the host
    /// is a file beside it (the other process may not have it), and nothing for a library
    /// profile; it travels as JSON unchanged.
    #[test]
    fn a_portable_recording_carries_the_host_profile_file_it_names() {
        let dir = tempfile::tempdir().unwrap();
        let builtin = crate::kernel::footprints::footprint::BUILTIN;
        assert!(builtin.contains(LIBRARY_HOST));
        let library = dir.path().join("library.toml");
        std::fs::write(&library, builtin).unwrap();
        let p = Portable::read(library.to_str().unwrap()).unwrap();
        assert_eq!((p.footprints.as_str(), p.host_profile), (builtin, None));

        let mine = dir.path().join("mine.toml");
        let text = builtin.replace(LIBRARY_HOST, "host_machine = \"mine-host.toml\"");
        std::fs::write(&mine, &text).unwrap();
        let missing = Portable::read(mine.to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            missing.contains("kernel.host_machine") && missing.contains("mine-host.toml"),
            "{missing}"
        );
        let host = crate::machine::source_text("recording-host-epyc-zen4-kvm").unwrap();
        std::fs::write(dir.path().join("mine-host.toml"), host).unwrap();
        let p = Portable::read(mine.to_str().unwrap()).unwrap();
        assert_eq!(p.host_profile.as_deref(), Some(host));
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<Portable>(&json).unwrap(), p);
    }

    /// A recording sent with a host profile that does not parse is refused, naming it,
    /// before anything is chosen.
    #[test]
    fn a_portable_recording_with_a_broken_host_profile_is_refused() {
        let p = Portable {
            place: "/elsewhere/mine.toml".into(),
            footprints: crate::kernel::footprints::footprint::BUILTIN
                .replace(LIBRARY_HOST, "host_machine = \"mine-host.toml\""),
            host_profile: Some("[cpu]\nfrequency_ghz = \"fast\"\n".into()),
        };
        let e = select_portable(p).unwrap_err().to_string();
        assert!(
            e.starts_with(
                "/elsewhere/mine.toml: kernel.host_machine /elsewhere/mine-host.toml: line 2"
            ),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
    }
}
