//! Which kernel recording a run simulates: the committed footprints (kernels/), or a file a
//! user recorded on their own kernel (`kharden kernel record-footprint`), read for a run
//! (`--footprints FILE`) and compiled against the profile of the host it was recorded on.
//! A run's parameters carry its recording (`Params::recording`), so runs on different
//! recordings may share a process. A recording read from a file travels as its texts
//! (`Portable`) to processes that cannot see its files, Ray workers on other machines.

use super::table::KernelPaths;
use crate::kernel::footprints::footprint::{read_file, Footprints};
use crate::machine::MachineProfile;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, OnceLock};

/// A footprint file and its paths, compiled.
pub struct Recording {
    pub footprints: Footprints,
    pub paths: Arc<KernelPaths>,
    /// Where it came from: the committed file's place or the path given.
    pub place: String,
    /// What another process needs to run it too (None: the committed recording, which
    /// every process has).
    pub portable: Option<Portable>,
}

/// A recording as the texts it is made of: the footprint file, and its recording host's
/// profile when `kernel.host_machine` names a file rather than a library profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Portable {
    /// The path it was read from (errors name it).
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

impl Recording {
    /// The committed recording (kernels/), compiled once per process against its host's
    /// library profile: what a run simulates unless its parameters name another.
    pub fn committed() -> &'static Arc<Recording> {
        static COMMITTED: OnceLock<Arc<Recording>> = OnceLock::new();
        COMMITTED.get_or_init(|| {
            let f = Footprints::builtin().clone();
            let host = f
                .host_profile()
                .expect("the committed recording's host is in the library");
            let r = compile(
                f,
                &host,
                crate::kernel::footprints::footprint::BUILTIN_PLACE,
                None,
            )
            .expect("the committed footprints compile (kernel/paths/table.rs tests)");
            Arc::new(r)
        })
    }

    /// The footprint file at `path`, compiled. It must record every path the committed
    /// recording has (the model runs them all).
    pub fn read(path: &str) -> Result<Recording> {
        let (p, f) = Portable::read_parsed(path)?;
        Recording::of(p, f)
    }

    /// A recording given as its texts (a Ray worker's, for every point it runs).
    pub fn from_portable(p: Portable) -> Result<Recording> {
        let f = Footprints::parse_at(&p.place, &p.footprints)?;
        Recording::of(p, f)
    }

    /// Whether this is the committed recording.
    pub fn is_committed(&self) -> bool {
        self.portable.is_none()
    }

    /// What tells this recording's simulations apart from another's with the same other
    /// inputs (a memo's key): empty for the committed one, else its place and a hash of
    /// its texts (two files read from one place at different times differ).
    pub fn key(&self) -> String {
        use std::hash::{Hash, Hasher};
        match &self.portable {
            None => String::new(),
            Some(p) => {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                (&p.footprints, &p.host_profile).hash(&mut h);
                format!("{}#{:016x}", p.place, h.finish())
            }
        }
    }

    fn of(p: Portable, f: Footprints) -> Result<Recording> {
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
        compile(f, &host, &place, Some(p))
    }
}

/// A recording shows as its place: its compiled paths are no reading for a log.
impl std::fmt::Debug for Recording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Recording({})", self.place)
    }
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
pub(crate) mod tests {
    use super::*;
    use crate::kernel::{Kernel, OracleMode};
    use crate::params::Params;

    /// A copy of the committed recording in `dir` whose path `name` took `more_ns` longer
    /// in every latency window on the recording host.
    pub(crate) fn slower(dir: &std::path::Path, name: &str, more_ns: f64) -> Recording {
        let builtin = crate::kernel::footprints::footprint::BUILTIN;
        let block = builtin.find(&format!("name = \"{name}\"\n")).unwrap();
        let at = block + builtin[block..].find("latency_ns = [").unwrap();
        let end = at + builtin[at..].find(']').unwrap();
        let latencies: Vec<String> = builtin[at + "latency_ns = [".len()..end]
            .split(',')
            .map(|ns| format!("{:.1}", ns.trim().parse::<f64>().unwrap() + more_ns))
            .collect();
        let text = format!(
            "{}latency_ns = [{}{}",
            &builtin[..at],
            latencies.join(", "),
            &builtin[end..]
        );
        let file = dir.join(format!("slower-{name}.toml"));
        std::fs::write(&file, text).unwrap();
        Recording::read(file.to_str().unwrap()).unwrap()
    }

    /// Runs on two recordings in one process each simulate the one their parameters carry:
    /// a getppid recorded 1000 ns slower makes the loop longer by that work at the target's
    /// clock, and a run on the committed recording after it is the one before it.
    #[test]
    fn runs_on_two_recordings_in_one_process_each_simulate_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let slower = Arc::new(slower(dir.path(), "getppid", 1000.0));
        let m = crate::machine::load("haswell-i7-4770").unwrap();
        let ns = |params: &Params| {
            let mut k = Kernel::boot_with(m.clone(), vec![], params, OracleMode::default());
            crate::workload::SyscallLoop::new("getppid", 500)
                .unwrap()
                .run(&mut k)
                .unwrap()
                .ns_per_iteration()
        };
        let committed = ns(&Params::linux());
        let longer = ns(&Params::linux().with_recording(slower.clone()));
        assert_eq!(ns(&Params::linux()), committed);
        let host_ghz = Recording::committed().footprints.kernel.host_ghz;
        let expected = 1000.0 * host_ghz / m.cpu.frequency_ghz;
        assert!(
            (longer - committed - expected).abs() < 0.05 * expected,
            "{committed} -> {longer} ns, expected {expected:.0} more"
        );
        // The parameters show the recording by its place, not its compiled paths.
        let shown = format!("{:?}", Params::linux().with_recording(slower.clone()));
        assert!(
            shown.contains(&format!("Recording({})", slower.place)),
            "{shown}"
        );
        assert!(!shown.contains("entry_text_offset"));
    }

    /// A memo's key tells recordings apart: none for the committed one, and two files read
    /// from one place differ when their texts do.
    #[test]
    fn recordings_key_by_place_and_text() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Recording::committed().key(), "");
        let a = slower(dir.path(), "getppid", 1000.0);
        let b = slower(dir.path(), "getppid", 2000.0);
        assert_eq!(a.place, b.place);
        assert!(a.key().starts_with(&a.place), "{}", a.key());
        assert_ne!(a.key(), b.key());
        let again = slower(dir.path(), "getppid", 1000.0);
        assert_eq!(a.key(), again.key());
    }

    /// A file that lacks a path the model runs is refused with the names it lacks, before
    /// anything is compiled.
    #[test]
    fn a_recording_without_every_path_is_refused() {
        let dir = std::env::temp_dir().join(format!("kharden-rec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("partial.toml");
        let text = crate::kernel::footprints::footprint::BUILTIN;
        let cut = text.find("[[path]]\nname = \"getppid\"").unwrap();
        let next = cut + text[cut + 1..].find("[[path]]").unwrap() + 1;
        std::fs::write(&file, format!("{}{}", &text[..cut], &text[next..])).unwrap();
        let e = Recording::read(file.to_str().unwrap())
            .unwrap_err()
            .to_string();
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

    /// A recording sent with a host profile that does not parse is refused, naming it.
    #[test]
    fn a_portable_recording_with_a_broken_host_profile_is_refused() {
        let p = Portable {
            place: "/elsewhere/mine.toml".into(),
            footprints: crate::kernel::footprints::footprint::BUILTIN
                .replace(LIBRARY_HOST, "host_machine = \"mine-host.toml\""),
            host_profile: Some("[cpu]\nfrequency_ghz = \"fast\"\n".into()),
        };
        let e = Recording::from_portable(p).unwrap_err().to_string();
        assert!(
            e.starts_with(
                "/elsewhere/mine.toml: kernel.host_machine /elsewhere/mine-host.toml: line 2"
            ),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
    }
}
