//! kharden's trace format: a magic and version header, a JSON metadata block, then a stream
//! of compact records (varint-encoded deltas) ending in an `End` record. See FORMAT.md.
//!
//! [`TraceWriter`] writes events; [`TraceReader`] is an iterator over them. The reader keeps
//! only the live tasks, the string table and a fixed-size buffer, so its memory is bounded by
//! what is alive at one time, not by the trace's length.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::sync::Arc;

pub const MAGIC: &[u8; 8] = b"KHTRACE\0";
pub const VERSION: u16 = 1;

/// Limits a reader enforces so that no input can make it allocate without bound.
pub const MAX_META_BYTES: u32 = 1 << 20;
pub const MAX_STRING_BYTES: u64 = 4096;
pub const MAX_STRING_TABLE_BYTES: u64 = 64 << 20;
pub const MAX_SLOTS: u64 = 1 << 20;
pub const MAX_CPU: u64 = 1 << 16;

/// Record opcodes (FORMAT.md, "Records").
mod op {
    pub const END: u8 = 0x00;
    pub const STR_DEF: u8 = 0x01;
    pub const SYS_NAME: u8 = 0x02;
    pub const TASK_NEW: u8 = 0x03;
    pub const EXEC: u8 = 0x04;
    pub const EXIT: u8 = 0x05;
    pub const SWITCH_IN: u8 = 0x06;
    pub const SWITCH_OUT: u8 = 0x07;
    pub const MIGRATE: u8 = 0x08;
    pub const SYS_ENTER: u8 = 0x09;
    pub const SYS_EXIT: u8 = 0x0a;
    pub const PAGE_ALLOC: u8 = 0x0b;
    pub const PAGE_FREE: u8 = 0x0c;
    pub const TLB_FLUSH: u8 = 0x0d;
    pub const PAGE_FAULT: u8 = 0x0e;
    pub const LOST: u8 = 0x0f;
}

fn op_name(o: u8) -> &'static str {
    match o {
        op::END => "End",
        op::STR_DEF => "StrDef",
        op::SYS_NAME => "SysName",
        op::TASK_NEW => "TaskNew",
        op::EXEC => "Exec",
        op::EXIT => "Exit",
        op::SWITCH_IN => "SwitchIn",
        op::SWITCH_OUT => "SwitchOut",
        op::MIGRATE => "Migrate",
        op::SYS_ENTER => "SysEnter",
        op::SYS_EXIT => "SysExit",
        op::PAGE_ALLOC => "PageAlloc",
        op::PAGE_FREE => "PageFree",
        op::TLB_FLUSH => "TlbFlush",
        op::PAGE_FAULT => "PageFault",
        op::LOST => "Lost",
        _ => "unknown",
    }
}

/// What the recording was: free-form facts kept in the header as JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// The recorded command line.
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub hostname: String,
    /// Kernel release the trace was recorded on (`uname -r`).
    #[serde(default)]
    pub kernel: String,
    #[serde(default)]
    pub perf_version: String,
    #[serde(default)]
    pub nr_cpus: u32,
    /// perf's timestamp (CLOCK_MONOTONIC ns) of time 0 of the trace.
    #[serde(default)]
    pub base_time_ns: u64,
    /// The tracepoints perf recorded.
    #[serde(default)]
    pub tracepoints: Vec<String>,
    /// How GFP flags were decoded into classes (bit positions, and where they came from).
    #[serde(default)]
    pub gfp_bits: String,
}

/// The allocation classes the simulator's page allocator knows (FORMAT.md, "GFP classes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GfpClass {
    /// Anonymous user memory (zeroed anon pages, COW copies, THP, shmem).
    UserAnon,
    /// Page cache (file reads, readahead, writes).
    PageCache,
    /// Everything not movable: slab, page tables, kernel stacks, pipe buffers, ...
    Kernel,
}

impl GfpClass {
    pub const ALL: [GfpClass; 3] = [GfpClass::UserAnon, GfpClass::PageCache, GfpClass::Kernel];
    pub fn code(self) -> u8 {
        match self {
            GfpClass::UserAnon => 0,
            GfpClass::PageCache => 1,
            GfpClass::Kernel => 2,
        }
    }
    pub fn from_code(c: u64) -> Option<GfpClass> {
        match c {
            0 => Some(GfpClass::UserAnon),
            1 => Some(GfpClass::PageCache),
            2 => Some(GfpClass::Kernel),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            GfpClass::UserAnon => "user-anon",
            GfpClass::PageCache => "page-cache",
            GfpClass::Kernel => "kernel",
        }
    }
}

/// Linux's `enum tlb_flush_reason` (include/linux/mm_types.h), as recorded by `tlb:tlb_flush`.
pub fn tlb_flush_reason_name(reason: u32) -> &'static str {
    match reason {
        0 => "flush on task switch",
        1 => "remote shootdown",
        2 => "local shootdown",
        3 => "local MM shootdown",
        4 => "remote IPI send",
        5 => "remote wrong CPU",
        _ => "unknown reason",
    }
}

/// `prev_state` of `sched_switch` as the kernel reports it: 0 means the task was preempted
/// while runnable; other values are TASK_* bits (1 = S, 2 = D, 0x10/0x20 = X/Z, ...).
pub fn task_state_letter(state: u64) -> char {
    if state == 0 {
        return 'R';
    }
    // Lowest set bit, in the kernel's TASK_REPORT order "SDTtXZPI".
    let letters = ['S', 'D', 'T', 't', 'X', 'Z', 'P', 'I'];
    let i = state.trailing_zeros() as usize;
    letters.get(i).copied().unwrap_or('?')
}

/// One thing a task did. Strings are shared (`Arc<str>`); nothing else allocates.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// The task appeared: forked from `parent` (a tid; `None` for the recorded command itself).
    /// `pid` is its thread-group id: `pid != tid` means a thread sharing its group's mm.
    TaskNew {
        pid: u32,
        parent: Option<u32>,
        comm: Arc<str>,
    },
    /// `execve` succeeded with this file name.
    Exec {
        filename: Arc<str>,
    },
    /// The task is gone (recorded at its last switch-out; nothing follows for this tid).
    Exit,
    /// The task started running on `cpu`.
    SwitchIn {
        cpu: u32,
    },
    /// The task stopped running; `state` is sched_switch's `prev_state` (0 = preempted).
    SwitchOut {
        state: u64,
    },
    /// The scheduler moved the task.
    Migrate {
        from: u32,
        to: u32,
    },
    SysEnter {
        nr: u32,
    },
    SysExit {
        nr: u32,
        ret: i64,
    },
    /// Pages allocated in the task's context (`kmem:mm_page_alloc`): 2^order pages at `pfn`.
    PageAlloc {
        pfn: u64,
        order: u8,
        gfp: u64,
        class: GfpClass,
    },
    PageFree {
        pfn: u64,
        order: u8,
    },
    /// `tlb:tlb_flush` on `cpu` (the task was running there, or it was the CPU's lazy-TLB mm
    /// owner while idle). `pages == u64::MAX` is TLB_FLUSH_ALL.
    TlbFlush {
        cpu: u32,
        reason: u32,
        pages: u64,
    },
    /// `exceptions:page_fault_{user,kernel}`.
    PageFault {
        user: bool,
        address: u64,
        error_code: u64,
    },
    /// perf lost this many events (ring buffer overflow); `tid` is 0.
    Lost {
        count: u64,
    },
}

/// One record of a trace. `time_ns` counts from the trace's start (`Meta::base_time_ns`).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub time_ns: u64,
    pub tid: u32,
    pub op: Op,
}

// ---------------------------------------------------------------------------------------------
// Varints

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

// ---------------------------------------------------------------------------------------------
// Writer

/// Writes a trace. Tasks must be introduced by `TaskNew` before anything else names them.
pub struct TraceWriter<W: Write> {
    out: W,
    buf: Vec<u8>,
    prev_time: u64,
    prev_pfn: u64,
    prev_addr: u64,
    strings: HashMap<Arc<str>, u64>,
    slots: HashMap<u32, u64>,
    free_slots: std::collections::BinaryHeap<std::cmp::Reverse<u64>>,
    next_slot: u64,
    sys_defined: HashMap<u32, ()>,
    sys_names: HashMap<u32, String>,
    records: u64,
    events: u64,
    bytes: u64,
}

impl<W: Write> TraceWriter<W> {
    pub fn new(mut out: W, meta: &Meta) -> io::Result<Self> {
        let json = serde_json::to_vec(meta).map_err(io::Error::other)?;
        out.write_all(MAGIC)?;
        out.write_all(&VERSION.to_le_bytes())?;
        out.write_all(&(json.len() as u32).to_le_bytes())?;
        out.write_all(&json)?;
        Ok(TraceWriter {
            out,
            buf: Vec::with_capacity(1 << 16),
            prev_time: 0,
            prev_pfn: 0,
            prev_addr: 0,
            strings: HashMap::new(),
            slots: HashMap::new(),
            free_slots: Default::default(),
            next_slot: 0,
            sys_defined: HashMap::new(),
            sys_names: HashMap::new(),
            records: 0,
            events: 0,
            bytes: (MAGIC.len() + 6 + json.len()) as u64,
        })
    }

    /// Names syscall `nr`; the name is written before the first record that uses it.
    pub fn set_syscall_name(&mut self, nr: u32, name: &str) {
        self.sys_names.insert(nr, name.to_string());
    }

    /// True while `tid` has been introduced and has not exited.
    pub fn is_live(&self, tid: u32) -> bool {
        self.slots.contains_key(&tid)
    }

    /// Records written so far, definitions (strings, syscall names) included.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Events written so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    fn string(&mut self, s: &Arc<str>) -> u64 {
        if let Some(&id) = self.strings.get(s) {
            return id;
        }
        let id = self.strings.len() as u64;
        let bytes = &s.as_bytes()[..s.len().min(MAX_STRING_BYTES as usize)];
        self.buf.push(op::STR_DEF);
        put_varint(&mut self.buf, bytes.len() as u64);
        self.buf.extend_from_slice(bytes);
        self.records += 1;
        self.strings.insert(s.clone(), id);
        id
    }

    fn syscall(&mut self, nr: u32) {
        if self.sys_defined.contains_key(&nr) {
            return;
        }
        self.sys_defined.insert(nr, ());
        if let Some(name) = self.sys_names.get(&nr).cloned() {
            let id = self.string(&Arc::from(name.as_str()));
            self.buf.push(op::SYS_NAME);
            put_varint(&mut self.buf, nr as u64);
            put_varint(&mut self.buf, id);
            self.records += 1;
        }
    }

    fn head(&mut self, code: u8, time: u64) {
        let t = time.max(self.prev_time);
        self.buf.push(code);
        put_varint(&mut self.buf, t - self.prev_time);
        self.prev_time = t;
        self.records += 1;
        self.events += 1;
    }

    fn slot_of(&self, tid: u32) -> io::Result<u64> {
        self.slots.get(&tid).copied().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("task {tid} used before TaskNew"),
            )
        })
    }

    /// Appends one event. Times earlier than the previous event's are written as equal to it.
    pub fn write(&mut self, ev: &Event) -> io::Result<()> {
        let b = |w: &mut Self, v: u64| put_varint(&mut w.buf, v);
        match &ev.op {
            Op::TaskNew { pid, parent, comm } => {
                if self.slots.contains_key(&ev.tid) {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("task {} introduced twice", ev.tid),
                    ));
                }
                let sid = self.string(comm);
                let slot = match self.free_slots.pop() {
                    Some(std::cmp::Reverse(s)) => s,
                    None => {
                        self.next_slot += 1;
                        self.next_slot - 1
                    }
                };
                self.slots.insert(ev.tid, slot);
                self.head(op::TASK_NEW, ev.time_ns);
                b(self, slot);
                b(self, ev.tid as u64);
                b(self, *pid as u64);
                b(self, parent.map_or(0, |p| p as u64 + 1));
                b(self, sid);
            }
            Op::Exec { filename } => {
                let slot = self.slot_of(ev.tid)?;
                let sid = self.string(filename);
                self.head(op::EXEC, ev.time_ns);
                b(self, slot);
                b(self, sid);
            }
            Op::Exit => {
                let slot = self.slot_of(ev.tid)?;
                self.head(op::EXIT, ev.time_ns);
                b(self, slot);
                self.slots.remove(&ev.tid);
                self.free_slots.push(std::cmp::Reverse(slot));
            }
            Op::SwitchIn { cpu } => {
                let slot = self.slot_of(ev.tid)?;
                self.head(op::SWITCH_IN, ev.time_ns);
                b(self, slot);
                b(self, *cpu as u64);
            }
            Op::SwitchOut { state } => {
                let slot = self.slot_of(ev.tid)?;
                self.head(op::SWITCH_OUT, ev.time_ns);
                b(self, slot);
                b(self, *state);
            }
            Op::Migrate { from, to } => {
                let slot = self.slot_of(ev.tid)?;
                self.head(op::MIGRATE, ev.time_ns);
                b(self, slot);
                b(self, *from as u64);
                b(self, *to as u64);
            }
            Op::SysEnter { nr } => {
                let slot = self.slot_of(ev.tid)?;
                self.syscall(*nr);
                self.head(op::SYS_ENTER, ev.time_ns);
                b(self, slot);
                b(self, *nr as u64);
            }
            Op::SysExit { nr, ret } => {
                let slot = self.slot_of(ev.tid)?;
                self.syscall(*nr);
                self.head(op::SYS_EXIT, ev.time_ns);
                b(self, slot);
                b(self, *nr as u64);
                b(self, zigzag(*ret));
            }
            Op::PageAlloc {
                pfn,
                order,
                gfp,
                class,
            } => {
                let slot = self.slot_of(ev.tid)?;
                self.head(op::PAGE_ALLOC, ev.time_ns);
                b(self, slot);
                b(self, zigzag(pfn.wrapping_sub(self.prev_pfn) as i64));
                self.prev_pfn = *pfn;
                b(self, *order as u64);
                b(self, *gfp);
                b(self, class.code() as u64);
            }
            Op::PageFree { pfn, order } => {
                let slot = self.slot_of(ev.tid)?;
                self.head(op::PAGE_FREE, ev.time_ns);
                b(self, slot);
                b(self, zigzag(pfn.wrapping_sub(self.prev_pfn) as i64));
                self.prev_pfn = *pfn;
                b(self, *order as u64);
            }
            Op::TlbFlush { cpu, reason, pages } => {
                let slot = self.slot_of(ev.tid)?;
                self.head(op::TLB_FLUSH, ev.time_ns);
                b(self, slot);
                b(self, *cpu as u64);
                b(self, *reason as u64);
                b(self, pages.wrapping_add(1));
            }
            Op::PageFault {
                user,
                address,
                error_code,
            } => {
                let slot = self.slot_of(ev.tid)?;
                self.head(op::PAGE_FAULT, ev.time_ns);
                b(self, slot);
                b(self, if *user { 0 } else { 1 });
                b(self, zigzag(address.wrapping_sub(self.prev_addr) as i64));
                self.prev_addr = *address;
                b(self, *error_code);
            }
            Op::Lost { count } => {
                self.head(op::LOST, ev.time_ns);
                b(self, *count);
            }
        }
        if self.buf.len() >= 1 << 16 {
            self.flush_buf()?;
        }
        Ok(())
    }

    fn flush_buf(&mut self) -> io::Result<()> {
        self.out.write_all(&self.buf)?;
        self.bytes += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Writes the `End` record and returns the output and the trace's size in bytes.
    pub fn finish(mut self) -> io::Result<(W, u64)> {
        let n = self.records;
        self.buf.push(op::END);
        put_varint(&mut self.buf, n);
        self.flush_buf()?;
        self.out.flush()?;
        Ok((self.out, self.bytes))
    }
}

// ---------------------------------------------------------------------------------------------
// Reader

/// Why a trace could not be read. Displays as one line naming the trace and the byte offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceError {
    Io {
        name: String,
        msg: String,
    },
    BadMagic {
        name: String,
    },
    Version {
        name: String,
        found: u16,
    },
    Truncated {
        name: String,
        offset: u64,
        what: &'static str,
    },
    Malformed {
        name: String,
        offset: u64,
        msg: String,
    },
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::Io { name, msg } => write!(f, "{name}: cannot read: {msg}"),
            TraceError::BadMagic { name } => write!(
                f,
                "{name}: not a kharden trace (bad magic; expected \"KHTRACE\\0\")"
            ),
            TraceError::Version { name, found } => {
                write!(f, "{name}: trace format version {found} is not supported (this kharden reads version {VERSION})")
            }
            TraceError::Truncated { name, offset, what } => {
                write!(f, "{name}: truncated at byte {offset} (inside {what})")
            }
            TraceError::Malformed { name, offset, msg } => {
                write!(f, "{name}: malformed record at byte {offset}: {msg}")
            }
        }
    }
}

impl std::error::Error for TraceError {}

impl From<TraceError> for kharden::Error {
    fn from(e: TraceError) -> Self {
        kharden::Error::new(e.to_string())
    }
}

struct Task {
    tid: u32,
}

/// Streams the events of a trace. Memory: live tasks + string table + a 64 KiB buffer.
pub struct TraceReader<R: Read> {
    name: String,
    input: R,
    buf: Box<[u8]>,
    pos: usize,
    end: usize,
    /// Bytes consumed before `buf[0]`.
    base: u64,
    eof: bool,
    meta: Meta,
    strings: Vec<Arc<str>>,
    string_bytes: u64,
    sys_names: HashMap<u32, Arc<str>>,
    slots: Vec<Option<Task>>,
    live: usize,
    time: u64,
    prev_pfn: u64,
    prev_addr: u64,
    records: u64,
    done: bool,
    failed: bool,
    /// Offset and name of the record being decoded (for error messages).
    rec_start: u64,
    rec_what: &'static str,
}

impl<R: Read> TraceReader<R> {
    /// Reads and checks the header. `name` (usually the file path) starts every error message.
    pub fn new(input: R, name: &str) -> Result<Self, TraceError> {
        let mut r = TraceReader {
            name: name.to_string(),
            input,
            buf: vec![0u8; 1 << 16].into_boxed_slice(),
            pos: 0,
            end: 0,
            base: 0,
            eof: false,
            meta: Meta::default(),
            strings: Vec::new(),
            string_bytes: 0,
            sys_names: HashMap::new(),
            slots: Vec::new(),
            live: 0,
            time: 0,
            prev_pfn: 0,
            prev_addr: 0,
            records: 0,
            done: false,
            failed: false,
            rec_start: 0,
            rec_what: "the header",
        };
        let mut magic = [0u8; 8];
        for (i, m) in magic.iter_mut().enumerate() {
            match r.byte_opt()? {
                Some(b) => *m = b,
                None if i == 0 => {
                    return Err(TraceError::BadMagic {
                        name: r.name.clone(),
                    })
                }
                None => {
                    // A short file that starts like a trace is a truncated trace.
                    return if MAGIC.starts_with(&magic[..i]) {
                        Err(r.truncated())
                    } else {
                        Err(TraceError::BadMagic {
                            name: r.name.clone(),
                        })
                    };
                }
            }
        }
        if &magic != MAGIC {
            return Err(TraceError::BadMagic {
                name: r.name.clone(),
            });
        }
        let version = u16::from_le_bytes([r.byte()?, r.byte()?]);
        if version != VERSION {
            return Err(TraceError::Version {
                name: r.name.clone(),
                found: version,
            });
        }
        let len = u32::from_le_bytes([r.byte()?, r.byte()?, r.byte()?, r.byte()?]);
        if len > MAX_META_BYTES {
            return Err(r.malformed(format!(
                "metadata of {len} bytes (at most {MAX_META_BYTES})"
            )));
        }
        let mut json = Vec::with_capacity(len as usize);
        for _ in 0..len {
            json.push(r.byte()?);
        }
        r.meta = serde_json::from_slice(&json)
            .map_err(|e| r.malformed(format!("metadata is not valid JSON: {e}")))?;
        Ok(r)
    }

    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// The name of syscall `nr` as the trace recorded it.
    pub fn syscall_name(&self, nr: u32) -> Option<&Arc<str>> {
        self.sys_names.get(&nr)
    }

    /// Tasks alive at this point of the stream.
    pub fn live_tasks(&self) -> usize {
        self.live
    }

    /// Bytes consumed so far.
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    fn truncated(&self) -> TraceError {
        TraceError::Truncated {
            name: self.name.clone(),
            offset: self.offset(),
            what: self.rec_what,
        }
    }

    fn malformed(&self, msg: String) -> TraceError {
        TraceError::Malformed {
            name: self.name.clone(),
            offset: self.rec_start,
            msg,
        }
    }

    fn refill(&mut self) -> Result<bool, TraceError> {
        if self.eof {
            return Ok(false);
        }
        self.base += self.end as u64;
        self.pos = 0;
        self.end = 0;
        loop {
            match self.input.read(&mut self.buf) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.end = n;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(TraceError::Io {
                        name: self.name.clone(),
                        msg: e.to_string(),
                    })
                }
            }
        }
    }

    #[inline]
    fn byte_opt(&mut self) -> Result<Option<u8>, TraceError> {
        if self.pos == self.end && !self.refill()? {
            return Ok(None);
        }
        let b = self.buf[self.pos];
        self.pos += 1;
        Ok(Some(b))
    }

    #[inline]
    fn byte(&mut self) -> Result<u8, TraceError> {
        if self.pos < self.end {
            let b = self.buf[self.pos];
            self.pos += 1;
            return Ok(b);
        }
        self.byte_opt()?.ok_or_else(|| self.truncated())
    }

    #[inline]
    fn varint(&mut self) -> Result<u64, TraceError> {
        let mut v = 0u64;
        let mut shift = 0u32;
        loop {
            let b = self.byte()?;
            if shift == 63 && b > 1 {
                return Err(self.malformed("varint overflows 64 bits".into()));
            }
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
            shift += 7;
            if shift > 63 {
                return Err(self.malformed("varint longer than 10 bytes".into()));
            }
        }
    }

    fn u32_field(&mut self, what: &str) -> Result<u32, TraceError> {
        let v = self.varint()?;
        u32::try_from(v).map_err(|_| self.malformed(format!("{what} {v} does not fit in 32 bits")))
    }

    fn cpu(&mut self) -> Result<u32, TraceError> {
        let v = self.varint()?;
        if v >= MAX_CPU {
            return Err(self.malformed(format!("cpu {v} out of range (< {MAX_CPU})")));
        }
        Ok(v as u32)
    }

    fn string_ref(&mut self) -> Result<Arc<str>, TraceError> {
        let id = self.varint()?;
        match self.strings.get(id as usize) {
            Some(s) => Ok(s.clone()),
            None => Err(self.malformed(format!(
                "string {id} used before it was defined ({} defined)",
                self.strings.len()
            ))),
        }
    }

    fn task(&mut self) -> Result<u32, TraceError> {
        let slot = self.varint()?;
        match self.slots.get(slot as usize) {
            Some(Some(t)) => Ok(t.tid),
            _ => Err(self.malformed(format!("task slot {slot} is not live"))),
        }
    }

    fn next_event(&mut self) -> Result<Option<Event>, TraceError> {
        loop {
            self.rec_start = self.offset();
            self.rec_what = "a record";
            let code = match self.byte_opt()? {
                Some(c) => c,
                None => {
                    return Err(TraceError::Truncated {
                        name: self.name.clone(),
                        offset: self.offset(),
                        what: "the record stream (no End record)",
                    })
                }
            };
            self.rec_what = op_name(code);
            match code {
                op::END => {
                    let n = self.varint()?;
                    if n != self.records {
                        return Err(self.malformed(format!(
                            "End says {n} records, the trace has {}",
                            self.records
                        )));
                    }
                    if self.byte_opt()?.is_some() {
                        return Err(self.malformed("bytes after the End record".into()));
                    }
                    return Ok(None);
                }
                op::STR_DEF => {
                    let len = self.varint()?;
                    if len > MAX_STRING_BYTES {
                        return Err(self.malformed(format!(
                            "string of {len} bytes (at most {MAX_STRING_BYTES})"
                        )));
                    }
                    if self.string_bytes + len > MAX_STRING_TABLE_BYTES {
                        return Err(self.malformed(format!(
                            "string table exceeds {MAX_STRING_TABLE_BYTES} bytes"
                        )));
                    }
                    let mut s = Vec::with_capacity(len as usize);
                    for _ in 0..len {
                        s.push(self.byte()?);
                    }
                    let s = String::from_utf8(s)
                        .map_err(|_| self.malformed("string is not UTF-8".into()))?;
                    self.string_bytes += len;
                    self.strings.push(Arc::from(s));
                    self.records += 1;
                    continue;
                }
                op::SYS_NAME => {
                    let nr = self.u32_field("syscall number")?;
                    let s = self.string_ref()?;
                    self.sys_names.insert(nr, s);
                    self.records += 1;
                    continue;
                }
                op::TASK_NEW..=op::LOST => {}
                _ => return Err(self.malformed(format!("unknown record type 0x{code:02x}"))),
            }
            let dt = self.varint()?;
            let time = self
                .time
                .checked_add(dt)
                .ok_or_else(|| self.malformed("time overflows 64 bits".into()))?;
            let (tid, op) = match code {
                op::TASK_NEW => {
                    let slot = self.varint()?;
                    if slot >= MAX_SLOTS {
                        return Err(self
                            .malformed(format!("task slot {slot} out of range (< {MAX_SLOTS})")));
                    }
                    let tid = self.u32_field("tid")?;
                    let pid = self.u32_field("pid")?;
                    let parent = self.varint()?;
                    let parent = match parent {
                        0 => None,
                        p => Some(u32::try_from(p - 1).map_err(|_| {
                            self.malformed(format!("parent {} does not fit in 32 bits", p - 1))
                        })?),
                    };
                    let comm = self.string_ref()?;
                    let s = slot as usize;
                    if s >= self.slots.len() {
                        self.slots.resize_with(s + 1, || None);
                    }
                    if self.slots[s].is_some() {
                        return Err(self.malformed(format!("task slot {slot} is already live")));
                    }
                    self.slots[s] = Some(Task { tid });
                    self.live += 1;
                    (tid, Op::TaskNew { pid, parent, comm })
                }
                op::EXEC => {
                    let tid = self.task()?;
                    (
                        tid,
                        Op::Exec {
                            filename: self.string_ref()?,
                        },
                    )
                }
                op::EXIT => {
                    let slot = self.varint()?;
                    let tid = match self.slots.get_mut(slot as usize).and_then(|t| t.take()) {
                        Some(t) => t.tid,
                        None => return Err(self.malformed(format!("task slot {slot} is not live"))),
                    };
                    self.live -= 1;
                    while matches!(self.slots.last(), Some(None)) {
                        self.slots.pop();
                    }
                    (tid, Op::Exit)
                }
                op::SWITCH_IN => {
                    let tid = self.task()?;
                    (tid, Op::SwitchIn { cpu: self.cpu()? })
                }
                op::SWITCH_OUT => {
                    let tid = self.task()?;
                    (
                        tid,
                        Op::SwitchOut {
                            state: self.varint()?,
                        },
                    )
                }
                op::MIGRATE => {
                    let tid = self.task()?;
                    let from = self.cpu()?;
                    (
                        tid,
                        Op::Migrate {
                            from,
                            to: self.cpu()?,
                        },
                    )
                }
                op::SYS_ENTER => {
                    let tid = self.task()?;
                    (
                        tid,
                        Op::SysEnter {
                            nr: self.u32_field("syscall number")?,
                        },
                    )
                }
                op::SYS_EXIT => {
                    let tid = self.task()?;
                    let nr = self.u32_field("syscall number")?;
                    (
                        tid,
                        Op::SysExit {
                            nr,
                            ret: unzigzag(self.varint()?),
                        },
                    )
                }
                op::PAGE_ALLOC => {
                    let tid = self.task()?;
                    let pfn = self.prev_pfn.wrapping_add(unzigzag(self.varint()?) as u64);
                    self.prev_pfn = pfn;
                    let order = self.order()?;
                    let gfp = self.varint()?;
                    let c = self.varint()?;
                    let class = GfpClass::from_code(c)
                        .ok_or_else(|| self.malformed(format!("GFP class {c} unknown (0-2)")))?;
                    (
                        tid,
                        Op::PageAlloc {
                            pfn,
                            order,
                            gfp,
                            class,
                        },
                    )
                }
                op::PAGE_FREE => {
                    let tid = self.task()?;
                    let pfn = self.prev_pfn.wrapping_add(unzigzag(self.varint()?) as u64);
                    self.prev_pfn = pfn;
                    (
                        tid,
                        Op::PageFree {
                            pfn,
                            order: self.order()?,
                        },
                    )
                }
                op::TLB_FLUSH => {
                    let tid = self.task()?;
                    let cpu = self.cpu()?;
                    let reason = self.u32_field("flush reason")?;
                    let pages = self.varint()?.wrapping_sub(1);
                    (tid, Op::TlbFlush { cpu, reason, pages })
                }
                op::PAGE_FAULT => {
                    let tid = self.task()?;
                    let user = match self.varint()? {
                        0 => true,
                        1 => false,
                        k => {
                            return Err(self.malformed(format!(
                                "page fault kind {k} unknown (0 user, 1 kernel)"
                            )))
                        }
                    };
                    let address = self.prev_addr.wrapping_add(unzigzag(self.varint()?) as u64);
                    self.prev_addr = address;
                    (
                        tid,
                        Op::PageFault {
                            user,
                            address,
                            error_code: self.varint()?,
                        },
                    )
                }
                op::LOST => (
                    0,
                    Op::Lost {
                        count: self.varint()?,
                    },
                ),
                _ => unreachable!("checked above"),
            };
            self.time = time;
            self.records += 1;
            return Ok(Some(Event {
                time_ns: time,
                tid,
                op,
            }));
        }
    }

    fn order(&mut self) -> Result<u8, TraceError> {
        let v = self.varint()?;
        if v > 63 {
            return Err(self.malformed(format!("page order {v} out of range (0-63)")));
        }
        Ok(v as u8)
    }
}

impl<R: Read> Iterator for TraceReader<R> {
    type Item = Result<Event, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.failed {
            return None;
        }
        match self.next_event() {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Opens a trace file for streaming.
pub fn open(path: &std::path::Path) -> Result<TraceReader<std::fs::File>, TraceError> {
    let name = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| TraceError::Io {
        name: name.clone(),
        msg: e.to_string(),
    })?;
    TraceReader::new(f, &name)
}

/// Reads `data` as a trace to its end or its first error (the fuzz target's body). Returns
/// the number of events read. Never panics.
#[doc(hidden)]
pub fn fuzz_read(data: &[u8]) -> u64 {
    let Ok(r) = TraceReader::new(data, "fuzz") else {
        return 0;
    };
    let mut n = 0;
    for e in r {
        match e {
            Ok(_) => n += 1,
            Err(e) => {
                let msg = e.to_string();
                assert!(!msg.contains('\n'), "error message spans lines: {msg}");
                break;
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fuzz target's body on random and garbled inputs, under stable Rust: mutations of a
    /// valid trace (byte flips, truncations, insertions) and random byte strings.
    #[test]
    fn garbled_inputs_never_panic() {
        let good = encode(&sample_events());
        assert_eq!(fuzz_read(&good), sample_events().len() as u64);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let mut v = good.clone();
            match rnd() % 4 {
                0 => {
                    for _ in 0..1 + rnd() % 4 {
                        let i = (rnd() as usize) % v.len();
                        v[i] = rnd() as u8;
                    }
                }
                1 => v.truncate((rnd() as usize) % v.len()),
                2 => {
                    let i = (rnd() as usize) % v.len();
                    v.insert(i, rnd() as u8);
                }
                _ => {
                    // Keep the header, randomise the records.
                    let hdr = 14 + u32::from_le_bytes(good[10..14].try_into().unwrap()) as usize;
                    v.truncate(hdr);
                    for _ in 0..rnd() % 64 {
                        v.push(rnd() as u8);
                    }
                }
            }
            fuzz_read(&v);
        }
        for len in 0..64 {
            let v: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
            fuzz_read(&v);
        }
    }

    pub(crate) fn sample_events() -> Vec<Event> {
        let c: Arc<str> = Arc::from("make");
        vec![
            Event {
                time_ns: 10,
                tid: 100,
                op: Op::TaskNew {
                    pid: 100,
                    parent: None,
                    comm: c.clone(),
                },
            },
            Event {
                time_ns: 12,
                tid: 100,
                op: Op::SwitchIn { cpu: 1 },
            },
            Event {
                time_ns: 15,
                tid: 100,
                op: Op::Exec {
                    filename: Arc::from("/usr/bin/make"),
                },
            },
            Event {
                time_ns: 20,
                tid: 100,
                op: Op::SysEnter { nr: 57 },
            },
            Event {
                time_ns: 21,
                tid: 101,
                op: Op::TaskNew {
                    pid: 101,
                    parent: Some(100),
                    comm: c.clone(),
                },
            },
            Event {
                time_ns: 22,
                tid: 100,
                op: Op::SysExit { nr: 57, ret: 101 },
            },
            Event {
                time_ns: 23,
                tid: 100,
                op: Op::SysExit { nr: 0, ret: -2 },
            },
            Event {
                time_ns: 30,
                tid: 101,
                op: Op::PageAlloc {
                    pfn: 0x12345,
                    order: 0,
                    gfp: 0x140dca,
                    class: GfpClass::UserAnon,
                },
            },
            Event {
                time_ns: 31,
                tid: 101,
                op: Op::PageFree {
                    pfn: 0x12000,
                    order: 2,
                },
            },
            Event {
                time_ns: 32,
                tid: 101,
                op: Op::TlbFlush {
                    cpu: 0,
                    reason: 1,
                    pages: u64::MAX,
                },
            },
            Event {
                time_ns: 33,
                tid: 101,
                op: Op::PageFault {
                    user: true,
                    address: 0x7fff_0000_1000,
                    error_code: 6,
                },
            },
            Event {
                time_ns: 34,
                tid: 101,
                op: Op::PageFault {
                    user: false,
                    address: 0x1000,
                    error_code: 2,
                },
            },
            Event {
                time_ns: 35,
                tid: 100,
                op: Op::Migrate { from: 1, to: 0 },
            },
            Event {
                time_ns: 36,
                tid: 0,
                op: Op::Lost { count: 7 },
            },
            Event {
                time_ns: 40,
                tid: 101,
                op: Op::SwitchOut { state: 0x10 },
            },
            Event {
                time_ns: 40,
                tid: 101,
                op: Op::Exit,
            },
            Event {
                time_ns: 41,
                tid: 102,
                op: Op::TaskNew {
                    pid: 100,
                    parent: Some(100),
                    comm: c,
                },
            },
            Event {
                time_ns: 50,
                tid: 100,
                op: Op::SwitchOut { state: 1 },
            },
        ]
    }

    pub(crate) fn encode(events: &[Event]) -> Vec<u8> {
        let meta = Meta {
            command: vec!["make".into()],
            nr_cpus: 2,
            ..Meta::default()
        };
        let mut w = TraceWriter::new(Vec::new(), &meta).unwrap();
        w.set_syscall_name(57, "fork");
        w.set_syscall_name(0, "read");
        for e in events {
            w.write(e).unwrap();
        }
        w.finish().unwrap().0
    }

    #[test]
    fn round_trip() {
        let evs = sample_events();
        let bytes = encode(&evs);
        let mut r = TraceReader::new(&bytes[..], "t").unwrap();
        assert_eq!(r.meta().nr_cpus, 2);
        let got: Vec<Event> = r.by_ref().map(|e| e.unwrap()).collect();
        assert_eq!(got, evs);
        assert_eq!(r.syscall_name(57).map(|s| &**s), Some("fork"));
        // 102 reused 101's slot; 100 and 102 are still live at the end.
        assert_eq!(r.live_tasks(), 2);
    }

    #[test]
    fn varints_and_zigzag() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            u32::MAX as u64,
            u64::MAX - 1,
            u64::MAX,
        ] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            let empty = encode(&[]);
            let mut r = TraceReader::new(&empty[..], "x").unwrap();
            r.buf[..b.len()].copy_from_slice(&b);
            r.pos = 0;
            r.end = b.len();
            assert_eq!(r.varint().unwrap(), v);
        }
        for v in [0i64, 1, -1, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }

    #[test]
    fn errors_are_one_line_and_name_the_offset() {
        let bytes = encode(&sample_events());
        let err = |b: &[u8]| -> String {
            match TraceReader::new(b, "f.kht") {
                Err(e) => e.to_string(),
                Ok(r) => r
                    .filter_map(|e| e.err())
                    .next()
                    .map(|e| e.to_string())
                    .unwrap_or_default(),
            }
        };
        assert!(err(b"hello world, not a trace").contains("bad magic"));
        assert!(err(b"").contains("bad magic"));
        let mut v2 = bytes.clone();
        v2[8] = 9;
        assert_eq!(
            err(&v2),
            "f.kht: trace format version 9 is not supported (this kharden reads version 1)"
        );
        let cut = &bytes[..bytes.len() - 5];
        let m = err(cut);
        assert!(m.starts_with("f.kht: truncated at byte"), "{m}");
        for n in 0..bytes.len() {
            let m = err(&bytes[..n]);
            assert!(!m.is_empty() && !m.contains('\n'), "prefix {n}: {m}");
        }
        let mut bad = bytes.clone();
        let hdr = 14 + u32::from_le_bytes(bytes[10..14].try_into().unwrap()) as usize;
        bad[hdr] = 0x7e;
        assert_eq!(
            err(&bad),
            format!("f.kht: malformed record at byte {hdr}: unknown record type 0x7e")
        );
    }
}
