//! Runs of a command without perf: bounded in time (its process group is killed past the
//! bound), at a chosen priority, and in a cgroup of its own whose pressure stall
//! information says how long it waited for a CPU (kernel/sched/psi.c, cpu.pressure's
//! "some" total: time at least one of its tasks was runnable but not running). On a shared
//! host that wait is other tenants' doing, which a model of an idle machine leaves out.

use crate::format::UntracedRun;
use kharden::{Error, Result};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

/// How a bounded run ended.
pub enum Bounded {
    /// Its time, rusage and CPU wait, and its exit status.
    Finished(UntracedRun, ExitStatus),
    /// It ran past the bound: it and its process group were killed.
    TimedOut,
}

/// How to run it.
#[derive(Debug, Default)]
pub struct RunOptions {
    /// Its output goes to /dev/null (else to ours).
    pub quiet: bool,
    /// Scheduling priority (None: ours).
    pub nice: Option<i32>,
    pub bound: Option<Duration>,
    /// Run it in a cgroup of its own and measure its wait for a CPU.
    pub measure_wait: bool,
}

/// Runs `cmd` (and what it starts) at scheduling priority `nice` when given: validate runs the
/// command at -20 so that other tenants' work (at nice 0 and above) keeps it waiting for a
/// CPU as little as it can.
pub fn with_nice(cmd: &mut Command, nice: Option<i32>) {
    use std::os::unix::process::CommandExt;
    if let Some(n) = nice {
        // SAFETY: setpriority is async-signal-safe; failure (not root) leaves the priority.
        unsafe {
            cmd.pre_exec(move || {
                libc::setpriority(libc::PRIO_PROCESS, 0, n);
                Ok(())
            });
        }
    }
}

/// Where the cgroup v2 hierarchy is mounted.
pub fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
    })
}

/// A cgroup v2 group for one run, removed when dropped.
struct RunGroup {
    dir: PathBuf,
}

impl RunGroup {
    fn new() -> Option<RunGroup> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = cgroup2_mount()?.join(format!("kharden-run-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        crate::scratch::remove_on_signal_dir(&dir);
        Some(RunGroup { dir })
    }

    /// cpu.pressure's "some" total, in ns.
    fn cpu_wait_ns(&self) -> Option<u64> {
        let text = std::fs::read_to_string(self.dir.join("cpu.pressure")).ok()?;
        let some = text.lines().find(|l| l.starts_with("some"))?;
        let total = some
            .split_whitespace()
            .find_map(|f| f.strip_prefix("total="))?;
        total.parse::<u64>().ok().map(|us| us * 1000)
    }
}

impl Drop for RunGroup {
    fn drop(&mut self) {
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        crate::scratch::forget(&self.dir);
    }
}

/// One run of `command` without perf, in a process group of its own that is killed if it
/// runs past the bound.
pub fn run_bounded(command: &[String], opts: &RunOptions) -> Result<Bounded> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::sync::atomic::{AtomicBool, Ordering};
    let group = if opts.measure_wait {
        RunGroup::new()
    } else {
        None
    };
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..]).process_group(0);
    if opts.quiet {
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
    }
    with_nice(&mut cmd, opts.nice);
    if let Some(g) = &group {
        let procs = std::ffi::CString::new(g.dir.join("cgroup.procs").as_os_str().as_bytes())
            .map_err(|_| Error::new("cgroup path holds a NUL byte"))?;
        // SAFETY: open, write and close are async-signal-safe; the child joins the group
        // before it execs the command.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                if fd >= 0 {
                    libc::write(fd, b"0".as_ptr() as *const libc::c_void, 1);
                    libc::close(fd);
                }
                Ok(())
            });
        }
    }
    let start = std::time::Instant::now();
    let child = cmd
        .spawn()
        .map_err(|e| Error::new(format!("cannot run '{}': {e}", command[0])))?;
    let pid = child.id() as libc::pid_t;
    let killed = std::sync::Arc::new(AtomicBool::new(false));
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let watchdog = opts.bound.map(|b| {
        let killed = killed.clone();
        std::thread::spawn(move || {
            if finished.recv_timeout(b).is_err() {
                killed.store(true, Ordering::SeqCst);
                // SAFETY: the command's own process group, made for it above.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
            }
        })
    });
    let mut status = 0;
    // SAFETY: waiting for our own child, with a zeroed rusage for the kernel to fill.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    let elapsed = start.elapsed();
    let _ = done.send(());
    if let Some(w) = watchdog {
        let _ = w.join();
    }
    if r != pid {
        return Err(Error::new(format!(
            "waiting for '{}': {}",
            command[0],
            std::io::Error::last_os_error()
        )));
    }
    if killed.load(Ordering::SeqCst) {
        return Ok(Bounded::TimedOut);
    }
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    Ok(Bounded::Finished(
        UntracedRun {
            elapsed_ns: elapsed.as_nanos() as u64,
            user_ns: ns(ru.ru_utime),
            system_ns: ns(ru.ru_stime),
            cpu_wait_ns: group.as_ref().and_then(|g| g.cpu_wait_ns()),
        },
        ExitStatus::from_raw(status),
    ))
}
