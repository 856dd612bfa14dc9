//! The driver of `convert`: reads the recording's tracepoint layouts and metadata, then walks
//! its records in order, following the workload's process tree and handing each tracepoint
//! sample to its family's handler (sched.rs, syscalls.rs, kmem.rs, tlb.rs, fault.rs).

use super::fds::{self, Descriptors, FdTables};
use super::syscall_names::syscall_names;
use super::tracepoint::{format_from_tracefs, format_from_tracing_data, kind_of, Kind, Layout};
use super::ConvertSummary;
use crate::format::{Event, Meta, Op, TraceWriter, TracerCost, Untraced};
use crate::gfp::GfpBits;
use crate::scratch::Output;
use kharden::{Error, Result};
use linux_perf_data::linux_perf_event_reader::{EventRecord, SampleRecord};
use linux_perf_data::{Feature, PerfFile, PerfFileReader, PerfFileRecord};
use std::collections::{HashMap, HashSet};
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::Arc;

/// What a recording knew beside perf.data: the command's descriptors, the recorder's own
/// cost, the untraced runs (all empty for a conversion of someone else's perf.data).
#[derive(Debug, Clone, Default)]
pub struct Beside {
    pub descriptors: Descriptors,
    pub tracer: Option<TracerCost>,
    pub untraced: Option<Untraced>,
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
    beside: &Beside,
) -> Result<ConvertSummary> {
    let name = perf_data.display().to_string();
    let perr = |e: &dyn std::fmt::Display| Error::at(&name, format!("cannot parse perf.data: {e}"));
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = super::open_perf_data(perf_data)?;
    let tracepoints = Tracepoints::read(&perf_file, &name)?;
    let base = perf_file
        .sample_time_range()
        .ok()
        .flatten()
        .map_or(0, |r| r.first_sample_time);
    let arch = perf_file.arch().ok().flatten().unwrap_or("").to_string();
    let names = syscall_names(&arch);
    let pre = super::prepass::prepass(perf_data, &tracepoints.layouts, &names, perf_pid)?;
    let mut meta = meta(&perf_file, &tracepoints, base, command);
    meta.tracer = beside.tracer.clone();
    meta.untraced = beside.untraced.clone();
    meta.fd_kinds = fd_kinds_method(&beside.descriptors);
    meta.cpu_samples = pre.samples;

    let outname = out.display().to_string();
    let werr = |e: io::Error| Error::at(&outname, format!("cannot write: {e}"));
    // Written beside `out` and renamed into place once complete.
    let mut output = Output::create(out, overwrite)?;
    let f = output.file().try_clone().map_err(werr)?;
    let mut w = TraceWriter::new(BufWriter::with_capacity(1 << 16, f), &meta).map_err(werr)?;
    for (nr, n) in &names {
        w.set_syscall_name(*nr, n);
    }
    let (matched, left) = fds::match_opens(&beside.descriptors.opens, &pre.calls);
    let mut conv = Conversion::new(w, base, perf_pid, tracepoints.gfp_bits);
    conv.names = names;
    conv.fds = FdTables::new(&beside.descriptors, matched, left);
    conv.descriptors = beside.descriptors.clone();
    loop {
        let rec = match record_iter.next_record(&mut perf_file) {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(e) => return Err(perr(&e)),
        };
        let PerfFileRecord::EventRecord { attr_index, record } = rec else {
            continue;
        };
        let parsed = record.parse().map_err(|e| perr(&e))?;
        conv.record(parsed, tracepoints.layouts.get(attr_index))
            .map_err(werr)?;
    }
    if conv.root.is_none() {
        return Err(Error::at(&name, "no workload process in the recording (perf names it 'perf-exec'; was it made by kharden record or perf record -- COMMAND?)"));
    }
    let (mut sum, f, bytes) = conv.finish().map_err(werr)?;
    f.into_inner()
        .map_err(|e| werr(e.into_error()))?
        .sync_all()
        .map_err(werr)?;
    output.commit()?;
    sum.trace_bytes = bytes;
    Ok(sum)
}

/// The recorded tracepoints kharden knows, with the payload layout of each perf attribute.
struct Tracepoints {
    /// By perf attribute index; attributes kharden does not convert are `Kind::Other`.
    pub(super) layouts: Vec<(Kind, Layout)>,
    recorded: Vec<String>,
    gfp_bits: GfpBits,
}

impl Tracepoints {
    fn read(perf_file: &PerfFile, name: &str) -> Result<Tracepoints> {
        let tracing = perf_file
            .feature_section_data(Feature::TRACING_DATA)
            .map(|d| d.to_vec());
        let attr_names: Vec<String> = perf_file
            .event_attributes()
            .iter()
            .map(|a| a.name().unwrap_or("").to_string())
            .collect();
        let mut tps = Tracepoints {
            layouts: Vec::new(),
            recorded: Vec::new(),
            gfp_bits: GfpBits::default(),
        };
        for tp in &attr_names {
            let (kind, fields) = kind_of(tp);
            if kind == Kind::CpuClock {
                tps.layouts.push((kind, Layout { fields: vec![] }));
                continue;
            }
            if kind == Kind::Other {
                tps.layouts.push((kind, Layout { fields: vec![] }));
                continue;
            }
            tps.recorded.push(tp.clone());
            let short = tp.split_once(':').map_or(tp.as_str(), |(_, n)| n);
            let fmt = tracing
                .as_deref()
                .and_then(|d| format_from_tracing_data(d, short))
                .or_else(|| format_from_tracefs(tp))
                .ok_or_else(|| Error::at(name, format!("no format for tracepoint {tp} (neither in the file's tracing data nor in tracefs)")))?;
            let layout = Layout::new(&fmt, fields);
            if let Some(i) = layout.fields.iter().position(|f| f.is_none()) {
                return Err(Error::at(
                    name,
                    format!("tracepoint {tp} has no field '{}'", fields[i]),
                ));
            }
            if kind == Kind::PageAlloc {
                if let Some(b) = GfpBits::from_print_fmt(&fmt.print_fmt) {
                    tps.gfp_bits = b;
                }
            }
            tps.layouts.push((kind, layout));
        }
        if !tps.recorded.iter().any(|t| t == "sched:sched_process_fork")
            || !tps.recorded.iter().any(|t| t == "sched:sched_switch")
        {
            return Err(Error::at(name, "not recorded with sched:sched_process_fork and sched:sched_switch (use kharden record)"));
        }
        Ok(tps)
    }
}

/// The trace's `fd_kinds` line: where descriptor kinds come from.
fn fd_kinds_method(d: &Descriptors) -> String {
    if d.inherited.is_empty() && d.opens.is_empty() {
        return "from the syscalls alone (directories opened with O_DIRECTORY, pipes, sockets and the descriptors calls return; no watch of opens)".to_string();
    }
    let mut s = format!(
        "the command's descriptors at its start from /proc/PID/fd, every open of a path by a fanotify watch of the host's mounts (FAN_OPEN, per thread), then the descriptor tables rebuilt from the syscalls ({} opens seen on the host)",
        d.opens.len()
    );
    if !d.unwatched_mounts.is_empty() {
        s.push_str(&format!(
            "; mounts not watched: {}",
            d.unwatched_mounts.join(", ")
        ));
    }
    s
}

/// The trace's header, from perf.data's feature sections.
fn meta(perf_file: &PerfFile, tps: &Tracepoints, base: u64, command: &[String]) -> Meta {
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
    let text = |s: Option<&str>| s.unwrap_or("").to_string();
    Meta {
        command,
        hostname: text(perf_file.hostname().ok().flatten()),
        kernel: text(perf_file.os_release().ok().flatten()),
        perf_version: text(perf_file.perf_version().ok().flatten()),
        nr_cpus: perf_file
            .nr_cpus()
            .ok()
            .flatten()
            .map_or(0, |n| n.nr_cpus_online),
        base_time_ns: base,
        tracepoints: tps.recorded.clone(),
        gfp_bits: tps.gfp_bits.describe(),
        ..Default::default()
    }
}

/// Per-task state of the conversion.
pub(super) struct Live {
    pub(super) comm: Arc<str>,
    pub(super) exiting: bool,
    /// The syscall the task is in: its number, arguments and perf's time of its sys_enter
    /// (for its exit's descriptor).
    pub(super) in_syscall: Option<(u32, [u64; 6], u64)>,
}

/// One tracepoint sample, as its handler sees it.
pub(super) struct Sample<'a> {
    /// Nanoseconds since the first sample.
    pub(super) t: u64,
    pub(super) tid: u32,
    pub(super) cpu: u32,
    pub(super) raw: &'a [u8],
    pub(super) layout: &'a Layout,
}

/// The state of one conversion: the writer, and the system-wide bookkeeping needed to find
/// and follow the workload's tree (bounded by live threads).
pub(super) struct Conversion<W: Write> {
    w: TraceWriter<W>,
    pub(super) sum: ConvertSummary,
    pub(super) base: u64,
    perf_pid: Option<u32>,
    pub(super) gfp_bits: GfpBits,
    pub(super) parent_of: HashMap<u32, u32>,
    pub(super) tgid_of: HashMap<u32, u32>,
    pub(super) root: Option<u32>,
    root_pending: bool,
    /// The tasks of the tree.
    pub(super) live: HashMap<u32, Live>,
    /// The tree task whose address space a CPU's idle task borrows (lazy TLB).
    pub(super) lazy_owner: HashMap<u32, u32>,
    pub(super) on_cpu: HashMap<u32, u32>,
    pub(super) cpu_of: HashMap<u32, u32>,
    pub(super) last_time: u64,
    pub(super) ever: HashSet<u32>,
    /// Syscall names by number (the descriptor tables follow calls by name).
    pub(super) names: HashMap<u32, String>,
    pub(super) fds: FdTables,
    pub(super) descriptors: Descriptors,
}

impl<W: Write> Conversion<W> {
    fn new(w: TraceWriter<W>, base: u64, perf_pid: Option<u32>, gfp_bits: GfpBits) -> Self {
        Conversion {
            w,
            sum: ConvertSummary::default(),
            base,
            perf_pid,
            gfp_bits,
            parent_of: HashMap::new(),
            tgid_of: HashMap::new(),
            root: None,
            root_pending: false,
            live: HashMap::new(),
            lazy_owner: HashMap::new(),
            on_cpu: HashMap::new(),
            cpu_of: HashMap::new(),
            last_time: 0,
            ever: HashSet::new(),
            names: HashMap::new(),
            fds: FdTables::default(),
            descriptors: Descriptors::default(),
        }
    }

    pub(super) fn emit(&mut self, time_ns: u64, tid: u32, op: Op) -> io::Result<()> {
        if op == Op::Exit {
            self.fds.exit(tid);
        }
        self.w.write(&Event { time_ns, tid, op })
    }

    /// True if the trace still has `tid` alive (a reused tid whose exit was not seen).
    pub(super) fn trace_has_live(&self, tid: u32) -> bool {
        self.w.is_live(tid)
    }

    /// Starts following a task of the tree.
    pub(super) fn adopt(&mut self, tid: u32, comm: Arc<str>) {
        self.live.insert(
            tid,
            Live {
                comm,
                exiting: false,
                in_syscall: None,
            },
        );
        self.ever.insert(tid);
    }

    fn record(&mut self, rec: EventRecord, layout: Option<&(Kind, Layout)>) -> io::Result<()> {
        match rec {
            EventRecord::Fork(f) => self.fork_record(&f),
            EventRecord::Exit(f) => {
                self.exit_record(&f);
                Ok(())
            }
            EventRecord::Comm(c) => {
                let comm = String::from_utf8_lossy(&c.name.as_slice()).to_string();
                self.comm_record(c.pid, c.tid, comm);
                Ok(())
            }
            EventRecord::Lost(l) => {
                self.sum.lost += l.count;
                self.emit(self.last_time, 0, Op::Lost { count: l.count })
            }
            EventRecord::Sample(s) => self.sample(&s, layout),
            _ => Ok(()),
        }
    }

    fn sample(&mut self, s: &SampleRecord, layout: Option<&(Kind, Layout)>) -> io::Result<()> {
        self.sum.perf_samples += 1;
        let Some((kind, layout)) = layout else {
            return Ok(());
        };
        let Some(raw) = &s.raw else { return Ok(()) };
        let raw = raw.as_slice();
        let t = s.timestamp.unwrap_or(self.base).saturating_sub(self.base);
        self.last_time = self.last_time.max(t);
        let tid = s.tid.unwrap_or(-1) as u32;
        let cpu = s.cpu.unwrap_or(0);
        self.start_root(t)?;
        let in_tree = self.live.contains_key(&tid);
        // Not a switch, and not a flush: switch_mm() flushes for the next task after the
        // switch-out, still in the previous task's context.
        if in_tree && !matches!(kind, Kind::Switch | Kind::TlbFlush) {
            self.running_here(t, tid, cpu)?;
        }
        let s = Sample {
            t,
            tid,
            cpu,
            raw: &raw,
            layout,
        };
        match kind {
            Kind::Switch => self.switch(&s),
            Kind::Migrate => self.migrate(&s),
            Kind::Fork => self.fork(&s),
            Kind::Exec if in_tree => self.exec(&s),
            Kind::Exit => {
                self.exit(&s);
                Ok(())
            }
            Kind::SysEnter if in_tree => self.sys_enter(&s),
            Kind::SysExit if in_tree => self.sys_exit(&s),
            Kind::PageAlloc if in_tree => self.page_alloc(&s),
            Kind::PageFree if in_tree => self.page_free(&s),
            Kind::TlbFlush => self.tlb_flush(&s, in_tree),
            Kind::FaultUser | Kind::FaultKernel if in_tree => {
                self.page_fault(&s, *kind == Kind::FaultUser)
            }
            _ => Ok(()),
        }
    }

    /// The workload's root task enters the trace at the first sample after perf named it.
    fn start_root(&mut self, t: u64) -> io::Result<()> {
        if !self.root_pending {
            return Ok(());
        }
        let r = self.root.expect("pending root is set");
        let comm: Arc<str> = Arc::from("perf-exec");
        self.emit(
            t,
            r,
            Op::TaskNew {
                pid: r,
                parent: None,
                comm: comm.clone(),
            },
        )?;
        self.adopt(r, comm);
        let d = std::mem::take(&mut self.descriptors);
        self.fds.root(r, &d);
        self.root_pending = false;
        Ok(())
    }

    /// Finds the workload's root: the task perf renames `perf-exec` before exec.
    pub(super) fn maybe_root(&mut self, pid: i32, tid: u32, comm: &str) {
        if self.root.is_none() && comm == "perf-exec" && pid as u32 == tid {
            let ok = match self.perf_pid {
                Some(pp) => self.parent_of.get(&tid).map_or(true, |&p| p == pp),
                None => true,
            };
            if ok {
                self.root = Some(tid);
                self.root_pending = true;
            }
        }
    }

    /// Ends the trace: tasks that called exit but whose last switch-out was not recorded
    /// end with it.
    fn finish(mut self) -> io::Result<(ConvertSummary, W, u64)> {
        let mut exiting: Vec<u32> = self
            .live
            .iter()
            .filter(|(_, l)| l.exiting)
            .map(|(&t, _)| t)
            .collect();
        exiting.sort_unstable();
        for t in exiting {
            self.emit(self.last_time, t, Op::Exit)?;
        }
        self.sum.events = self.w.events();
        self.sum.tasks = self.ever.len() as u64;
        self.sum.fds = self.fds.counts;
        let (f, bytes) = self.w.finish()?;
        Ok((self.sum, f, bytes))
    }
}
