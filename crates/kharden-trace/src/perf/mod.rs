//! Recording with `perf record -a` and converting perf.data into a kharden trace.
//!
//! perf.data is parsed with the `linux-perf-data` crate (records, attributes, header features);
//! tracepoint payloads are decoded with the field layouts perf stored in the file's
//! TRACING_DATA section (the kernel's tracefs `format` files), so a trace converts correctly
//! whatever the recording kernel's layout. Only the recorded command's process tree is kept.
//!
//! `convert.rs` drives a conversion; `tracepoint.rs` decodes payloads; `sched.rs`,
//! `syscalls.rs`, `kmem.rs`, `tlb.rs` and `fault.rs` turn each tracepoint family into events.

mod convert;
mod fault;
pub mod fds;
mod kmem;
mod prepass;
pub mod run;
pub mod sampled;
mod sched;
mod syscall_names;
mod syscalls;
mod tlb;
mod tracepoint;
pub mod watch;

pub use convert::{convert, Beside};
pub use run::{run_bounded, with_nice, Bounded, RunOptions};
pub use syscall_names::syscall_names;
pub use tracepoint::{EventFormat, Field};

use crate::scratch::{Output, Scratch};
use kharden::{Error, Result};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Tracepoints `record` always asks for.
pub const REQUIRED_TRACEPOINTS: &[&str] = &[
    "sched:sched_switch",
    "sched:sched_migrate_task",
    "sched:sched_process_fork",
    "sched:sched_process_exec",
    "sched:sched_process_exit",
    "raw_syscalls:sys_enter",
    "raw_syscalls:sys_exit",
    "kmem:mm_page_alloc",
    "kmem:mm_page_free",
    "tlb:tlb_flush",
];

/// Page-fault tracepoints: recorded where the kernel has them (x86).
pub const OPTIONAL_TRACEPOINTS: &[&str] =
    &["exceptions:page_fault_user", "exceptions:page_fault_kernel"];

const TRACEFS_ROOTS: &[&str] = &["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// True if this kernel's tracefs lists `sys:name` (None if tracefs cannot be read).
fn tracepoint_exists(tp: &str) -> Option<bool> {
    let (sys, name) = tp.split_once(':')?;
    let root = TRACEFS_ROOTS
        .iter()
        .find(|r| Path::new(r).join("events").is_dir())?;
    Some(Path::new(root).join("events").join(sys).join(name).is_dir())
}

/// What `record` did.
#[derive(Debug, Clone)]
pub struct RecordSummary {
    pub perf_data: PathBuf,
    pub perf_data_bytes: u64,
    pub convert: ConvertSummary,
    pub command_status: Option<i32>,
    /// True when syscalls, page allocator and fault events were limited to the command's
    /// cgroup in the kernel (sched and tlb events are always system-wide).
    pub cgroup_filtered: bool,
    /// The recorder's own cost, measured before the command ran.
    pub tracer: Option<crate::format::TracerCost>,
    pub untraced: Option<crate::format::Untraced>,
}

/// What a conversion wrote.
#[derive(Debug, Clone, Default)]
pub struct ConvertSummary {
    pub events: u64,
    pub perf_samples: u64,
    pub trace_bytes: u64,
    pub tasks: u64,
    pub lost: u64,
    /// Switch-outs written because perf lost the real one (the task was seen running
    /// elsewhere, or another task ran on its CPU).
    pub repaired: u64,
    /// Switch-ins written because the kernel recorded none: a tree task's own event came
    /// while it was switched out (the recording host's kernel leaves most switches out of
    /// the idle task untraced).
    pub inferred_switch_ins: u64,
    /// How well the command's descriptors were followed.
    pub fds: fds::FdCounts,
}

pub struct RecordOptions {
    pub output: PathBuf,
    pub command: Vec<String>,
    /// Keep the intermediate perf.data (next to the output, `<output>.perf.data`).
    pub keep_perf_data: bool,
    /// Replace an existing output (and kept perf.data).
    pub force: bool,
    /// perf's ring buffer size per CPU, in pages.
    pub mmap_pages: u32,
    /// Limit the high-volume events to a cgroup of the command where cgroup v2 allows it.
    pub cgroup_filter: bool,
    /// The command that runs the calibration loop (`kharden trace calibrate-loop`, an
    /// output file appended): the recorder's own cost is measured first (None: not measured).
    pub calibrate: Option<Vec<String>>,
    /// Runs of the command without perf after the recording, kept in the trace.
    pub untraced_runs: u32,
    /// The command's output goes to /dev/null, perf's and its errors are not passed on.
    pub quiet: bool,
    /// Scheduling priority of perf and the command (None: kharden's).
    pub nice: Option<i32>,
}

/// Checks that `program` can be run (a path to an executable, or a name found in PATH).
fn find_command(program: &str) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let found = if program.contains('/') {
        runnable(Path::new(program))
    } else {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|d| runnable(&d.join(program))))
    };
    if found {
        Ok(())
    } else if program.contains('/') {
        Err(Error::new(format!(
            "record: '{program}' is not an executable file"
        )))
    } else {
        Err(Error::new(format!(
            "record: command '{program}' not found in PATH"
        )))
    }
}

/// Runs `perf --version`; Err says plainly why perf cannot be used.
pub fn perf_available() -> Result<String> {
    match Command::new("perf")
        .arg("--version")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
    {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).trim().to_string()),
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let line = err
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("no message");
            Err(Error::new(format!(
                "record: perf is installed but does not run: {}",
                line.trim()
            )))
        }
        Err(_) => Err(Error::new(
            "record: perf is not installed (on Debian: apt-get install linux-perf)",
        )),
    }
}

/// Records `command` system-wide with perf and converts its process tree into a trace:
/// first the recorder's own cost (`calibrate`), then the command under perf with a watch of
/// its opens, then its untraced runs, then the conversion.
pub fn record(opts: &RecordOptions) -> Result<RecordSummary> {
    if opts.command.is_empty() {
        return Err(Error::new(
            "record: no command given; usage: kharden record [-o FILE] -- COMMAND...",
        ));
    }
    // Refuse a bad or existing output before anything runs.
    drop(Output::create(&opts.output, opts.force)?);
    find_command(&opts.command[0])?;
    perf_available()?;
    let events = tracepoints()?;
    // perf's data stays in a private scratch directory (perf would rename an existing file
    // beside the output to .old, destroying the previous .old).
    let scratch = Scratch::new("record")?;
    let tracer = match &opts.calibrate {
        Some(cmd) => Some(calibrate(opts, &events, cmd, scratch.path())?),
        None => None,
    };
    let perf_data = scratch.path().join("perf.data");
    let watch = watch::OpenWatch::start();
    let session = perf_session(opts, &events, &opts.command, &perf_data, !opts.quiet)?;
    let mut beside = Beside {
        tracer,
        ..Default::default()
    };
    beside.descriptors = session.descriptors;
    if let Some(w) = watch {
        w.finish(&mut beside.descriptors);
    }
    if opts.untraced_runs > 0 {
        let split_data = perf_data.with_extension("split.data");
        beside.untraced = Some(untraced_runs(
            &opts.command,
            opts.untraced_runs,
            &split_data,
        )?);
        std::fs::remove_file(&split_data).ok();
    }
    let convert = convert(
        &perf_data,
        &opts.output,
        opts.force,
        Some(session.perf_pid),
        &opts.command,
        &beside,
    )?;
    let kept = PathBuf::from(format!("{}.perf.data", opts.output.display()));
    if opts.keep_perf_data {
        let mut out = Output::create(&kept, opts.force)?;
        std::io::copy(
            &mut std::fs::File::open(&perf_data).map_err(|e| Error::at(perf_data.display(), e))?,
            out.file(),
        )
        .map_err(|e| Error::at(kept.display(), format!("cannot write: {e}")))?;
        out.commit()?;
    }
    Ok(RecordSummary {
        perf_data: kept,
        perf_data_bytes: session.bytes,
        convert,
        command_status: session.status,
        cgroup_filtered: session.cgroup_filtered,
        tracer: beside.tracer,
        untraced: beside.untraced,
    })
}

/// The tracepoints to record on this kernel.
fn tracepoints() -> Result<Vec<&'static str>> {
    let mut events: Vec<&str> = REQUIRED_TRACEPOINTS.to_vec();
    for tp in REQUIRED_TRACEPOINTS {
        if tracepoint_exists(tp) == Some(false) {
            return Err(Error::new(format!("record: this kernel has no tracepoint {tp}; perf cannot record what a kharden trace needs")));
        }
    }
    for tp in OPTIONAL_TRACEPOINTS {
        if tracepoint_exists(tp) == Some(true) {
            events.push(tp);
        }
    }
    // Scheduler and TLB events stay system-wide (a task is switched in from another task's
    // context; idle CPUs take shootdowns); the high-volume ones are filtered in the kernel to
    // a cgroup holding perf and the command, when a cgroup v2 hierarchy allows it.
    events.sort_by_key(|tp| !(tp.starts_with("sched:") || tp.starts_with("tlb:")));
    Ok(events)
}

/// The recorder's cost on this host now: the calibration loop (`calibrate`, the command
/// that runs `calibrate::run_loop` with an output file appended) run untraced, then under
/// the same perf session as the command's.
fn calibrate(
    opts: &RecordOptions,
    events: &[&str],
    cmd: &[String],
    dir: &Path,
) -> Result<crate::format::TracerCost> {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        Error::new(format!(
            "record: measuring the recorder's own cost: {what}: {e}"
        ))
    };
    let times = dir.join("calibration-untraced.json");
    let status = Command::new(&cmd[0])
        .args(&cmd[1..])
        .arg(&times)
        .stdin(Stdio::null())
        .status()
        .map_err(|e| fail("cannot run the loop", &e))?;
    if !status.success() {
        return Err(fail("the loop failed", &status));
    }
    let untraced = crate::calibrate::read_times(&times)?;
    let data = dir.join("calibration.data");
    let mut traced_cmd = cmd.to_vec();
    traced_cmd.push(dir.join("calibration-traced.json").display().to_string());
    let s = perf_session(opts, events, &traced_cmd, &data, false)?;
    if s.status != Some(0) {
        return Err(fail("the traced loop failed", &format!("{:?}", s.status)));
    }
    let trace = dir.join("calibration.trace");
    convert(
        &data,
        &trace,
        true,
        Some(s.perf_pid),
        &traced_cmd,
        &Beside::default(),
    )?;
    let cost = crate::calibrate::analyse(&untraced, &trace)?;
    let _ = std::fs::remove_file(&data);
    let _ = std::fs::remove_file(&trace);
    Ok(cost)
}

/// `command` run `n` times without perf, one after another: each run's wall-clock time and
/// wait4()'s rusage.
fn untraced_runs(command: &[String], n: u32, split_data: &Path) -> Result<crate::format::Untraced> {
    let mut runs = Vec::new();
    for _ in 0..n {
        match run::run_bounded(command, &run::RunOptions::default())? {
            Bounded::Finished(run, _) => runs.push(run),
            Bounded::TimedOut => unreachable!("no bound"),
        }
    }
    // One more, sampled, for the split between user and system.
    let m = sampled::sample_modes(command, split_data, None)?;
    let sampled = Some(crate::format::CpuSamples {
        period_ns: sampled::SPLIT_PERIOD_NS,
        user: m.user,
        kernel: m.kernel,
    });
    Ok(crate::format::Untraced { runs, sampled })
}

/// What one perf session gave.
struct Session {
    perf_pid: u32,
    bytes: u64,
    status: Option<i32>,
    cgroup_filtered: bool,
    /// The command's descriptors and working directory at its start.
    descriptors: fds::Descriptors,
}

/// Runs `command` under `perf record -a` of `events` into `perf_data`; with `forward`, the
/// command's and perf's standard error are passed on (else kept for messages only).
fn perf_session(
    opts: &RecordOptions,
    events: &[&str],
    command: &[String],
    perf_data: &Path,
    forward: bool,
) -> Result<Session> {
    let cgroup = if opts.cgroup_filter {
        RecordCgroup::enter()
    } else {
        None
    };
    let mut cmd = Command::new("perf");
    // -k mono: samples stamped with CLOCK_MONOTONIC, the clock of the watch of opens.
    cmd.arg("record")
        .arg("-a")
        .arg("-q")
        .arg("-k")
        .arg("mono")
        .arg("-m")
        .arg(opts.mmap_pages.to_string())
        .arg("-o")
        .arg(perf_data);
    // The command's cpu-clock samples: its user time without the recorder's (prepass.rs).
    let clock = format!("cpu-clock/period={}/", prepass::SAMPLE_PERIOD_NS);
    let mut events: Vec<&str> = events.to_vec();
    events.push(&clock);
    cmd.arg("-e").arg(events.join(","));
    if let Some(cg) = &cgroup {
        let list: Vec<&str> = events
            .iter()
            .map(|tp| {
                if tp.starts_with("sched:") || tp.starts_with("tlb:") {
                    ""
                } else {
                    cg.name.as_str()
                }
            })
            .collect();
        cmd.arg("-G").arg(list.join(","));
    }
    cmd.arg("--").args(command);
    with_nice(&mut cmd, opts.nice);
    cmd.stdin(Stdio::inherit())
        .stdout(if forward {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::piped());
    let spawned = cmd.spawn();
    // perf (and so the command it forks) is in the cgroup now; kharden itself goes home.
    if let Some(cg) = &cgroup {
        cg.go_home();
    }
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            if let Some(cg) = cgroup {
                cg.remove();
            }
            return Err(Error::new(format!("record: cannot start perf: {e}")));
        }
    };
    let perf_pid = child.id();
    crate::scratch::stop_on_signal(perf_pid);
    // perf's child waits for perf to be ready before it execs the command: its
    // descriptors then are the command's.
    let mut descriptors = fds::Descriptors::default();
    let mut scan = None;
    if let Some(c) = first_child(perf_pid) {
        (descriptors.inherited, descriptors.cwd) = watch::inherited(c);
        if let Some(cg) = &cgroup {
            cg.release_perf(perf_pid);
        }
        scan = Some(watch::FdScan::start(c));
    }
    // Forward perf's (and the command's) stderr, keeping the last lines for error messages.
    let stderr = child.stderr.take();
    let tail = std::thread::spawn(move || {
        let mut last: Vec<String> = Vec::new();
        if let Some(s) = stderr {
            for line in BufReader::new(s).lines().map_while(|l| l.ok()) {
                if forward {
                    eprintln!("{line}");
                }
                last.push(line);
                if last.len() > 20 {
                    last.remove(0);
                }
            }
        }
        last
    });
    let status = child
        .wait()
        .map_err(|e| Error::new(format!("record: waiting for perf: {e}")));
    crate::scratch::forget_child(perf_pid);
    if let Some(s) = scan {
        s.finish(&mut descriptors);
    }
    let last = tail.join().unwrap_or_default();
    let filtered = cgroup.is_some();
    if let Some(cg) = cgroup {
        cg.remove();
    }
    let status = status?;
    let size = std::fs::metadata(perf_data).map(|m| m.len()).unwrap_or(0);
    if !status.success() && size == 0 {
        let why = last
            .iter()
            .rev()
            .find(|l| {
                let l = l.to_ascii_lowercase();
                l.contains("permission")
                    || l.contains("error")
                    || l.contains("not supported")
                    || l.contains("paranoid")
                    || l.contains("failed")
            })
            .or_else(|| last.iter().rev().find(|l| !l.trim().is_empty()))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| format!("perf exited with {status}"));
        let _ = std::fs::remove_file(perf_data);
        return Err(Error::new(format!(
            "record: perf cannot record system-wide tracepoints here: {why}"
        )));
    }
    if size == 0 {
        return Err(Error::new(format!(
            "record: perf wrote no data to {}",
            perf_data.display()
        )));
    }
    Ok(Session {
        perf_pid,
        bytes: size,
        status: status.code(),
        cgroup_filtered: filtered,
        descriptors,
    })
}

/// The first child of `pid` (perf's workload child), waited for up to 2 s.
fn first_child(pid: u32) -> Option<u32> {
    let children = format!("/proc/{pid}/task/{pid}/children");
    for _ in 0..2000 {
        match std::fs::read_to_string(&children) {
            Ok(c) => {
                if let Some(c) = c.split_whitespace().next().and_then(|c| c.parse().ok()) {
                    return Some(c);
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(_) => return None,
        }
    }
    None
}

/// A cgroup v2 group for one recording: perf's high-volume events are limited to it.
struct RecordCgroup {
    dir: PathBuf,
    /// The name perf's `-G` takes (relative to the cgroup2 mount).
    name: String,
    /// The cgroup kharden was in.
    home: PathBuf,
}

impl RecordCgroup {
    /// Creates the group and moves this process into it; None where that is not possible
    /// (no cgroup2 mount, a v1 perf_event hierarchy perf would use instead, no permission).
    fn enter() -> Option<RecordCgroup> {
        let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
        let fields = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        if mounts.lines().map(fields).any(|f| {
            f.get(2).map(String::as_str) == Some("cgroup")
                && f.get(3)
                    .is_some_and(|o| o.split(',').any(|x| x == "perf_event"))
        }) {
            return None;
        }
        let mnt = run::cgroup2_mount()?;
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let own = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))?
            .trim()
            .trim_start_matches('/')
            .to_string();
        let home = mnt.join(own);
        let name = format!("kharden-record-{}", std::process::id());
        let dir = mnt.join(&name);
        std::fs::create_dir(&dir).ok()?;
        if std::fs::write(dir.join("cgroup.procs"), "0").is_err() {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        crate::scratch::remove_on_signal_dir(&dir);
        Some(RecordCgroup { dir, name, home })
    }

    /// Moves perf itself out of the group once it has forked the command (its own syscalls
    /// would otherwise be recorded too); the command stays in.
    fn release_perf(&self, perf_pid: u32) {
        let _ = std::fs::write(self.home.join("cgroup.procs"), perf_pid.to_string());
    }

    fn go_home(&self) {
        let _ = std::fs::write(self.home.join("cgroup.procs"), "0");
    }

    /// Moves this process home and removes the group (left in place if the command left
    /// processes behind in it).
    fn remove(self) {
        self.go_home();
        // The command's last processes may take a moment to leave the group.
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        crate::scratch::forget(&self.dir);
    }
}

/// Opens `perf_data` for reading its records; the errors name the file.
pub(super) fn open_perf_data(
    perf_data: &Path,
) -> Result<linux_perf_data::PerfFileReader<BufReader<std::fs::File>>> {
    let name = perf_data.display().to_string();
    let file = std::fs::File::open(perf_data)
        .map_err(|e| Error::at(&name, format!("cannot open: {e}")))?;
    let reader = linux_perf_data::PerfFileReader::parse_file(BufReader::new(file))
        .map_err(|e| Error::at(&name, format!("cannot parse perf.data: {e}")))?;
    let compressed = reader
        .perf_file
        .features()
        .has_feature(linux_perf_data::Feature::COMPRESSED);
    if compressed && !cfg!(feature = "zstd") {
        return Err(Error::at(
            &name,
            "written with `perf record -z` (zstd-compressed records): record it again without -z, \
             or build kharden with `--features zstd`",
        ));
    }
    Ok(reader)
}
