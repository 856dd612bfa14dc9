//! The driver: scenarios that run kernel paths in tight loops on the host, each loop inside a
//! window that says which path the kernel is in. `kharden kernel drive SCENARIO` runs one; the
//! recorder runs it under `perf record`, the latency measurement runs it bare.

use crate::marker::{Ticker, NO_TICKS};
use crate::window::{gettid, now_ns, Window};
use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};

mod seed002;
mod variants;

/// Runs loops and keeps their windows.
pub struct Driver {
    pub windows: Vec<Window>,
    repeat: u32,
    /// Loop counts are multiplied by this (1.0: about a second of work per path).
    scale: f64,
    dir: PathBuf,
    /// Window markers for an emulator plugin (KHARDEN_WINDOW_MARKERS), normally None.
    markers: Option<crate::marker::Markers>,
}

pub struct Scenario {
    pub name: &'static str,
    /// The paths its windows name, own and others.
    pub paths: &'static [&'static str],
    run: fn(&mut Driver) -> io::Result<()>,
}

/// Scenarios recorded system-wide (`perf record -a`, samples kept for the driver's command
/// name): a task's own perf events close in do_exit() before exit_mm() (perf_event_exit_task
/// comes first, Linux 6.1 to 6.18), so a per-task recording of a child's exit stops there and
/// misses the address space's teardown, exit_files and exit_notify.
const SYSTEM_WIDE: &[&str] = &["process"];

impl Scenario {
    pub fn system_wide(&self) -> bool {
        SYSTEM_WIDE.contains(&self.name)
    }
}

pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "syscalls",
        paths: &[
            "syscall-entry-exit",
            "getppid",
            "getpid",
            "lseek",
            "read-1",
            "read-8k",
            "write-1",
            "getrusage",
            "open-close",
        ],
        run: model_syscalls,
    },
    Scenario {
        name: "mmap",
        paths: &["mmap", "munmap", "mprotect"],
        run: mmap_paths,
    },
    Scenario {
        name: "files",
        paths: &[
            "openat",
            "close",
            "read-4k-file",
            "pread64-4k",
            "pwrite64-4k",
            "write-4k-file",
            "newfstatat",
            "access",
            "readlink",
        ],
        run: file_paths,
    },
    Scenario {
        name: "small",
        paths: &[
            "rt_sigaction",
            "rt_sigprocmask",
            "brk",
            "getcwd",
            "fcntl",
            "set_robust_list",
            "futex",
        ],
        run: small_syscalls,
    },
    Scenario {
        name: "faults",
        paths: &["fault-anon", "fault-file", "fault-cow"],
        run: faults,
    },
    Scenario {
        name: "process",
        paths: &["fork", "wait4", "exit"],
        run: process,
    },
    Scenario {
        name: "execve",
        paths: &["execve"],
        run: execve,
    },
    Scenario {
        name: "switch",
        paths: &["context-switch"],
        run: context_switch,
    },
    Scenario {
        name: "ptrace",
        paths: &["ptrace-singlestep", "ptrace-stop"],
        run: ptrace_singlestep,
    },
    Scenario {
        name: "ipi",
        paths: &[
            "mprotect-shootdown",
            "ipi-tlb-flush",
            "membarrier",
            "ipi-membarrier",
        ],
        run: ipis,
    },
    Scenario {
        name: "tick",
        paths: &["timer-tick"],
        run: tick,
    },
    Scenario {
        name: "signals",
        paths: &["kill", "signal-deliver", "rt_sigreturn"],
        run: seed002::signals,
    },
    Scenario {
        name: "mount",
        paths: &["mount-proc", "umount"],
        run: seed002::mount_proc,
    },
    Scenario {
        name: "mmap-locked",
        paths: &["mmap-locked"],
        run: seed002::mmap_locked,
    },
    Scenario {
        name: "variants",
        paths: &[
            "write-pipe-4k",
            "read-pipe-4k",
            "read-4k-tmpfs",
            "write-4k-tmpfs",
            "openat-1",
            "newfstatat-1",
            "openat-enoent",
            "getdents64-small",
            "getdents64-large",
        ],
        run: variants::variants,
    },
];

pub fn scenario(name: &str) -> kharden::Result<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name).ok_or_else(|| {
        let names: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
        kharden::Error::new(format!(
            "unknown scenario '{name}': expected one of {}",
            names.join(", ")
        ))
    })
}

/// Runs `scenario` `repeats` times in this process and writes its windows to `out`.
pub fn drive(scenario: &Scenario, scale: f64, repeats: u32, out: &Path) -> kharden::Result<()> {
    let dir = std::env::temp_dir().join(format!("kharden-footprint-{}", std::process::id()));
    let fail = |e: io::Error| kharden::Error::new(format!("scenario {}: {e}", scenario.name));
    std::fs::create_dir_all(&dir).map_err(fail)?;
    let mut d = Driver {
        windows: Vec::new(),
        repeat: 0,
        scale,
        dir: dir.clone(),
        markers: crate::marker::Markers::from_env().map_err(fail)?,
    };
    let mut result = Ok(());
    for r in 0..repeats {
        d.repeat = r;
        result = (scenario.run)(&mut d);
        if result.is_err() {
            break;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    result.map_err(fail)?;
    crate::window::write_all(out, &d.windows)
        .map_err(|e| kharden::Error::at(out.display(), format!("cannot write windows: {e}")))
}

impl Driver {
    /// Marks each operation of a window's loop for an emulator plugin (marker.rs).
    fn ticker(&self) -> Ticker {
        Ticker(self.markers)
    }

    fn n(&self, base: u64) -> u64 {
        ((base as f64 * self.scale) as u64).max(1)
    }

    /// Runs `f` (which returns its operation count) in a window of `own`, with every other
    /// thread of the driver counted as `others`.
    fn window(
        &mut self,
        own: Option<&str>,
        others: Option<&str>,
        f: impl FnOnce() -> io::Result<u64>,
    ) -> io::Result<()> {
        if let Some(m) = &self.markers {
            m.start(self.windows.len());
        }
        let start_ns = now_ns();
        let ops = f()?;
        let end_ns = now_ns();
        if let Some(m) = &self.markers {
            m.end();
        }
        self.windows.push(Window {
            repeat: self.repeat,
            own: own.map(str::to_string),
            others: others.map(str::to_string),
            tid: gettid(),
            start_ns,
            end_ns,
            ops,
        });
        Ok(())
    }

    /// `n` calls of `f`, in windows of `path` of at most `CHUNK` calls: short windows let
    /// the latency's low percentile find stretches the host's other work left alone.
    fn repeat(
        &mut self,
        path: &str,
        base: u64,
        f: impl FnMut() -> io::Result<()>,
    ) -> io::Result<()> {
        self.repeat_ops(path, base, 1, f)
    }

    /// As `repeat`, each call doing `ops` operations of the path.
    fn repeat_ops(
        &mut self,
        path: &str,
        base: u64,
        ops: u64,
        f: impl FnMut() -> io::Result<()>,
    ) -> io::Result<()> {
        self.repeat_in(path, None, base, ops, f)
    }

    /// As `repeat_ops`, with the driver's other threads and children counted as `others`.
    fn repeat_in(
        &mut self,
        path: &str,
        others: Option<&str>,
        base: u64,
        ops: u64,
        mut f: impl FnMut() -> io::Result<()>,
    ) -> io::Result<()> {
        const CHUNK: u64 = 1000;
        let mut left = self.n(base);
        let tick = self.ticker();
        while left > 0 {
            let n = left.min(CHUNK);
            left -= n;
            self.window(Some(path), others, || {
                for _ in 0..n {
                    tick.op();
                    f()?;
                }
                Ok(n * ops)
            })?;
        }
        Ok(())
    }

    fn file(&self, name: &str, bytes: usize) -> io::Result<CString> {
        let path = self.dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, vec![0x5a_u8; bytes])?;
        Ok(CString::new(path.to_string_lossy().into_owned()).unwrap())
    }
}

/// A libc return value: negative is the errno.
fn ok(ret: i64, what: &str) -> io::Result<i64> {
    if ret < 0 {
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("{what}: {e}")))
    } else {
        Ok(ret)
    }
}

fn open(path: &CString, flags: i32) -> io::Result<i32> {
    // SAFETY: path is NUL-terminated.
    ok(
        unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC, 0o644) } as i64,
        "open",
    )
    .map(|fd| fd as i32)
}

fn close(fd: i32) -> io::Result<()> {
    // SAFETY: closing a descriptor this driver opened.
    ok(unsafe { libc::close(fd) } as i64, "close").map(drop)
}

fn minor_faults() -> u64 {
    // SAFETY: ru is a valid rusage to fill.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    ru.ru_minflt as u64
}

fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET stays within it for cpu < 1024.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        ok(
            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) as i64,
            "sched_setaffinity",
        )
        .map(drop)
    }
}

fn unpin() -> io::Result<()> {
    // SAFETY: as pin_to_cpu, every CPU the kernel may have.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for c in 0..libc::CPU_SETSIZE as usize {
            libc::CPU_SET(c, &mut set);
        }
        ok(
            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) as i64,
            "sched_setaffinity",
        )
        .map(drop)
    }
}

/// Anonymous private memory of `pages` pages, or the file `fd` mapped read-only.
fn map(pages: usize, prot: i32, fd: Option<i32>) -> io::Result<*mut u8> {
    let flags = if fd.is_some() {
        libc::MAP_PRIVATE
    } else {
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS
    };
    // SAFETY: a fresh mapping chosen by the kernel.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            pages * 4096,
            prot,
            flags,
            fd.unwrap_or(-1),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::other(format!(
            "mmap: {}",
            io::Error::last_os_error()
        )));
    }
    Ok(p as *mut u8)
}

fn unmap(p: *mut u8, pages: usize) -> io::Result<()> {
    // SAFETY: p was mapped by `map` with this many pages.
    ok(
        unsafe { libc::munmap(p as *mut libc::c_void, pages * 4096) } as i64,
        "munmap",
    )
    .map(drop)
}

fn mprotect(p: *mut u8, prot: i32) -> io::Result<()> {
    // SAFETY: p is one page this driver mapped.
    ok(
        unsafe { libc::mprotect(p as *mut libc::c_void, 4096, prot) } as i64,
        "mprotect",
    )
    .map(drop)
}

/// Flips `page` between read-only and read-write.
fn toggle_protection(page: *mut u8, ro: &mut bool) -> io::Result<()> {
    *ro = !*ro;
    let prot = if *ro {
        libc::PROT_READ
    } else {
        libc::PROT_READ | libc::PROT_WRITE
    };
    mprotect(page, prot)
}

/// The syscall table of crates/kharden/src/kernel/paths/syscall.rs, plus the bare entry and exit
/// (a syscall number beyond the table: do_syscall_64 returns -ENOSYS).
fn model_syscalls(d: &mut Driver) -> io::Result<()> {
    // SAFETY (whole function): plain syscalls on descriptors and buffers owned here.
    d.repeat("syscall-entry-exit", 3_000_000, || {
        unsafe { libc::syscall(1000) };
        Ok(())
    })?;
    d.repeat("getppid", 3_000_000, || {
        unsafe { libc::getppid() };
        Ok(())
    })?;
    d.repeat("getpid", 3_000_000, || {
        unsafe { libc::syscall(libc::SYS_getpid) };
        Ok(())
    })?;
    let zero = open(&CString::new("/dev/zero").unwrap(), libc::O_RDWR)?;
    let null = open(&CString::new("/dev/null").unwrap(), libc::O_WRONLY)?;
    let mut buf = vec![0u8; 8192];
    let b = buf.as_mut_ptr() as *mut libc::c_void;
    d.repeat("lseek", 2_000_000, || {
        ok(unsafe { libc::lseek(zero, 0, libc::SEEK_SET) }, "lseek").map(drop)
    })?;
    d.repeat("read-1", 2_000_000, || {
        ok(unsafe { libc::read(zero, b, 1) } as i64, "read").map(drop)
    })?;
    d.repeat("read-8k", 500_000, || {
        ok(unsafe { libc::read(zero, b, 8192) } as i64, "read").map(drop)
    })?;
    d.repeat("write-1", 2_000_000, || {
        ok(unsafe { libc::write(null, b, 1) } as i64, "write").map(drop)
    })?;
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    d.repeat("getrusage", 1_000_000, || {
        ok(
            unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } as i64,
            "getrusage",
        )
        .map(drop)
    })?;
    let dev_zero = CString::new("/dev/zero").unwrap();
    d.repeat("open-close", 300_000, || {
        close(open(&dev_zero, libc::O_RDONLY)?)
    })?;
    close(zero)?;
    close(null)
}

/// mmap and munmap of one anonymous page, in batches so each call is its own window's only
/// kind; protections alternate so neighbouring mappings do not merge into one VMA. Then
/// mprotect of one touched page, alternating read-only and read-write.
fn mmap_paths(d: &mut Driver) -> io::Result<()> {
    const BATCH: usize = 1000;
    let mut maps = Vec::with_capacity(BATCH);
    let tick = d.ticker();
    for _ in 0..d.n(200) {
        maps.clear();
        d.window(Some("mmap"), None, || {
            for i in 0..BATCH {
                tick.op();
                let prot = if i % 2 == 0 {
                    libc::PROT_READ
                } else {
                    libc::PROT_READ | libc::PROT_WRITE
                };
                maps.push(map(1, prot, None)?);
            }
            Ok(BATCH as u64)
        })?;
        d.window(Some("munmap"), None, || {
            for &p in &maps {
                tick.op();
                unmap(p, 1)?;
            }
            Ok(BATCH as u64)
        })?;
    }
    let page = map(1, libc::PROT_READ | libc::PROT_WRITE, None)?;
    // SAFETY: page is a writable page of ours; the write makes it present.
    unsafe { page.write_volatile(1) };
    let mut ro = false;
    d.repeat("mprotect", 500_000, || toggle_protection(page, &mut ro))?;
    unmap(page, 1)
}

/// The file syscalls of the compile job's mix (workloads/kbuild.toml): a header four
/// directories deep in an ext4 tree, reads and writes of its page-cache pages.
fn file_paths(d: &mut Driver) -> io::Result<()> {
    const FILE_PAGES: usize = 256;
    let header = d.file("include/linux/sub/header.h", 4096)?;
    let data = d.file("data.bin", FILE_PAGES * 4096)?;
    let link = CString::new(d.dir.join("link").to_string_lossy().into_owned()).unwrap();
    // SAFETY (whole function): syscalls on paths, descriptors and buffers owned here.
    // A repeat finds the previous repeat's link.
    let _ = std::fs::remove_file(d.dir.join("link"));
    ok(
        unsafe { libc::symlink(header.as_ptr(), link.as_ptr()) } as i64,
        "symlink",
    )?;
    const BATCH: usize = 500;
    let mut fds = Vec::with_capacity(BATCH);
    let tick = d.ticker();
    for _ in 0..d.n(600) {
        fds.clear();
        d.window(Some("openat"), None, || {
            for _ in 0..BATCH {
                tick.op();
                fds.push(open(&header, libc::O_RDONLY)?);
            }
            Ok(BATCH as u64)
        })?;
        d.window(Some("close"), None, || {
            for &fd in &fds {
                tick.op();
                close(fd)?;
            }
            Ok(BATCH as u64)
        })?;
    }
    let fd = open(&data, libc::O_RDWR)?;
    let mut buf = vec![0u8; 4096];
    let b = buf.as_mut_ptr() as *mut libc::c_void;
    // read() and write() move the file offset: one window per pass over the file, the
    // rewind outside it.
    for (path, write) in [("read-4k-file", false), ("write-4k-file", true)] {
        for _ in 0..d.n(2000) {
            ok(unsafe { libc::lseek(fd, 0, libc::SEEK_SET) }, "lseek")?;
            d.window(Some(path), None, || {
                for _ in 0..FILE_PAGES {
                    tick.op();
                    let n = unsafe {
                        if write {
                            libc::write(fd, b, 4096)
                        } else {
                            libc::read(fd, b, 4096)
                        }
                    };
                    ok(n as i64, path)?;
                }
                Ok(FILE_PAGES as u64)
            })?;
        }
    }
    let mut off = 0;
    d.repeat("pread64-4k", 500_000, || {
        off = (off + 4096) % (FILE_PAGES as i64 * 4096);
        ok(unsafe { libc::pread(fd, b, 4096, off) } as i64, "pread64").map(drop)
    })?;
    d.repeat("pwrite64-4k", 500_000, || {
        off = (off + 4096) % (FILE_PAGES as i64 * 4096);
        ok(unsafe { libc::pwrite(fd, b, 4096, off) } as i64, "pwrite64").map(drop)
    })?;
    close(fd)?;
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    d.repeat("newfstatat", 1_000_000, || {
        ok(
            unsafe { libc::fstatat(libc::AT_FDCWD, header.as_ptr(), &mut st, 0) } as i64,
            "newfstatat",
        )
        .map(drop)
    })?;
    d.repeat("access", 1_000_000, || {
        ok(
            unsafe { libc::access(header.as_ptr(), libc::R_OK) } as i64,
            "access",
        )
        .map(drop)
    })?;
    let mut target = [0 as libc::c_char; 512];
    d.repeat("readlink", 1_000_000, || {
        ok(
            unsafe { libc::readlink(link.as_ptr(), target.as_mut_ptr(), target.len()) } as i64,
            "readlink",
        )
        .map(drop)
    })
}

/// The small syscalls of the compile and link jobs' mixes: signal setup, brk, getcwd, fcntl,
/// set_robust_list and an uncontended futex wake.
fn small_syscalls(d: &mut Driver) -> io::Result<()> {
    // SAFETY (whole function): syscalls on structures owned here; SIGUSR1 is only ignored.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = libc::SIG_IGN;
    d.repeat("rt_sigaction", 2_000_000, || {
        ok(
            unsafe { libc::sigaction(libc::SIGUSR1, &act, std::ptr::null_mut()) } as i64,
            "rt_sigaction",
        )
        .map(drop)
    })?;
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe { libc::sigemptyset(&mut set) };
    d.repeat("rt_sigprocmask", 2_000_000, || {
        ok(
            unsafe {
                libc::syscall(
                    libc::SYS_rt_sigprocmask,
                    libc::SIG_BLOCK,
                    &set,
                    0usize,
                    8usize,
                )
            },
            "rt_sigprocmask",
        )
        .map(drop)
    })?;
    // brk as malloc uses it: ask for the break, move it up one page and back down (the page
    // is never touched, so no fault). The break is asked for every time because malloc
    // itself may move it between windows.
    d.repeat_ops("brk", 350_000, 3, || {
        unsafe {
            let base = libc::syscall(libc::SYS_brk, 0usize);
            libc::syscall(libc::SYS_brk, base + 4096);
            libc::syscall(libc::SYS_brk, base);
        }
        Ok(())
    })?;
    let mut cwd = [0 as libc::c_char; 4096];
    d.repeat("getcwd", 2_000_000, || {
        ok(
            unsafe { libc::syscall(libc::SYS_getcwd, cwd.as_mut_ptr(), cwd.len()) },
            "getcwd",
        )
        .map(drop)
    })?;
    d.repeat("fcntl", 2_000_000, || {
        ok(unsafe { libc::fcntl(0, libc::F_GETFD) } as i64, "fcntl").map(drop)
    })?;
    let mut head: usize = 0;
    let mut len: usize = 0;
    ok(
        unsafe { libc::syscall(libc::SYS_get_robust_list, 0, &mut head, &mut len) },
        "get_robust_list",
    )?;
    d.repeat("set_robust_list", 2_000_000, || {
        ok(
            unsafe { libc::syscall(libc::SYS_set_robust_list, head, len) },
            "set_robust_list",
        )
        .map(drop)
    })?;
    let word: u32 = 0;
    d.repeat("futex", 2_000_000, || {
        ok(
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    &word,
                    libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                    1,
                    0usize,
                )
            },
            "futex",
        )
        .map(drop)
    })
}

/// Touches every page of `pages` at `p`, writing or reading; returns the minor faults taken.
/// `tick` marks each touch as an operation (where every touch faults; `NO_TICKS` elsewhere).
fn touch_all(p: *mut u8, pages: usize, write: bool, tick: Ticker) -> io::Result<u64> {
    let before = minor_faults();
    for i in 0..pages {
        tick.op();
        // SAFETY: i < pages of a mapping of ours.
        unsafe {
            let a = p.add(i * 4096);
            if write {
                a.write_volatile(1);
            } else {
                a.read_volatile();
            }
        }
    }
    Ok(minor_faults() - before)
}

/// Page faults: anonymous (zero-filled page), file (page-cache page, with the kernel's
/// fault-around mapping up to 16 pages per fault), copy-on-write after fork.
fn faults(d: &mut Driver) -> io::Result<()> {
    const PAGES: usize = 4096;
    let tick = d.ticker();
    for _ in 0..d.n(30) {
        let p = map(PAGES, libc::PROT_READ | libc::PROT_WRITE, None)?;
        d.window(Some("fault-anon"), None, || touch_all(p, PAGES, true, tick))?;
        unmap(p, PAGES)?;
    }
    let data = d.file("mapped.bin", PAGES * 4096)?;
    let fd = open(&data, libc::O_RDONLY)?;
    // Fault-around maps up to 16 pages per file fault: more rounds for as many faults.
    for _ in 0..d.n(400) {
        let p = map(PAGES, libc::PROT_READ, Some(fd))?;
        // Fault-around maps 16 pages a fault: most touches take none, so none is marked.
        d.window(Some("fault-file"), None, || {
            touch_all(p, PAGES, false, NO_TICKS)
        })?;
        unmap(p, PAGES)?;
    }
    close(fd)?;
    for _ in 0..d.n(20) {
        let p = map(PAGES, libc::PROT_READ | libc::PROT_WRITE, None)?;
        touch_all(p, PAGES, true, NO_TICKS)?;
        // A child that holds the pages (blocked on a pipe) until the parent has written them.
        let mut pipe = [0i32; 2];
        // SAFETY: pipe fills two descriptors; the child only reads and exits.
        ok(unsafe { libc::pipe(pipe.as_mut_ptr()) } as i64, "pipe")?;
        let child = ok(unsafe { libc::fork() } as i64, "fork")?;
        if child == 0 {
            let mut c = 0u8;
            unsafe {
                // Its copy of the write end closed, the parent's close is end of file.
                libc::close(pipe[1]);
                libc::read(pipe[0], &mut c as *mut u8 as *mut libc::c_void, 1);
                libc::_exit(0);
            }
        }
        d.window(Some("fault-cow"), None, || touch_all(p, PAGES, true, tick))?;
        close(pipe[1])?;
        close(pipe[0])?;
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(child as i32, std::ptr::null_mut(), 0) };
        unmap(p, PAGES)?;
    }
    Ok(())
}

/// fork of a batch of children that exit at once, then wait4 for each. The children's
/// samples (ret_from_fork, their first copy-on-write faults, exit_group and do_exit) are
/// the exit path; under an emulator each child marks its exit as one operation of it.
fn process(d: &mut Driver) -> io::Result<()> {
    const BATCH: usize = 32;
    let mut pids = Vec::with_capacity(BATCH);
    let tick = d.ticker();
    for _ in 0..d.n(300) {
        pids.clear();
        d.window(Some("fork"), Some("exit"), || {
            for _ in 0..BATCH {
                tick.op();
                // SAFETY: the child calls only _exit.
                let pid = unsafe { libc::fork() };
                if pid == 0 {
                    tick.others_op();
                    unsafe { libc::_exit(0) };
                }
                pids.push(ok(pid as i64, "fork")? as i32);
            }
            Ok(BATCH as u64)
        })?;
        d.window(Some("wait4"), Some("exit"), || {
            for &pid in &pids {
                tick.op();
                // SAFETY: reaping our own children.
                ok(
                    unsafe { libc::wait4(pid, std::ptr::null_mut(), 0, std::ptr::null_mut()) }
                        as i64,
                    "wait4",
                )?;
            }
            Ok(BATCH as u64)
        })?;
    }
    Ok(())
}

/// The cc flags exec_chain.c is built with (before `-o BIN SRC`); with window markers, its
/// .bss is linked at the marker region so that each image marks its own execve.
pub fn exec_chain_flags(markers: bool) -> Vec<String> {
    let mut flags: Vec<String> = [
        "-O2",
        "-static",
        "-nostdlib",
        "-no-pie",
        "-ffreestanding",
        "-fno-tree-loop-distribute-patterns",
        "-fno-stack-protector",
    ]
    .map(String::from)
    .to_vec();
    if markers {
        use crate::marker::{BASE, REGION_BYTES};
        flags.push(format!("-DMARKER_BYTES={REGION_BYTES}"));
        flags.push(format!("-Wl,-Tbss={BASE:#x}"));
    }
    flags
}

/// execve of a static program without libc that execs itself (src/exec_chain.c, built here
/// with the host's cc): the child runs nothing but execve and the new image's first faults.
fn execve(d: &mut Driver) -> io::Result<()> {
    let src = d.dir.join("exec_chain.c");
    let bin = d.dir.join("exec_chain");
    std::fs::write(&src, include_str!("exec_chain.c"))?;
    let status = std::process::Command::new("cc")
        .args(exec_chain_flags(d.markers.is_some()))
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .status()
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cc (needed to build the execve driver): {e}"),
            )
        })?;
    if !status.success() {
        return Err(io::Error::other("cc could not build exec_chain.c"));
    }
    let n = d.n(3000);
    let markers = d.markers;
    d.window(None, Some("execve"), || {
        let mut chain = std::process::Command::new(&bin);
        chain.arg(format!("{n:08}"));
        if let Some(m) = markers {
            chain.args(m.others_op_addresses().map(|a| a.to_string()));
        }
        let status = chain.status()?;
        if !status.success() {
            return Err(io::Error::other("exec_chain failed"));
        }
        Ok(n)
    })
}

/// Two processes on one CPU handing it to each other with sched_yield: each yield switches
/// address space (a process switch, not a thread switch).
fn context_switch(d: &mut Driver) -> io::Result<()> {
    pin_to_cpu(0)?;
    // Windows of 1000 of the parent's yields, each standing for 2000 switches (the child's
    // yields interleave), so the low percentile finds windows no other task ran in.
    const CHUNK: u64 = 1000;
    let chunks = d.n(500);
    // SAFETY: the child yields and exits; it inherits the pinning.
    let child = ok(unsafe { libc::fork() } as i64, "fork")?;
    if child == 0 {
        for _ in 0..chunks * CHUNK {
            unsafe { libc::sched_yield() };
        }
        unsafe { libc::_exit(0) };
    }
    let mut result = Ok(());
    for _ in 0..chunks {
        result = d.window(Some("context-switch"), Some("context-switch"), || {
            for _ in 0..CHUNK {
                unsafe { libc::sched_yield() };
            }
            Ok(2 * CHUNK)
        });
        if result.is_err() {
            break;
        }
    }
    unsafe { libc::waitpid(child as i32, std::ptr::null_mut(), 0) };
    unpin()?;
    result
}

/// rt-tests' ssdd on one CPU: a tracer single-steps a traced child that spins in user mode.
/// Each step is the tracer's ptrace(PTRACE_SINGLESTEP) and waitpid (it sleeps, the child
/// runs, the child's wake-up of the tracer, the switches back and forth: the tracer's path)
/// and the child's debug trap, SIGTRAP and ptrace_stop notifying the tracer with SIGCHLD
/// (the child's path).
fn ptrace_singlestep(d: &mut Driver) -> io::Result<()> {
    pin_to_cpu(0)?;
    // Under an emulator every instruction the child is stepped through marks one operation
    // of ptrace-stop: from it to the tracer's next operation, the child's trap and stop.
    let tick = d.ticker();
    // SAFETY: the child stops itself for its tracer and then spins until killed.
    let child = ok(unsafe { libc::fork() } as i64, "fork")? as i32;
    if child == 0 {
        unsafe {
            libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0);
            libc::raise(libc::SIGSTOP);
        }
        tick.stepped_others_ops();
    }
    let wait_stop = || -> io::Result<()> {
        let mut status = 0;
        // SAFETY: waiting for our own traced child.
        ok(
            unsafe { libc::waitpid(child, &mut status, 0) } as i64,
            "waitpid",
        )?;
        if libc::WIFSTOPPED(status) {
            Ok(())
        } else {
            Err(io::Error::other("traced child did not stop"))
        }
    };
    let mut result = wait_stop();
    if result.is_ok() {
        result = d.repeat_in("ptrace-singlestep", Some("ptrace-stop"), 200_000, 1, || {
            // SAFETY: single-stepping our own stopped, traced child.
            ok(
                unsafe { libc::ptrace(libc::PTRACE_SINGLESTEP, child, 0, 0) },
                "ptrace",
            )?;
            wait_stop()
        });
    }
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
    unpin()?;
    result
}

/// Call-function IPIs: a thread spins in user mode on CPU 1 while the main thread, on CPU 0,
/// changes a page's protection (a TLB shootdown to CPU 1) or issues an expedited membarrier.
/// The spinning thread's kernel samples are the IPI handler's (the part that runs with
/// interrupts enabled; the rest comes from the source list).
fn ipis(d: &mut Driver) -> io::Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    // Under an emulator the spinner marks an operation of the window's other path at every
    // turn, so each interrupt it takes is an operation of its own.
    let tick = d.ticker();
    let spinner = std::thread::spawn(move || {
        let pinned = pin_to_cpu(1);
        while !flag.load(Ordering::Relaxed) {
            tick.others_op();
            std::hint::spin_loop();
        }
        pinned
    });
    let run = |d: &mut Driver| -> io::Result<()> {
        pin_to_cpu(0)?;
        std::thread::sleep(std::time::Duration::from_millis(20));
        let page = map(1, libc::PROT_READ | libc::PROT_WRITE, None)?;
        // SAFETY: our page; making it present gives mprotect a PTE to change and flush.
        unsafe { page.write_volatile(1) };
        let mut ro = false;
        const CHUNK: u64 = 1000;
        for _ in 0..d.n(200) {
            d.window(Some("mprotect-shootdown"), Some("ipi-tlb-flush"), || {
                for _ in 0..CHUNK {
                    toggle_protection(page, &mut ro)?;
                    // Write so the next change has a present, dirty, TLB-cached entry to flush.
                    if !ro {
                        unsafe { page.write_volatile(1) };
                    }
                }
                Ok(CHUNK)
            })?;
        }
        unmap(page, 1)?;
        const REGISTER: i64 = 1 << 4; // MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED
        const EXPEDITED: i64 = 1 << 3; // MEMBARRIER_CMD_PRIVATE_EXPEDITED
                                       // SAFETY: membarrier takes no pointers.
        ok(
            unsafe { libc::syscall(libc::SYS_membarrier, REGISTER, 0, 0) },
            "membarrier register",
        )?;
        for _ in 0..d.n(200) {
            d.window(Some("membarrier"), Some("ipi-membarrier"), || {
                for _ in 0..CHUNK {
                    ok(
                        unsafe { libc::syscall(libc::SYS_membarrier, EXPEDITED, 0, 0) },
                        "membarrier",
                    )?;
                }
                Ok(CHUNK)
            })?;
        }
        Ok(())
    };
    let result = run(d);
    stop.store(true, Ordering::Relaxed);
    let pinned = spinner
        .join()
        .map_err(|_| io::Error::other("spinner panicked"))?;
    unpin()?;
    result.and(pinned)
}

/// The timer tick: the driver spins in user mode, so every kernel sample is an interrupt
/// (mostly the 250 Hz tick and its softirqs). Each gap of 0.5-50 us in the user-mode clock
/// reads is one interrupt; longer gaps (preemption by other tasks) are not counted.
fn tick(d: &mut Driver) -> io::Result<()> {
    let spin_ns = (24e9 * d.scale) as u64;
    let mut gaps = Vec::new();
    d.window(Some("timer-tick"), None, || {
        let start = now_ns();
        let mut last = start;
        while last - start < spin_ns {
            let t = now_ns();
            let gap = t - last;
            if (500..50_000).contains(&gap) {
                gaps.push((last, t));
            }
            last = t;
        }
        Ok(gaps.len() as u64)
    })?;
    // The latency of an interrupt is its gap: one window per gap (the spin window above,
    // which the recorder uses, holds them all; these carry only time and count).
    let repeat = d.repeat;
    let tid = gettid();
    d.windows.extend(gaps.into_iter().map(|(s, e)| Window {
        repeat,
        own: Some("timer-tick-gap".to_string()),
        others: None,
        tid,
        start_ns: s,
        end_ns: e,
        ops: 1,
    }));
    Ok(())
}
