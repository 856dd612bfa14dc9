//! Safe files: private scratch directories and atomically replaced outputs, both removed on
//! exit, on error and on SIGINT/SIGTERM/SIGHUP (the handler removes every path registered
//! here, then exits with 130).
//!
//! A scratch directory is created by `tempfile` with a random name and mode 0700, so a
//! pre-created file or link of another user cannot be written through. An output is written
//! to a temporary file beside its destination and renamed into place only when complete, so
//! an interrupted command leaves the previous file (or none), never a truncated one.

use kharden::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Paths to remove if the process is interrupted.
static ON_SIGNAL: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// Child processes (perf) to stop first if the process is interrupted.
static CHILDREN: Mutex<Vec<u32>> = Mutex::new(Vec::new());
/// Set when SIGINT/SIGTERM arrives, before the handler starts removing files.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// After an interrupt, waits for the handler (which exits with 130) instead of reporting
/// an error the interrupt caused; returns at once otherwise.
pub fn wait_if_interrupted() {
    if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_secs(10));
    }
}

/// Installs the handler (once; later calls do nothing): on SIGINT, SIGTERM or SIGHUP, the
/// registered paths are removed and the process exits with status 130.
pub fn remove_on_signal() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
            // A SIGTERM sent to kharden alone must stop perf (and so the recorded command)
            // too; from a terminal, Ctrl-C reaches them already.
            let children = CHILDREN.lock().map(|c| c.clone()).unwrap_or_default();
            for pid in children {
                // SAFETY: kill(2) with a pid this process started and a valid signal.
                unsafe {
                    libc::kill(pid as libc::pid_t, libc::SIGTERM);
                }
            }
            let paths = match ON_SIGNAL.lock() {
                Ok(p) => p.clone(),
                Err(p) => p.into_inner().clone(),
            };
            for p in paths {
                // Rename a scratch directory first: the main thread, still running, can then
                // create nothing more under the old path, so the removal cannot race with it.
                let mut dead = p.clone().into_os_string();
                dead.push(".interrupted");
                let p = if !p.starts_with("/sys/fs/cgroup") && std::fs::rename(&p, &dead).is_ok() {
                    PathBuf::from(dead)
                } else {
                    p
                };
                // rmdir first: a cgroup is emptied by its processes exiting, not by unlinking.
                for _ in 0..50 {
                    let gone = std::fs::remove_dir(&p)
                        .or_else(|_| std::fs::remove_file(&p))
                        .or_else(|_| std::fs::remove_dir_all(&p))
                        .is_ok();
                    if gone || !p.exists() {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            }
            eprintln!("kharden: interrupted");
            std::process::exit(130);
        });
    });
}

/// Registers directory `dir` (made by someone else, e.g. a cgroup) for removal on a signal.
pub fn remove_on_signal_dir(dir: &Path) {
    remove_on_signal();
    register(dir);
}

/// Child process `pid` receives SIGTERM if this process is interrupted, until `forget_child`.
pub fn stop_on_signal(pid: u32) {
    remove_on_signal();
    if let Ok(mut c) = CHILDREN.lock() {
        c.push(pid);
    }
}

pub fn forget_child(pid: u32) {
    if let Ok(mut c) = CHILDREN.lock() {
        c.retain(|&p| p != pid);
    }
}

/// Forgets a path registered with `remove_on_signal_dir`.
pub fn forget(p: &Path) {
    unregister(p);
}

fn register(p: &Path) {
    if let Ok(mut v) = ON_SIGNAL.lock() {
        v.push(p.to_path_buf());
    }
}

fn unregister(p: &Path) {
    if let Ok(mut v) = ON_SIGNAL.lock() {
        v.retain(|x| x != p);
    }
}

/// A private scratch directory, removed when dropped or on a signal.
pub struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    /// Creates `$TMPDIR/kharden-PURPOSE-XXXXXX` (random suffix, mode 0700).
    pub fn new(purpose: &str) -> Result<Scratch> {
        remove_on_signal();
        let dir = tempfile::Builder::new()
            .prefix(&format!("kharden-{purpose}-"))
            .tempdir()
            .map_err(|e| {
                Error::at(
                    std::env::temp_dir().display(),
                    format!("cannot create a scratch directory: {e}"),
                )
            })?;
        register(dir.path());
        Ok(Scratch { dir })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        unregister(self.dir.path());
    }
}

/// An output being written: a temporary file beside `dest`, renamed onto it by `commit`,
/// removed if dropped uncommitted or on a signal.
pub struct Output {
    dest: PathBuf,
    tmp: tempfile::NamedTempFile,
    tmp_path: PathBuf,
}

impl Output {
    /// Starts writing `dest`. Refuses an existing `dest` unless `overwrite`; fails at once
    /// (naming `dest`) when its directory does not exist or is not writable.
    pub fn create(dest: &Path, overwrite: bool) -> Result<Output> {
        remove_on_signal();
        if !overwrite && dest.exists() {
            return Err(Error::at(
                dest.display(),
                "already exists (use --force to overwrite it)",
            ));
        }
        let parent = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let name = dest.file_name().map(|n| n.to_string_lossy().into_owned());
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{}.", name.as_deref().unwrap_or("out")))
            .suffix(".tmp")
            .tempfile_in(parent)
            .map_err(|e| Error::at(dest.display(), format!("cannot write here: {e}")))?;
        // tempfile makes it private (0600); an output is an ordinary file.
        use std::os::unix::fs::PermissionsExt;
        let _ = tmp
            .as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644));
        register(tmp.path());
        Ok(Output {
            dest: dest.to_path_buf(),
            tmp_path: tmp.path().to_path_buf(),
            tmp,
        })
    }

    pub fn file(&mut self) -> &mut std::fs::File {
        self.tmp.as_file_mut()
    }

    /// The temporary file's path (for tools that write a path themselves).
    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    /// Renames the finished file onto its destination.
    pub fn commit(self) -> Result<()> {
        let Output {
            dest,
            tmp,
            tmp_path,
        } = self;
        let done = tmp.persist(&dest).map(|_| ()).map_err(|e| {
            Error::at(
                dest.display(),
                format!("cannot rename into place: {}", e.error),
            )
        });
        unregister(&tmp_path);
        done
    }
}
