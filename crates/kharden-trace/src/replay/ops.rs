//! The op files between the two passes: one per task, a tag byte and little-endian fields
//! per operation, read back in chunks without holding a file open.

use kharden::Error;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// f64 ns as traced, f64 ns of costs accrued to come out of user time (split.rs).
pub(super) const USER: u8 = 1;
/// u8 variant code, u64 and u32 its numbers (variant.rs), f64 recorded kernel ns, f64 ns of
/// the recorder's cost taken out of it; then optional WAIT and FLUSH markers.
pub(super) const SYSCALL: u8 = 2;
pub(super) const FAULTS: u8 = 3; // u8 kind (0 anon, 1 copy-on-write, 2 file), u32 faults
/// u32 child task number, u8 1 for a vfork, f64 the call's recorded kernel ns, f64 the
/// recorder's cost taken out of it.
pub(super) const FORK: u8 = 4;
pub(super) const EXEC: u8 = 5; // f64 and f64 as FORK
pub(super) const WAIT: u8 = 6;
pub(super) const EXIT: u8 = 7;
pub(super) const THREAD: u8 = 8; // u32 thread task number
pub(super) const FLUSH: u8 = 9; // follows a SYSCALL: u64 pages flushed during it

/// Task number `seq`'s op file.
pub(super) fn file_of(dir: &Path, seq: u32) -> PathBuf {
    dir.join(format!("{seq}.ops"))
}

pub(super) fn io(path: &Path, e: io::Error) -> Error {
    Error::at(path.display(), format!("replay scratch file: {e}"))
}

/// A file read through short open-seek-read-close visits, so that thousands of live tasks
/// do not hold thousands of descriptors (wrap it in a BufReader).
pub(super) struct Visits {
    pub(super) path: PathBuf,
    offset: u64,
}

impl Visits {
    pub(super) fn new(path: PathBuf) -> Visits {
        Visits { path, offset: 0 }
    }
}

impl Read for Visits {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut f = std::fs::File::open(&self.path)?;
        f.seek(SeekFrom::Start(self.offset))?;
        let n = f.read(buf)?;
        self.offset += n as u64;
        Ok(n)
    }
}
