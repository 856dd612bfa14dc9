//! Which kernel recording the model runs: the committed footprints (kernels/), or a file a
//! user recorded on their own kernel (`kharden kernel record-footprint`), chosen once per
//! process before the first simulation (`--footprints FILE`) and compiled against the
//! profile of the host it was recorded on.

use super::footprint::Footprints;
use super::path::KernelPaths;
use crate::{Error, Result};
use std::sync::{Arc, OnceLock};

/// A footprint file and its paths, compiled.
#[derive(Debug)]
pub struct Recording {
    pub footprints: Footprints,
    pub paths: Arc<KernelPaths>,
    /// Where it came from: the committed file's place or the path given.
    pub place: String,
}

static CURRENT: OnceLock<Recording> = OnceLock::new();

/// The recording every simulation in this process runs: the committed one unless `select`
/// chose another first.
pub fn current() -> &'static Recording {
    CURRENT.get_or_init(|| {
        compile(
            Footprints::builtin().clone(),
            super::footprint::BUILTIN_PLACE,
        )
        .expect("the committed footprints compile (kernel/path.rs tests)")
    })
}

/// Makes the footprint file at `path` the recording of every later simulation in this
/// process. It must record every path the committed recording has (the model runs them
/// all), and it is refused once a simulation has run on another.
pub fn select(path: &str) -> Result<()> {
    let f = Footprints::load(Some(path))?;
    let missing: Vec<&str> = Footprints::builtin()
        .names()
        .into_iter()
        .filter(|n| f.path(n).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(Error::at(
            path,
            format!(
                "expected every path the model runs; missing {} (record every scenario: kharden kernel record-footprint without --scenario)",
                missing.join(", ")
            ),
        ));
    }
    let r = compile(f, path)?;
    if let Err(r) = CURRENT.set(r) {
        let now = &current().place;
        if *now != r.place {
            return Err(Error::at(
                path,
                format!("this process already simulates with the footprints of {now}"),
            ));
        }
    }
    Ok(())
}

fn compile(footprints: Footprints, place: &str) -> Result<Recording> {
    let host = footprints.host_profile()?;
    let paths = KernelPaths::compile(&footprints, &host).map_err(|e| Error::at(place, e))?;
    Ok(Recording {
        footprints,
        paths: Arc::new(paths),
        place: place.to_string(),
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
        let text = super::super::footprint::BUILTIN;
        let cut = text.find("[[path]]\nname = \"getppid\"").unwrap();
        let next = cut + text[cut + 1..].find("[[path]]").unwrap() + 1;
        std::fs::write(&file, format!("{}{}", &text[..cut], &text[next..])).unwrap();
        let e = select(file.to_str().unwrap()).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(e.contains("missing getppid"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
}
