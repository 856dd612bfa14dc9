//! What `record` sees beside perf: every open of a path on the host while the command runs
//! (a fanotify watch of every mount, FAN_OPEN with the opening thread's id), and the
//! descriptors and working directory the command starts with (/proc of perf's child while it
//! waits to exec the command). raw_syscalls gives an open's path only as a user pointer;
//! these give the file it reached, so that a read can be told from a read of /dev/zero.

use super::fds::{Descriptors, FdSeen, InheritedFd, OpenEvent};
use crate::format::FdKind;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// The kind and path of an open file (`fd` in this process, or a /proc/PID/fd link).
fn describe(path: &Path) -> Option<(FdKind, Arc<str>)> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: c is NUL-terminated; st and sf are filled by the kernel.
    let (st, sf) = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        let mut sf: libc::statfs = std::mem::zeroed();
        if libc::stat(c.as_ptr(), &mut st) != 0 {
            return None;
        }
        // A pipe or socket has no filesystem to name: its kind is in st_mode.
        if libc::statfs(c.as_ptr(), &mut sf) != 0 {
            sf.f_type = 0;
        }
        (st, sf)
    };
    let kind = FdKind::of_file(st.st_mode, st.st_rdev, sf.f_type as u64);
    let target = std::fs::read_link(path)
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
        .filter(|p| p.starts_with('/'))
        .unwrap_or_default();
    Some((kind, Arc::from(target)))
}

/// The descriptors of process `pid` (waiting to exec: perf's child) and its working
/// directory; close-on-exec ones are marked so (fdinfo's flags).
pub fn inherited(pid: u32) -> (Vec<InheritedFd>, Option<Arc<str>>) {
    let dir = format!("/proc/{pid}/fd");
    let mut fds = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            let Ok(fd) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Some((kind, path)) = describe(&e.path()) else {
                continue;
            };
            let flags = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}"))
                .ok()
                .and_then(|t| {
                    t.lines()
                        .find_map(|l| l.strip_prefix("flags:"))
                        .and_then(|v| u64::from_str_radix(v.trim(), 8).ok())
                })
                .unwrap_or(0);
            fds.push(InheritedFd {
                fd,
                kind,
                cloexec: flags & 0o2000000 != 0,
                path,
            });
        }
    }
    fds.sort_by_key(|f| f.fd);
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd"))
        .ok()
        .map(|p| Arc::from(p.to_string_lossy().as_ref()));
    (fds, cwd)
}

/// A fanotify watch of every mount's opens, read by a thread until `stop`.
pub struct OpenWatch {
    fd: i32,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<Vec<OpenEvent>>>,
    unwatched: Vec<String>,
}

impl OpenWatch {
    /// Starts the watch; None where fanotify cannot be used (not root, no kernel support).
    pub fn start() -> Option<OpenWatch> {
        // SAFETY: plain syscalls; the descriptor is owned by the watch.
        let fd = unsafe {
            libc::fanotify_init(
                libc::FAN_CLASS_NOTIF
                    | libc::FAN_CLOEXEC
                    | libc::FAN_NONBLOCK
                    | libc::FAN_REPORT_TID
                    | libc::FAN_UNLIMITED_QUEUE,
                // The event's file is opened in this process: never block on a FIFO.
                (libc::O_RDONLY | libc::O_NONBLOCK | libc::O_LARGEFILE | libc::O_CLOEXEC)
                    as libc::c_uint,
            )
        };
        if fd < 0 {
            return None;
        }
        let mut unwatched = Vec::new();
        let mut marked = 0;
        for m in mount_points() {
            let Ok(c) = CString::new(m.as_str()) else {
                continue;
            };
            // SAFETY: c is NUL-terminated.
            let r = unsafe {
                libc::fanotify_mark(
                    fd,
                    libc::FAN_MARK_ADD | libc::FAN_MARK_MOUNT,
                    libc::FAN_OPEN | libc::FAN_OPEN_EXEC | libc::FAN_ONDIR,
                    libc::AT_FDCWD,
                    c.as_ptr(),
                )
            };
            if r == 0 {
                marked += 1;
            } else {
                unwatched.push(m);
            }
        }
        if marked == 0 {
            // SAFETY: our descriptor.
            unsafe { libc::close(fd) };
            return None;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let reader = std::thread::spawn(move || read_events(fd, &flag));
        Some(OpenWatch {
            fd,
            stop,
            reader: Some(reader),
            unwatched,
        })
    }

    /// Stops the watch and returns every open it saw (after the last queued one is read).
    pub fn finish(mut self, d: &mut Descriptors) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            d.opens = r.join().unwrap_or_default();
        }
        d.unwatched_mounts = std::mem::take(&mut self.unwatched);
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        // SAFETY: our descriptor, closed once.
        unsafe { libc::close(self.fd) };
    }
}

/// Every mount point of this mount namespace (/proc/self/mountinfo's fifth field).
fn mount_points() -> Vec<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<String> = text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| p.replace("\\040", " "))
        .collect();
    points.sort();
    points.dedup();
    points
}

/// CLOCK_MONOTONIC now, in ns (the clock perf's `-k mono` stamps samples with).
pub fn monotonic_ns() -> u64 {
    // SAFETY: ts is filled by the kernel.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Reads the watch's events until `stop` is set and the queue is empty, each stamped with
/// the time it was read (match_opens gives it to the call that made it by that time, so the
/// thread runs at real-time priority: it wakes within microseconds of an event, whatever
/// else the CPUs run). Opens the kernel makes for an execve (FAN_OPEN_EXEC) are not the
/// command's opens and are left out.
fn read_events(fd: i32, stop: &AtomicBool) -> Vec<OpenEvent> {
    let param = libc::sched_param { sched_priority: 10 };
    // SAFETY: sets this thread's policy; failure (not root) leaves it as it was.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    let me = std::process::id();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let meta_len = std::mem::size_of::<libc::fanotify_event_metadata>();
    loop {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd of ours.
        let ready = unsafe { libc::poll(&mut pfd, 1, 20) };
        if ready <= 0 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            continue;
        }
        // SAFETY: reading into our buffer.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
        let read_ns = monotonic_ns();
        if n <= 0 {
            continue;
        }
        let mut at = 0usize;
        while at + meta_len <= n as usize {
            // SAFETY: the kernel wrote whole event records; read_unaligned copies one.
            let m: libc::fanotify_event_metadata =
                unsafe { std::ptr::read_unaligned(buf.as_ptr().add(at) as *const _) };
            if m.event_len < meta_len as u32 {
                break;
            }
            at += m.event_len as usize;
            if m.fd < 0 {
                continue;
            }
            let tid = m.pid as u32;
            if tid != me && m.mask & libc::FAN_OPEN_EXEC == 0 {
                let link = format!("/proc/self/fd/{}", m.fd);
                if let Some((kind, path)) = describe(Path::new(&link)) {
                    out.push(OpenEvent {
                        tid,
                        kind,
                        path,
                        read_ns,
                    });
                }
            }
            // SAFETY: the event's descriptor is ours to close.
            unsafe { libc::close(m.fd) };
        }
    }
    out
}

/// A scan of the command's processes' descriptors (/proc/PID/fd) every millisecond, from its
/// first process down: what fanotify does not report (the kernel opens character devices
/// and FIFOs without notifying: dd's /dev/zero, a shell's redirection to /dev/null) is seen
/// here while it stays open. Only changes are kept.
pub struct FdScan {
    stop: Arc<AtomicBool>,
    scanner: Option<JoinHandle<Vec<FdSeen>>>,
}

impl FdScan {
    pub fn start(root: u32) -> FdScan {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let scanner = std::thread::spawn(move || scan(root, &flag));
        FdScan {
            stop,
            scanner: Some(scanner),
        }
    }

    pub fn finish(mut self, d: &mut Descriptors) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(s) = self.scanner.take() {
            d.seen = s.join().unwrap_or_default();
        }
    }
}

impl Drop for FdScan {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(s) = self.scanner.take() {
            let _ = s.join();
        }
    }
}

/// `root` and its descendants (every thread's children).
fn process_tree(root: u32) -> Vec<u32> {
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let pid = out[i];
        i += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let children = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            out.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            );
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// A descriptor fanotify does not report (not a regular file or directory) is looked at
/// again this often even when its name has not changed: dup2 of another open of the same
/// device onto it leaves the name as it was, and a look after the dup is what tells it.
const SPECIAL_AGAIN_NS: u64 = 20_000_000;

fn scan(root: u32, stop: &AtomicBool) -> Vec<FdSeen> {
    let mut last: std::collections::HashMap<(u32, u32), (Arc<str>, FdKind, u64)> =
        Default::default();
    let mut out = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        for pid in process_tree(root) {
            let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
                continue;
            };
            for e in entries.flatten() {
                let Ok(fd) = e.file_name().to_string_lossy().parse::<u32>() else {
                    continue;
                };
                // The link names the file; only a new name needs a look at what it is.
                let Ok(link) = std::fs::read_link(e.path()) else {
                    continue;
                };
                let link: Arc<str> = Arc::from(link.to_string_lossy().as_ref());
                let at_ns = monotonic_ns();
                let watched = |k: FdKind| matches!(k, FdKind::File | FdKind::Tmpfs | FdKind::Dir);
                if last.get(&(pid, fd)).is_some_and(|(l, k, at)| {
                    *l == link && (watched(*k) || at_ns - at < SPECIAL_AGAIN_NS)
                }) {
                    continue;
                }
                let Some((kind, path)) = describe(&e.path()) else {
                    continue;
                };
                last.insert((pid, fd), (link, kind, at_ns));
                out.push(FdSeen {
                    pid,
                    fd,
                    kind,
                    path,
                    at_ns,
                });
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    out
}
