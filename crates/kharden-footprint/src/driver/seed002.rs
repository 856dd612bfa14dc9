//! Scenarios for the operations seed 002 (NUMA kernel text replication) measures that the
//! other scenarios do not run: a signal sent to a sleeping process and its delivery, a mount
//! of procfs, an mmap with MAP_LOCKED. Each operation runs in a window of its own (one
//! operation per window): what comes before and after it (the handshake with the child, the
//! unmount, the munmap) runs outside any window, so no sample of it is kept.

use super::{ok, pin_to_cpu, unmap, unpin, Driver};
use crate::marker::Markers;
use crate::window::{gettid, now_ns, Window};
use std::ffi::CString;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// One operation in a window of `path`.
fn once(d: &mut Driver, path: &str, f: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
    d.window(Some(path), None, || f().map(|_| 1))
}

fn push_window(d: &mut Driver, path: &str, start_ns: u64, end_ns: u64) {
    d.windows.push(Window {
        repeat: d.repeat,
        own: Some(path.to_string()),
        others: None,
        tid: gettid(),
        start_ns,
        end_ns,
        ops: 1,
    });
}

fn sigusr1_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset fill a set we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        set
    }
}

/// Installs `handler` for SIGUSR1 (no SA_RESTART, no SA_NODEFER: the handler runs with
/// SIGUSR1 blocked, as a plain `signal()` handler does).
fn on_sigusr1(handler: extern "C" fn(libc::c_int)) -> io::Result<()> {
    // SAFETY: a zeroed sigaction with a handler of the right type.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = handler as usize;
        ok(
            libc::sigaction(libc::SIGUSR1, &act, std::ptr::null_mut()) as i64,
            "sigaction",
        )
        .map(drop)
    }
}

fn set_mask(how: libc::c_int, set: &libc::sigset_t) -> io::Result<()> {
    // SAFETY: a valid set; rt_sigprocmask through glibc.
    ok(
        unsafe { libc::sigprocmask(how, set, std::ptr::null_mut()) } as i64,
        "sigprocmask",
    )
    .map(drop)
}

extern "C" fn empty_handler(_: libc::c_int) {}

/// `kill` as seed 002 measures it: SIGUSR1 from the parent to a forked child that has a
/// handler and sleeps for it (sigsuspend). The parent, pinned to CPU 0, sends only when the
/// child sleeps on CPU 1 (its /proc stat says S, read outside the windows), so every kill is
/// the full send: kill_pid_info, group_send_sig_info, the sigqueue, complete_signal and the
/// remote wake-up (try_to_wake_up of a task on another CPU, as for a child the scheduler put
/// on another core). With CPU 1 busy (the recording host's other work) the wake-up enqueues
/// the child on CPU 1's runqueue from CPU 0 and sends it a reschedule IPI; an idle CPU 1
/// would instead get the wake-up queued to it (ttwu_queue_wakelist) and do the enqueue
/// itself. The parent's window is the kill call alone; it then spins in user mode
/// until the child's acknowledgement (a shared counter), which gives no kernel sample. Each
/// window holds one clock read (20 ns p10 back to back on the recording host). The
/// child's side (waking, delivery, sigreturn) is not kept here: the child's samples would mix
/// the wake-up from sleep with the delivery; `deliver_and_return` times the delivery alone.
fn kill_sleeping_child(d: &mut Driver) -> io::Result<()> {
    pin_to_cpu(0)?;
    on_sigusr1(empty_handler)?;
    // The child's acknowledgement counter.
    let acks = crate::shared::SharedWord::new()?;
    let usr1 = sigusr1_set();
    // SIGUSR1 stays blocked outside sigsuspend: it can only arrive while the child sleeps.
    set_mask(libc::SIG_BLOCK, &usr1)?;
    // SAFETY: the child calls only async-signal-safe functions and atomics, then is killed.
    let child = ok(unsafe { libc::fork() } as i64, "fork")? as i32;
    if child == 0 {
        let _ = pin_to_cpu(1);
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            loop {
                libc::sigsuspend(&set);
                acks.fetch_add(1, Ordering::Release);
            }
        }
    }
    let stat = CString::new(format!("/proc/{child}/stat")).unwrap();
    let result = (|| {
        let fd = super::open(&stat, libc::O_RDONLY)?;
        let mut buf = [0u8; 512];
        let sleeping = |buf: &mut [u8]| -> io::Result<bool> {
            // SAFETY: reading our child's stat file into our buffer.
            let n = ok(
                unsafe { libc::pread(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) }
                    as i64,
                "read /proc/PID/stat",
            )? as usize;
            // The state follows the command name's closing parenthesis.
            let after = buf[..n].iter().rposition(|&b| b == b')').map(|i| i + 2);
            match after.and_then(|i| buf.get(i)) {
                Some(b'Z' | b'X') => Err(io::Error::other("the signalled child exited")),
                state => Ok(state == Some(&b'S')),
            }
        };
        for sent in 0..d.n(400_000) {
            while !sleeping(&mut buf)? {
                std::thread::yield_now();
            }
            once(d, "kill", || {
                // SAFETY: signalling our own child.
                ok(unsafe { libc::kill(child, libc::SIGUSR1) } as i64, "kill").map(drop)
            })?;
            let sent_ns = now_ns();
            while acks.load(Ordering::Acquire) <= sent {
                std::hint::spin_loop();
                if now_ns() - sent_ns > 5_000_000_000 {
                    return Err(io::Error::other(
                        "the child did not handle SIGUSR1 within 5 s",
                    ));
                }
            }
        }
        super::close(fd)
    })();
    // SAFETY: ending and reaping our own child (the shared page is unmapped as acks drops).
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
    set_mask(libc::SIG_UNBLOCK, &usr1)?;
    unpin()?;
    result
}

/// Handler entry and exit times of the timed handler (the driver is one thread).
static HANDLER_IN_NS: AtomicU64 = AtomicU64::new(0);
static HANDLER_OUT_NS: AtomicU64 = AtomicU64::new(0);
/// With window markers: the markers, and the rt_sigreturn window the handler's last
/// instruction opens.
static HANDLER_MARKERS: OnceLock<Markers> = OnceLock::new();
static SIGRETURN_WINDOW: AtomicUsize = AtomicUsize::new(0);

extern "C" fn timed_handler(_: libc::c_int) {
    HANDLER_IN_NS.store(now_ns(), Ordering::Relaxed);
    HANDLER_OUT_NS.store(now_ns(), Ordering::Relaxed);
    if let Some(m) = HANDLER_MARKERS.get() {
        m.start(SIGRETURN_WINDOW.load(Ordering::Relaxed));
    }
}

/// The receiver's side in one task, timed: SIGUSR1 is sent to itself while blocked (queued,
/// not delivered, outside the windows), then unblocked with rt_sigprocmask, whose return to
/// user mode delivers it: `signal-deliver` is that return (arch_do_signal_or_restart,
/// get_signal, the frame set up on the user stack) up to the handler's first instruction.
/// Delivery is the same code whoever sent the signal; what a sleeping receiver adds (its
/// wake-up and switch in) is the context-switch path's. The recorder keeps only the samples
/// under arch_do_signal_or_restart (record::excluded), so the unblocking syscall's own text is
/// left out, but its time is in the window: the latency is rt_sigprocmask's entry, exit and
/// mask change (rt_sigprocmask's own path, about 140 ns p10 on the recording host) plus the
/// delivery. `rt_sigreturn` is the handler's return (glibc's restorer) up to the
/// interrupted code: a syscall of its own, timed from the handler's last instruction.
/// Under an emulator the same two windows are marked (marker.rs): `signal-deliver` from
/// before the unblocking call to the handler's end (so its data lines include
/// rt_sigprocmask's own), `rt_sigreturn` from there to the return.
fn deliver_and_return(d: &mut Driver) -> io::Result<()> {
    if let Some(m) = d.markers {
        let _ = HANDLER_MARKERS.set(m);
    }
    on_sigusr1(timed_handler)?;
    let usr1 = sigusr1_set();
    // SAFETY: getpid has no arguments.
    let me = unsafe { libc::getpid() };
    for _ in 0..d.n(1_000_000) {
        set_mask(libc::SIG_BLOCK, &usr1)?;
        // SAFETY: signalling ourselves; SIGUSR1 is blocked and has a handler.
        ok(unsafe { libc::kill(me, libc::SIGUSR1) } as i64, "kill")?;
        if let Some(m) = d.markers {
            SIGRETURN_WINDOW.store(d.windows.len() + 1, Ordering::Relaxed);
            m.start(d.windows.len());
        }
        let start = now_ns();
        set_mask(libc::SIG_UNBLOCK, &usr1)?;
        let end = now_ns();
        if let Some(m) = d.markers {
            m.end();
        }
        push_window(
            d,
            "signal-deliver",
            start,
            HANDLER_IN_NS.load(Ordering::Relaxed),
        );
        push_window(
            d,
            "rt_sigreturn",
            HANDLER_OUT_NS.load(Ordering::Relaxed),
            end,
        );
    }
    // SAFETY: restoring the default action.
    unsafe { libc::signal(libc::SIGUSR1, libc::SIG_DFL) };
    Ok(())
}

/// Signals: the sender's kill of a sleeping process, then the receiver's delivery and
/// sigreturn.
pub(super) fn signals(d: &mut Driver) -> io::Result<()> {
    kill_sleeping_child(d)?;
    deliver_and_return(d)
}

/// Seed 002's mount: procfs mounted on a directory in /tmp (the driver's own), then
/// unmounted, each in its own window. The unmount's teardown (cleanup_mnt, the superblock's
/// deactivation) runs as task work on its return to user mode and it waits for an expedited
/// RCU grace period: `umount` keeps its return-to-user work and its sleep (record::excluded).
pub(super) fn mount_proc(d: &mut Driver) -> io::Result<()> {
    let dir = d.dir.join("proc-mount");
    std::fs::create_dir_all(&dir)?;
    let target = CString::new(dir.to_string_lossy().into_owned()).unwrap();
    let proc_ = CString::new("proc").unwrap();
    for _ in 0..d.n(20_000) {
        once(d, "mount-proc", || {
            // SAFETY: NUL-terminated strings; no data argument.
            ok(
                unsafe {
                    libc::mount(
                        proc_.as_ptr(),
                        target.as_ptr(),
                        proc_.as_ptr(),
                        0,
                        std::ptr::null(),
                    )
                } as i64,
                "mount proc",
            )
            .map(drop)
        })?;
        once(d, "umount", || {
            // SAFETY: unmounting what we mounted.
            ok(
                unsafe { libc::umount2(target.as_ptr(), 0) } as i64,
                "umount",
            )
            .map(drop)
        })?;
    }
    Ok(())
}

/// Seed 002's mmap/lock: one anonymous read-write page with MAP_LOCKED, which mmap populates
/// itself (__mm_populate, populate_vma_page_range, the fault path, a zeroed page, the mlock
/// accounting); the munmap runs outside the window (it is the `munmap` path's, plus the
/// munlock of the page). One page per iteration, mapped and unmapped, as the seed's loop.
/// The per-CPU mlock batch holds the last reference to the pages earlier munmaps unlocked,
/// so when an mmap's mlock_new_folio fills the batch, its drain (mlock_folio_batch ->
/// folios_put) frees them and uncharges their memcg inside this mmap: that is in the path,
/// as it is in the seed's loop.
pub(super) fn mmap_locked(d: &mut Driver) -> io::Result<()> {
    for _ in 0..d.n(400_000) {
        let mut page = std::ptr::null_mut();
        once(d, "mmap-locked", || {
            // SAFETY: a fresh mapping chosen by the kernel.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    4096,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_LOCKED,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(io::Error::other(format!(
                    "mmap MAP_LOCKED: {}",
                    io::Error::last_os_error()
                )));
            }
            page = p as *mut u8;
            Ok(())
        })?;
        unmap(page, 1)?;
    }
    Ok(())
}
