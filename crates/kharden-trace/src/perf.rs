//! Recording with `perf record -a` and converting perf.data into a kharden trace.
//!
//! perf.data is parsed with the `linux-perf-data` crate (records, attributes, header features);
//! tracepoint payloads are decoded with the field layouts perf stored in the file's
//! TRACING_DATA section (the kernel's tracefs `format` files), so a trace converts correctly
//! whatever the recording kernel's layout. Only the recorded command's process tree is kept.

use crate::format::{Event, GfpClass, Meta, Op, TraceWriter};
use crate::gfp::GfpBits;
use crate::scratch::{Output, Scratch};
use kharden::{Error, Result};
use linux_perf_data::linux_perf_event_reader::{EventRecord, RawData};
use linux_perf_data::{Feature, PerfFileReader, PerfFileRecord};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

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

/// Records `command` system-wide with perf and converts its process tree into a trace.
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
    // perf's data stays in a private scratch directory (perf would rename an existing file
    // beside the output to .old, destroying the previous .old).
    let scratch = Scratch::new("record")?;
    let perf_data = scratch.path().join("perf.data");
    // Scheduler and TLB events stay system-wide (a task is switched in from another task's
    // context; idle CPUs take shootdowns); the high-volume ones are filtered in the kernel to
    // a cgroup holding perf and the command, when a cgroup v2 hierarchy allows it.
    events.sort_by_key(|tp| !(tp.starts_with("sched:") || tp.starts_with("tlb:")));
    let cgroup = if opts.cgroup_filter {
        RecordCgroup::enter()
    } else {
        None
    };
    let mut cmd = Command::new("perf");
    cmd.arg("record")
        .arg("-a")
        .arg("-q")
        .arg("-m")
        .arg(opts.mmap_pages.to_string())
        .arg("-o")
        .arg(&perf_data);
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
    cmd.arg("--").args(&opts.command);
    cmd.stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
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
    if let Some(cg) = &cgroup {
        cg.release_once_forked(perf_pid);
    }
    // Forward perf's (and the command's) stderr, keeping the last lines for error messages.
    let stderr = child.stderr.take();
    let tail = std::thread::spawn(move || {
        let mut last: Vec<String> = Vec::new();
        if let Some(s) = stderr {
            for line in BufReader::new(s).lines().map_while(|l| l.ok()) {
                eprintln!("{line}");
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
    let last = tail.join().unwrap_or_default();
    let filtered = cgroup.is_some();
    if let Some(cg) = cgroup {
        cg.remove();
    }
    let status = status?;
    let size = std::fs::metadata(&perf_data).map(|m| m.len()).unwrap_or(0);
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
        let _ = std::fs::remove_file(&perf_data);
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
    let convert = convert(
        &perf_data,
        &opts.output,
        opts.force,
        Some(perf_pid),
        &opts.command,
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
        perf_data_bytes: size,
        convert,
        command_status: status.code(),
        cgroup_filtered: filtered,
    })
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
        let mnt = mounts
            .lines()
            .map(fields)
            .find(|f| f.get(2).map(String::as_str) == Some("cgroup2"))
            .map(|f| PathBuf::from(&f[1]))?;
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

    /// Moves perf itself out of the group as soon as it has forked the command (its own
    /// syscalls would otherwise be recorded too); the command stays in.
    fn release_once_forked(&self, perf_pid: u32) {
        let children = format!("/proc/{perf_pid}/task/{perf_pid}/children");
        for _ in 0..2000 {
            match std::fs::read_to_string(&children) {
                Ok(c) if !c.trim().is_empty() => {
                    let _ = std::fs::write(self.home.join("cgroup.procs"), perf_pid.to_string());
                    return;
                }
                Ok(_) => std::thread::sleep(std::time::Duration::from_millis(1)),
                Err(_) => return,
            }
        }
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

// ---------------------------------------------------------------------------------------------
// Tracepoint formats

/// One field of a tracepoint's `format`.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: String,
    pub offset: usize,
    pub size: usize,
    /// `__data_loc`: the field holds (length << 16 | offset) of a dynamic string.
    pub data_loc: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventFormat {
    pub name: String,
    pub fields: Vec<Field>,
    pub print_fmt: String,
}

impl EventFormat {
    /// Parses the text of a tracefs `format` file.
    pub fn parse(text: &str) -> Option<EventFormat> {
        let mut f = EventFormat::default();
        for line in text.lines() {
            let line = line.trim();
            if let Some(n) = line.strip_prefix("name:") {
                f.name = n.trim().to_string();
            } else if let Some(p) = line.strip_prefix("print fmt:") {
                f.print_fmt = p.trim().to_string();
            } else if let Some(rest) = line.strip_prefix("field:") {
                let mut parts = rest.split(';').map(str::trim);
                let decl = parts.next()?;
                let mut offset = None;
                let mut size = None;
                for p in parts {
                    if let Some(v) = p.strip_prefix("offset:") {
                        offset = v.trim().parse().ok();
                    } else if let Some(v) = p.strip_prefix("size:") {
                        size = v.trim().parse().ok();
                    }
                }
                let ident = decl
                    .rsplit(|c: char| c.is_whitespace() || c == '*')
                    .next()?;
                let ident = ident.split('[').next()?.to_string();
                f.fields.push(Field {
                    name: ident,
                    offset: offset?,
                    size: size?,
                    data_loc: decl.contains("__data_loc"),
                });
            }
        }
        (!f.name.is_empty()).then_some(f)
    }

    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// Finds the `format` text of tracepoint `name` inside perf's TRACING_DATA section.
fn format_from_tracing_data(data: &[u8], name: &str) -> Option<EventFormat> {
    let needle = format!("name: {name}\n");
    let text = String::from_utf8_lossy(data);
    let start = text.find(&needle)?;
    let rest = &text[start..];
    let pf = rest.find("print fmt:")?;
    let end = rest[pf..].find('\n').map_or(rest.len(), |e| pf + e);
    EventFormat::parse(&rest[..end])
}

fn format_from_tracefs(tp: &str) -> Option<EventFormat> {
    let (sys, name) = tp.split_once(':')?;
    TRACEFS_ROOTS.iter().find_map(|r| {
        let text = std::fs::read_to_string(
            Path::new(r)
                .join("events")
                .join(sys)
                .join(name)
                .join("format"),
        )
        .ok()?;
        EventFormat::parse(&text)
    })
}

/// Reads integer and string fields out of a tracepoint's raw payload.
#[derive(Debug, Clone)]
struct Layout {
    fields: Vec<Option<Field>>,
}

impl Layout {
    fn new(fmt: &EventFormat, names: &[&str]) -> Layout {
        Layout {
            fields: names.iter().map(|n| fmt.field(n).cloned()).collect(),
        }
    }
    fn int(&self, raw: &[u8], i: usize) -> Option<u64> {
        let f = self.fields.get(i)?.as_ref()?;
        let b = raw.get(f.offset..f.offset + f.size)?;
        Some(match f.size {
            1 => b[0] as u64,
            2 => u16::from_le_bytes(b.try_into().ok()?) as u64,
            4 => u32::from_le_bytes(b.try_into().ok()?) as u64,
            8 => u64::from_le_bytes(b.try_into().ok()?),
            _ => return None,
        })
    }
    fn i32(&self, raw: &[u8], i: usize) -> Option<i32> {
        self.int(raw, i).map(|v| v as u32 as i32)
    }
    fn str<'a>(&self, raw: &'a [u8], i: usize) -> Option<&'a str> {
        let f = self.fields.get(i)?.as_ref()?;
        let bytes = if f.data_loc {
            let loc = u32::from_le_bytes(raw.get(f.offset..f.offset + 4)?.try_into().ok()?);
            let (off, len) = ((loc & 0xffff) as usize, (loc >> 16) as usize);
            raw.get(off..off + len)?
        } else {
            raw.get(f.offset..f.offset + f.size)?
        };
        let end = bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len());
        std::str::from_utf8(&bytes[..end]).ok()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Switch,
    Migrate,
    Fork,
    Exec,
    Exit,
    SysEnter,
    SysExit,
    PageAlloc,
    PageFree,
    TlbFlush,
    FaultUser,
    FaultKernel,
    Other,
}

fn kind_of(name: &str) -> (Kind, &'static [&'static str]) {
    match name {
        "sched:sched_switch" => (Kind::Switch, &["prev_pid", "prev_state", "next_pid"]),
        "sched:sched_migrate_task" => (Kind::Migrate, &["pid", "orig_cpu", "dest_cpu"]),
        "sched:sched_process_fork" => (Kind::Fork, &["parent_pid", "child_pid", "child_comm"]),
        "sched:sched_process_exec" => (Kind::Exec, &["filename", "pid"]),
        "sched:sched_process_exit" => (Kind::Exit, &["pid"]),
        "raw_syscalls:sys_enter" => (Kind::SysEnter, &["id"]),
        "raw_syscalls:sys_exit" => (Kind::SysExit, &["id", "ret"]),
        "kmem:mm_page_alloc" => (Kind::PageAlloc, &["pfn", "order", "gfp_flags"]),
        "kmem:mm_page_free" => (Kind::PageFree, &["pfn", "order"]),
        "tlb:tlb_flush" => (Kind::TlbFlush, &["reason", "pages"]),
        "exceptions:page_fault_user" => (Kind::FaultUser, &["address", "error_code"]),
        "exceptions:page_fault_kernel" => (Kind::FaultKernel, &["address", "error_code"]),
        _ => (Kind::Other, &[]),
    }
}

/// x86-64 syscall names from the installed kernel headers (`#define __NR_read 0`).
pub fn syscall_names(arch: &str) -> HashMap<u32, String> {
    let mut out = HashMap::new();
    if arch != "x86_64" {
        return out;
    }
    for path in [
        "/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
        "/usr/include/asm/unistd_64.h",
    ] {
        if let Ok(text) = std::fs::read_to_string(path) {
            for line in text.lines() {
                let mut it = line.split_whitespace();
                if let (Some("#define"), Some(name), Some(nr)) = (it.next(), it.next(), it.next()) {
                    if let (Some(n), Ok(nr)) = (name.strip_prefix("__NR_"), nr.parse::<u32>()) {
                        out.insert(nr, n.to_string());
                    }
                }
            }
            break;
        }
    }
    out
}

/// Per-task state of the conversion.
struct Live {
    comm: Arc<str>,
    exiting: bool,
}

/// Converts `perf_data` into a kharden trace at `out`, keeping the process tree of the
/// workload perf started (the task perf named `perf-exec`; with `perf_pid`, the one whose
/// parent is that perf).
pub fn convert(
    perf_data: &Path,
    out: &Path,
    overwrite: bool,
    perf_pid: Option<u32>,
    command: &[String],
) -> Result<ConvertSummary> {
    let name = perf_data.display().to_string();
    let perr = |e: &dyn std::fmt::Display| Error::at(&name, format!("cannot parse perf.data: {e}"));
    let file = std::fs::File::open(perf_data)
        .map_err(|e| Error::at(&name, format!("cannot open: {e}")))?;
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = PerfFileReader::parse_file(BufReader::new(file)).map_err(|e| perr(&e))?;

    let tracing = perf_file
        .feature_section_data(Feature::TRACING_DATA)
        .map(|d| d.to_vec());
    let attr_names: Vec<String> = perf_file
        .event_attributes()
        .iter()
        .map(|a| a.name().unwrap_or("").to_string())
        .collect();
    let mut layouts: Vec<(Kind, Layout)> = Vec::new();
    let mut gfp_bits = GfpBits::default();
    let mut recorded = Vec::new();
    for tp in &attr_names {
        let (kind, fields) = kind_of(tp);
        if kind == Kind::Other {
            layouts.push((kind, Layout { fields: vec![] }));
            continue;
        }
        recorded.push(tp.clone());
        let short = tp.split_once(':').map_or(tp.as_str(), |(_, n)| n);
        let fmt = tracing
            .as_deref()
            .and_then(|d| format_from_tracing_data(d, short))
            .or_else(|| format_from_tracefs(tp))
            .ok_or_else(|| Error::at(&name, format!("no format for tracepoint {tp} (neither in the file's tracing data nor in tracefs)")))?;
        let layout = Layout::new(&fmt, fields);
        if let Some(i) = layout.fields.iter().position(|f| f.is_none()) {
            return Err(Error::at(
                &name,
                format!("tracepoint {tp} has no field '{}'", fields[i]),
            ));
        }
        if kind == Kind::PageAlloc {
            if let Some(b) = GfpBits::from_print_fmt(&fmt.print_fmt) {
                gfp_bits = b;
            }
        }
        layouts.push((kind, layout));
    }
    if !recorded.iter().any(|t| t == "sched:sched_process_fork")
        || !recorded.iter().any(|t| t == "sched:sched_switch")
    {
        return Err(Error::at(&name, "not recorded with sched:sched_process_fork and sched:sched_switch (use kharden record)"));
    }

    let arch = perf_file.arch().ok().flatten().unwrap_or("").to_string();
    let base = perf_file
        .sample_time_range()
        .ok()
        .flatten()
        .map_or(0, |r| r.first_sample_time);
    // Without a command given, take it from perf's own command line (after "--").
    let command: Vec<String> = if command.is_empty() {
        let cl = perf_file.cmdline().ok().flatten().unwrap_or_default();
        match cl.iter().position(|a| *a == "--") {
            Some(i) => cl[i + 1..].iter().map(|a| a.to_string()).collect(),
            None => vec![],
        }
    } else {
        command.to_vec()
    };
    let meta = Meta {
        command,
        hostname: perf_file
            .hostname()
            .ok()
            .flatten()
            .unwrap_or("")
            .to_string(),
        kernel: perf_file
            .os_release()
            .ok()
            .flatten()
            .unwrap_or("")
            .to_string(),
        perf_version: perf_file
            .perf_version()
            .ok()
            .flatten()
            .unwrap_or("")
            .to_string(),
        nr_cpus: perf_file
            .nr_cpus()
            .ok()
            .flatten()
            .map_or(0, |n| n.nr_cpus_online),
        base_time_ns: base,
        tracepoints: recorded,
        gfp_bits: gfp_bits.describe(),
    };
    let outname = out.display().to_string();
    let werr = |e: std::io::Error| Error::at(&outname, format!("cannot write: {e}"));
    // Written beside `out` and renamed into place once complete.
    let mut output = Output::create(out, overwrite)?;
    let f = output.file().try_clone().map_err(werr)?;
    let mut w = TraceWriter::new(BufWriter::with_capacity(1 << 16, f), &meta).map_err(werr)?;
    for (nr, n) in syscall_names(&arch) {
        w.set_syscall_name(nr, &n);
    }

    let mut sum = ConvertSummary::default();
    // System-wide bookkeeping needed to find and follow the tree (bounded by live threads).
    let mut parent_of: HashMap<u32, u32> = HashMap::new();
    let mut tgid_of: HashMap<u32, u32> = HashMap::new();
    let mut root: Option<u32> = None;
    let mut root_pending = false;
    let mut live: HashMap<u32, Live> = HashMap::new();
    let mut lazy_owner: HashMap<u32, u32> = HashMap::new();
    let mut on_cpu: HashMap<u32, u32> = HashMap::new();
    let mut cpu_of: HashMap<u32, u32> = HashMap::new();
    let mut last_time = 0u64;
    let mut ever: HashSet<u32> = HashSet::new();

    macro_rules! emit {
        ($t:expr, $tid:expr, $op:expr) => {
            w.write(&Event {
                time_ns: $t,
                tid: $tid,
                op: $op,
            })
            .map_err(werr)?
        };
    }

    loop {
        let rec = match record_iter.next_record(&mut perf_file) {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(e) => return Err(perr(&e)),
        };
        let PerfFileRecord::EventRecord { attr_index, record } = rec else {
            continue;
        };
        let parsed = match record.parse() {
            Ok(p) => p,
            Err(e) => return Err(perr(&e)),
        };
        match parsed {
            EventRecord::Fork(f) => {
                let (tid, ptid, pid) = (f.tid as u32, f.ptid as u32, f.pid as u32);
                parent_of.insert(tid, ptid);
                tgid_of.insert(tid, pid);
                let t = f.timestamp.saturating_sub(base);
                if live.contains_key(&ptid) && !live.contains_key(&tid) && f.timestamp != 0 {
                    let comm = live[&ptid].comm.clone();
                    if w.is_live(tid) {
                        emit!(t, tid, Op::Exit);
                    }
                    emit!(
                        t,
                        tid,
                        Op::TaskNew {
                            pid,
                            parent: Some(ptid),
                            comm: comm.clone()
                        }
                    );
                    live.insert(
                        tid,
                        Live {
                            comm,
                            exiting: false,
                        },
                    );
                    ever.insert(tid);
                }
            }
            EventRecord::Exit(f) => {
                parent_of.remove(&(f.tid as u32));
                tgid_of.remove(&(f.tid as u32));
            }
            EventRecord::Comm(c) => {
                let tid = c.tid as u32;
                let comm = String::from_utf8_lossy(&c.name.as_slice()).to_string();
                if root.is_none() && comm == "perf-exec" && c.pid == c.tid {
                    let ok = match perf_pid {
                        Some(pp) => parent_of.get(&tid).map_or(true, |&p| p == pp),
                        None => true,
                    };
                    if ok {
                        root = Some(tid);
                        root_pending = true;
                    }
                }
                if let Some(l) = live.get_mut(&tid) {
                    l.comm = Arc::from(comm.as_str());
                }
            }
            EventRecord::Lost(l) => {
                sum.lost += l.count;
                emit!(last_time, 0, Op::Lost { count: l.count });
            }
            EventRecord::Sample(s) => {
                sum.perf_samples += 1;
                let Some((kind, layout)) = layouts.get(attr_index) else {
                    continue;
                };
                let Some(raw) = s.raw else { continue };
                let raw = raw_bytes(&raw);
                let raw: &[u8] = &raw;
                let t = s.timestamp.unwrap_or(base).saturating_sub(base);
                last_time = last_time.max(t);
                let tid = s.tid.unwrap_or(-1) as u32;
                let cpu = s.cpu.unwrap_or(0);
                if root_pending {
                    let r = root.expect("pending root is set");
                    let comm: Arc<str> = Arc::from("perf-exec");
                    emit!(
                        t,
                        r,
                        Op::TaskNew {
                            pid: r,
                            parent: None,
                            comm: comm.clone()
                        }
                    );
                    live.insert(
                        r,
                        Live {
                            comm,
                            exiting: false,
                        },
                    );
                    ever.insert(r);
                    root_pending = false;
                }
                let in_tree = live.contains_key(&tid);
                match kind {
                    Kind::Switch => {
                        let prev = layout.i32(raw, 0).unwrap_or(-1) as u32;
                        let state = layout.int(raw, 1).unwrap_or(0);
                        let next = layout.i32(raw, 2).unwrap_or(-1) as u32;
                        // After lost events a tree task may seem to still run on this CPU
                        // (or on another one): it stopped unseen, so it is switched out here.
                        if let Some(cur) = on_cpu.remove(&cpu) {
                            if cur != prev && live.contains_key(&cur) {
                                emit!(t, cur, Op::SwitchOut { state: 0 });
                                cpu_of.remove(&cur);
                                sum.repaired += 1;
                            }
                        }
                        if live.contains_key(&prev) {
                            emit!(t, prev, Op::SwitchOut { state });
                            cpu_of.remove(&prev);
                            if live[&prev].exiting && state & 0x30 != 0 {
                                emit!(t, prev, Op::Exit);
                                live.remove(&prev);
                            }
                        }
                        if live.contains_key(&next) {
                            if let Some(other) = cpu_of.remove(&next) {
                                on_cpu.remove(&other);
                                emit!(t, next, Op::SwitchOut { state: 0 });
                                sum.repaired += 1;
                            }
                            on_cpu.insert(cpu, next);
                            cpu_of.insert(next, cpu);
                        }
                        if next == 0 {
                            if live.contains_key(&prev) {
                                lazy_owner.insert(cpu, prev);
                            }
                        } else if live.contains_key(&next) {
                            lazy_owner.insert(cpu, next);
                            emit!(t, next, Op::SwitchIn { cpu });
                        } else {
                            lazy_owner.remove(&cpu);
                        }
                    }
                    Kind::Migrate => {
                        let pid = layout.i32(raw, 0).unwrap_or(-1) as u32;
                        if live.contains_key(&pid) {
                            let from = layout.int(raw, 1).unwrap_or(0) as u32;
                            let to = layout.int(raw, 2).unwrap_or(0) as u32;
                            emit!(t, pid, Op::Migrate { from, to });
                        }
                    }
                    Kind::Fork => {
                        let parent = layout.i32(raw, 0).unwrap_or(-1) as u32;
                        let child = layout.i32(raw, 1).unwrap_or(-1) as u32;
                        if live.contains_key(&parent) && !live.contains_key(&child) {
                            let comm: Arc<str> = Arc::from(layout.str(raw, 2).unwrap_or("?"));
                            let pid = tgid_of.get(&child).copied().unwrap_or(child);
                            if w.is_live(child) {
                                emit!(t, child, Op::Exit);
                            }
                            emit!(
                                t,
                                child,
                                Op::TaskNew {
                                    pid,
                                    parent: Some(parent),
                                    comm: comm.clone()
                                }
                            );
                            live.insert(
                                child,
                                Live {
                                    comm,
                                    exiting: false,
                                },
                            );
                            ever.insert(child);
                        }
                    }
                    Kind::Exec if in_tree => {
                        let filename = layout.str(raw, 0).unwrap_or("?");
                        let base_name = filename.rsplit('/').next().unwrap_or(filename);
                        let comm: String = base_name.chars().take(15).collect();
                        emit!(
                            t,
                            tid,
                            Op::Exec {
                                filename: Arc::from(filename)
                            }
                        );
                        if let Some(l) = live.get_mut(&tid) {
                            l.comm = Arc::from(comm.as_str());
                        }
                    }
                    Kind::Exit => {
                        let pid = layout.i32(raw, 0).unwrap_or(-1) as u32;
                        if let Some(l) = live.get_mut(&pid) {
                            l.exiting = true;
                        }
                    }
                    Kind::SysEnter if in_tree => {
                        let nr = layout.int(raw, 0).unwrap_or(0) as u32;
                        emit!(t, tid, Op::SysEnter { nr });
                    }
                    Kind::SysExit if in_tree => {
                        let nr = layout.int(raw, 0).unwrap_or(0) as u32;
                        let ret = layout.int(raw, 1).unwrap_or(0) as i64;
                        emit!(t, tid, Op::SysExit { nr, ret });
                    }
                    Kind::PageAlloc if in_tree => {
                        let pfn = layout.int(raw, 0).unwrap_or(0);
                        let order = layout.int(raw, 1).unwrap_or(0).min(63) as u8;
                        let gfp = layout.int(raw, 2).unwrap_or(0);
                        let class: GfpClass = gfp_bits.classify(gfp);
                        emit!(
                            t,
                            tid,
                            Op::PageAlloc {
                                pfn,
                                order,
                                gfp,
                                class
                            }
                        );
                    }
                    Kind::PageFree if in_tree => {
                        let pfn = layout.int(raw, 0).unwrap_or(0);
                        let order = layout.int(raw, 1).unwrap_or(0).min(63) as u8;
                        emit!(t, tid, Op::PageFree { pfn, order });
                    }
                    Kind::TlbFlush => {
                        let owner = if in_tree {
                            Some(tid)
                        } else if tid == 0 {
                            lazy_owner
                                .get(&cpu)
                                .copied()
                                .filter(|o| live.contains_key(o))
                        } else {
                            None
                        };
                        if let Some(o) = owner {
                            let reason = layout.int(raw, 0).unwrap_or(0) as u32;
                            let pages = layout.int(raw, 1).unwrap_or(0);
                            emit!(t, o, Op::TlbFlush { cpu, reason, pages });
                        }
                    }
                    Kind::FaultUser | Kind::FaultKernel if in_tree => {
                        let address = layout.int(raw, 0).unwrap_or(0);
                        let error_code = layout.int(raw, 1).unwrap_or(0);
                        emit!(
                            t,
                            tid,
                            Op::PageFault {
                                user: *kind == Kind::FaultUser,
                                address,
                                error_code
                            }
                        );
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    if root.is_none() {
        return Err(Error::at(&name, "no workload process in the recording (perf names it 'perf-exec'; was it made by kharden record or perf record -- COMMAND?)"));
    }
    // Tasks that called exit but whose last switch-out was not recorded end with the trace.
    let mut exiting: Vec<u32> = live
        .iter()
        .filter(|(_, l)| l.exiting)
        .map(|(&t, _)| t)
        .collect();
    exiting.sort_unstable();
    for t in exiting {
        emit!(last_time, t, Op::Exit);
    }
    sum.events = w.events();
    sum.tasks = ever.len() as u64;
    let (f, bytes) = w.finish().map_err(werr)?;
    f.into_inner()
        .map_err(|e| werr(e.into_error()))?
        .sync_all()
        .map_err(werr)?;
    output.commit()?;
    sum.trace_bytes = bytes;
    Ok(sum)
}

fn raw_bytes<'a>(raw: &RawData<'a>) -> std::borrow::Cow<'a, [u8]> {
    raw.as_slice()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_format_file() {
        let text = "name: sched_process_fork\nID: 313\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:__data_loc char[] parent_comm;\toffset:8;\tsize:4;\tsigned:0;\n\tfield:pid_t parent_pid;\toffset:12;\tsize:4;\tsigned:1;\n\tfield:char child_comm[16];\toffset:16;\tsize:16;\tsigned:0;\n\nprint fmt: \"comm=%s\", REC->x\n";
        let f = EventFormat::parse(text).unwrap();
        assert_eq!(f.name, "sched_process_fork");
        assert_eq!(
            f.field("parent_comm").unwrap(),
            &Field {
                name: "parent_comm".into(),
                offset: 8,
                size: 4,
                data_loc: true
            }
        );
        assert_eq!(f.field("child_comm").unwrap().size, 16);
        assert_eq!(f.print_fmt, "\"comm=%s\", REC->x");
        // A payload: data_loc string "make" at offset 32, parent_pid 77, child_comm "cc1".
        let mut raw = vec![0u8; 40];
        raw[8..12].copy_from_slice(&((5u32 << 16) | 32).to_le_bytes());
        raw[12..16].copy_from_slice(&77u32.to_le_bytes());
        raw[16..19].copy_from_slice(b"cc1");
        raw[32..37].copy_from_slice(b"make\0");
        let l = Layout::new(&f, &["parent_comm", "parent_pid", "child_comm", "missing"]);
        assert_eq!(l.str(&raw, 0), Some("make"));
        assert_eq!(l.i32(&raw, 1), Some(77));
        assert_eq!(l.str(&raw, 2), Some("cc1"));
        assert_eq!(l.int(&raw, 3), None);
        assert_eq!(l.int(&raw[..10], 1), None);
    }
}
