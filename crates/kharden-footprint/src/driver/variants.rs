//! The syscall variants a replayed trace tells apart by what they touch (docs/design/
//! replay.md) that the other scenarios do not run: reads and writes of a pipe and of tmpfs,
//! a path walk of one component (relative to an open directory) beside the other
//! scenarios' walk of six, a lookup that fails, and getdents64 of a small and a large
//! directory (the model interpolates by the bytes a call returns).

use super::{close, ok, open, Driver};
use kharden::kernel::paths::syscall::{GETDENTS_LARGE, GETDENTS_SMALL};
use std::ffi::CString;
use std::io;

/// Reads and writes of 4 KiB through a pipe (a writer filling the pipe's 16 buffers, then
/// a reader emptying them, each in a window of its own: nobody blocks), and of a tmpfs
/// file's page-cache pages; the one-component walk and stat; a failed open; getdents64.
pub(super) fn variants(d: &mut Driver) -> io::Result<()> {
    pipes(d)?;
    tmpfs(d)?;
    walks(d)?;
    dirents(d)
}

fn pipes(d: &mut Driver) -> io::Result<()> {
    const SLOTS: u64 = 16; // pipe_buffers of a default pipe: 64 KiB
    let mut fds = [0i32; 2];
    // SAFETY (whole function): syscalls on a pipe and a buffer owned here.
    ok(unsafe { libc::pipe(fds.as_mut_ptr()) } as i64, "pipe")?;
    let mut buf = vec![0x5a_u8; 4096];
    let b = buf.as_mut_ptr() as *mut libc::c_void;
    let tick = d.ticker();
    for _ in 0..d.n(20_000) {
        d.window(Some("write-pipe-4k"), None, || {
            for _ in 0..SLOTS {
                tick.op();
                ok(unsafe { libc::write(fds[1], b, 4096) } as i64, "write")?;
            }
            Ok(SLOTS)
        })?;
        d.window(Some("read-pipe-4k"), None, || {
            for _ in 0..SLOTS {
                tick.op();
                ok(unsafe { libc::read(fds[0], b, 4096) } as i64, "read")?;
            }
            Ok(SLOTS)
        })?;
    }
    close(fds[0])?;
    close(fds[1])
}

/// A file of 256 pages on tmpfs (/dev/shm), read and written 4 KiB at a time as
/// files::read-4k-file does on ext4.
fn tmpfs(d: &mut Driver) -> io::Result<()> {
    const PAGES: usize = 256;
    let dir =
        std::path::Path::new("/dev/shm").join(format!("kharden-footprint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("{} (tmpfs for the tmpfs paths): {e}", dir.display()),
        )
    })?;
    let path = dir.join("data.bin");
    std::fs::write(&path, vec![0x5a_u8; PAGES * 4096])?;
    let fs = std::fs::File::open(&path).and_then(|f| {
        // SAFETY: statfs of an open file into a zeroed struct.
        let mut sf: libc::statfs = unsafe { std::mem::zeroed() };
        use std::os::fd::AsRawFd;
        ok(
            unsafe { libc::fstatfs(f.as_raw_fd(), &mut sf) } as i64,
            "fstatfs",
        )?;
        Ok(sf.f_type as u64)
    });
    const TMPFS_MAGIC: u64 = 0x0102_1994;
    if fs? != TMPFS_MAGIC {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(io::Error::other("/dev/shm is not tmpfs here"));
    }
    let c = CString::new(path.to_string_lossy().into_owned()).unwrap();
    let fd = open(&c, libc::O_RDWR)?;
    let mut buf = vec![0u8; 4096];
    let b = buf.as_mut_ptr() as *mut libc::c_void;
    let tick = d.ticker();
    let mut result = Ok(());
    'paths: for (name, write) in [("read-4k-tmpfs", false), ("write-4k-tmpfs", true)] {
        for _ in 0..d.n(2000) {
            // SAFETY: rewinding our descriptor, outside the window.
            if let Err(e) = ok(unsafe { libc::lseek(fd, 0, libc::SEEK_SET) }, "lseek") {
                result = Err(e);
                break 'paths;
            }
            result = d.window(Some(name), None, || {
                for _ in 0..PAGES {
                    tick.op();
                    // SAFETY: 4 KiB of our buffer through our descriptor.
                    let n = unsafe {
                        if write {
                            libc::write(fd, b, 4096)
                        } else {
                            libc::read(fd, b, 4096)
                        }
                    };
                    ok(n as i64, name)?;
                }
                Ok(PAGES as u64)
            });
            if result.is_err() {
                break 'paths;
            }
        }
    }
    close(fd)?;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// openat and newfstatat of a header by one component, relative to its open directory
/// (find's walk, a compiler's header beside its source); an open of a missing header by
/// six components (a search path's misses), answered from the dentry cache's negative
/// entry after the first.
fn walks(d: &mut Driver) -> io::Result<()> {
    d.file("include/linux/sub/header.h", 4096)?;
    let dir = CString::new(
        d.dir
            .join("include/linux/sub")
            .to_string_lossy()
            .into_owned(),
    )
    .unwrap();
    let dirfd = open(&dir, libc::O_RDONLY | libc::O_DIRECTORY)?;
    let name = CString::new("header.h").unwrap();
    const BATCH: usize = 500;
    let mut fds = Vec::with_capacity(BATCH);
    let tick = d.ticker();
    for _ in 0..d.n(600) {
        fds.clear();
        d.window(Some("openat-1"), None, || {
            for _ in 0..BATCH {
                tick.op();
                // SAFETY: a name relative to our directory descriptor.
                let fd =
                    unsafe { libc::openat(dirfd, name.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
                fds.push(ok(fd as i64, "openat")? as i32);
            }
            Ok(BATCH as u64)
        })?;
        for &fd in &fds {
            close(fd)?;
        }
    }
    // SAFETY (below): stat and open of names we own, into a zeroed stat buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    d.repeat("newfstatat-1", 1_000_000, || {
        ok(
            unsafe { libc::fstatat(dirfd, name.as_ptr(), &mut st, 0) } as i64,
            "newfstatat",
        )
        .map(drop)
    })?;
    let missing = CString::new(
        d.dir
            .join("include/linux/sub/missing.h")
            .to_string_lossy()
            .into_owned(),
    )
    .unwrap();
    d.repeat("openat-enoent", 1_000_000, || {
        let fd = unsafe { libc::open(missing.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd >= 0 {
            return Err(io::Error::other("openat-enoent: the missing file exists"));
        }
        Ok(())
    })?;
    close(dirfd)
}

/// getdents64 of a fresh descriptor of a directory of 8 entries and of one of 256 (names
/// f000..: every record 24 bytes, "." and ".." included), once each: the bytes returned
/// are kernel/paths/syscall.rs's GETDENTS_SMALL and GETDENTS_LARGE, which the model interpolates
/// between; the driver checks them.
fn dirents(d: &mut Driver) -> io::Result<()> {
    const BATCH: usize = 200;
    for (path, entries, bytes) in [
        ("getdents64-small", 8, GETDENTS_SMALL),
        ("getdents64-large", 256, GETDENTS_LARGE),
    ] {
        let dir = d.dir.join(format!("dents-{entries}"));
        std::fs::create_dir_all(&dir)?;
        for i in 0..entries {
            std::fs::write(dir.join(format!("f{i:03}")), b"")?;
        }
        let c = CString::new(dir.to_string_lossy().into_owned()).unwrap();
        let mut buf = vec![0u8; 32768];
        let tick = d.ticker();
        let mut fds = Vec::with_capacity(BATCH);
        for _ in 0..d.n(if entries > 8 { 1000 } else { 3000 }) {
            fds.clear();
            for _ in 0..BATCH {
                fds.push(open(&c, libc::O_RDONLY | libc::O_DIRECTORY)?);
            }
            d.window(Some(path), None, || {
                for &fd in &fds {
                    tick.op();
                    // SAFETY: getdents64 into our buffer.
                    let n = unsafe {
                        libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len())
                    };
                    if ok(n, "getdents64")? as u64 != bytes {
                        return Err(io::Error::other(format!(
                            "getdents64 of {entries} entries returned {n} bytes, not {bytes}"
                        )));
                    }
                }
                Ok(BATCH as u64)
            })?;
            for &fd in &fds {
                close(fd)?;
            }
        }
    }
    Ok(())
}
