//! [`TraceReader`]: checks the header, verifies each block's checksum, and decodes records
//! one at a time (each record type's decoding lives with its encoding). Memory: the live
//! tasks, the string table and one block.

use super::block::{read_block, read_full, BlockError};
use super::{op, op_name, Event, Meta, Op, MAGIC, MAX_CPU, MAX_META_BYTES, OLDEST_READ, VERSION};
use super::{MAX_LOST_TOTAL, MAX_STRING_BYTES, MAX_STRING_TABLE_BYTES, MAX_TIME_NS};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io::{self, Read};
use std::sync::Arc;

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
    /// A block's length or checksum is wrong: the bytes were damaged.
    Corrupt {
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
            TraceError::Version { name, found } if *found < OLDEST_READ => write!(
                f,
                "{name}: trace format version {found} is no longer read (this kharden reads versions {OLDEST_READ} to {VERSION}; version 2 added checksums); record it again or re-run 'kharden trace convert' on its perf.data"
            ),
            TraceError::Version { name, found } => {
                write!(f, "{name}: trace format version {found} is not supported (this kharden reads versions {OLDEST_READ} to {VERSION}); a newer kharden wrote it")
            }
            TraceError::Truncated { name, offset, what } => {
                write!(f, "{name}: truncated at byte {offset} (inside {what})")
            }
            TraceError::Malformed { name, offset, msg } => {
                write!(f, "{name}: malformed record at byte {offset}: {msg}")
            }
            TraceError::Corrupt { name, offset, msg } => {
                write!(f, "{name}: corrupt block at byte {offset}: {msg}")
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

pub(super) struct Task {
    pub(super) tid: u32,
}

/// Streams the events of a trace. Memory: live tasks + string table + one block.
pub struct TraceReader<R: Read> {
    name: String,
    input: R,
    /// The file's format version (OLDEST_READ..=VERSION).
    pub(super) version: u16,
    pub(super) buf: Vec<u8>,
    pub(super) pos: usize,
    pub(super) end: usize,
    /// File offset of `buf[0]`, and of the next block's header.
    base: u64,
    next_block: u64,
    eof: bool,
    meta: Meta,
    strings: Vec<Arc<str>>,
    string_bytes: u64,
    pub(super) sys_names: HashMap<u32, Arc<str>>,
    pub(super) slots: Vec<Option<Task>>,
    /// Tids of the live tasks: a tid is live in one slot at a time.
    pub(super) live_tids: HashSet<u32>,
    pub(super) prev_pfn: u64,
    pub(super) prev_addr: u64,
    time: u64,
    lost_total: u64,
    pub(super) records: u64,
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
            version: VERSION,
            buf: Vec::new(),
            pos: 0,
            end: 0,
            base: 0,
            next_block: 0,
            eof: false,
            meta: Meta::default(),
            strings: Vec::new(),
            string_bytes: 0,
            sys_names: HashMap::new(),
            slots: Vec::new(),
            live_tids: HashSet::new(),
            prev_pfn: 0,
            prev_addr: 0,
            time: 0,
            lost_total: 0,
            records: 0,
            done: false,
            failed: false,
            rec_start: 0,
            rec_what: "the header",
        };
        let mut magic = [0u8; 8];
        let n = r.header_bytes(&mut magic)?;
        if n < 8 || &magic != MAGIC {
            // A short file that starts like a trace is a truncated trace.
            return if n > 0 && n < 8 && MAGIC.starts_with(&magic[..n]) {
                Err(r.truncated_at(n as u64))
            } else {
                Err(TraceError::BadMagic {
                    name: r.name.clone(),
                })
            };
        }
        let mut fixed = [0u8; 6];
        if r.header_bytes(&mut fixed)? < 6 {
            return Err(r.truncated_at(8));
        }
        let version = u16::from_le_bytes([fixed[0], fixed[1]]);
        if !(OLDEST_READ..=VERSION).contains(&version) {
            return Err(TraceError::Version {
                name: r.name.clone(),
                found: version,
            });
        }
        r.version = version;
        let len = u32::from_le_bytes(fixed[2..].try_into().unwrap());
        if len > MAX_META_BYTES {
            return Err(r.malformed(format!(
                "metadata of {len} bytes (at most {MAX_META_BYTES})"
            )));
        }
        let mut json = vec![0u8; len as usize + 4];
        if r.header_bytes(&mut json)? < json.len() {
            return Err(r.truncated_at(14));
        }
        let crc = u32::from_le_bytes(json[len as usize..].try_into().unwrap());
        json.truncate(len as usize);
        if crc32fast::hash(&json) != crc {
            return Err(TraceError::Corrupt {
                name: r.name.clone(),
                offset: 14,
                msg: "metadata checksum mismatch: the trace is corrupt".into(),
            });
        }
        r.meta = serde_json::from_slice(&json)
            .map_err(|e| r.malformed(format!("metadata is not valid JSON: {e}")))?;
        r.next_block = 18 + len as u64;
        r.base = r.next_block;
        Ok(r)
    }

    fn header_bytes(&mut self, buf: &mut [u8]) -> Result<usize, TraceError> {
        read_full(&mut self.input, buf).map_err(|e| self.io(e))
    }

    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// The file's format version.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// The name of syscall `nr` as the trace recorded it.
    pub fn syscall_name(&self, nr: u32) -> Option<&Arc<str>> {
        self.sys_names.get(&nr)
    }

    /// Tasks alive at this point of the stream.
    pub fn live_tasks(&self) -> usize {
        self.live_tids.len()
    }

    /// Bytes of the file consumed so far.
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    fn io(&self, e: io::Error) -> TraceError {
        TraceError::Io {
            name: self.name.clone(),
            msg: e.to_string(),
        }
    }

    fn truncated_at(&self, offset: u64) -> TraceError {
        TraceError::Truncated {
            name: self.name.clone(),
            offset,
            what: self.rec_what,
        }
    }

    pub(super) fn truncated(&self) -> TraceError {
        self.truncated_at(self.offset())
    }

    pub(super) fn malformed(&self, msg: String) -> TraceError {
        TraceError::Malformed {
            name: self.name.clone(),
            offset: self.rec_start,
            msg,
        }
    }

    /// Loads the next verified block; false at the end of the input.
    fn refill(&mut self) -> Result<bool, TraceError> {
        if self.eof {
            return Ok(false);
        }
        let at = self.next_block;
        match read_block(&mut self.input, &mut self.buf) {
            Ok(Some(n)) => {
                self.base = at + 8;
                self.next_block = self.base + n as u64;
                self.pos = 0;
                self.end = n;
                Ok(true)
            }
            Ok(None) => {
                self.eof = true;
                self.base = at;
                self.pos = 0;
                self.end = 0;
                Ok(false)
            }
            Err(BlockError::Io(e)) => Err(self.io(e)),
            Err(BlockError::Truncated) => Err(TraceError::Truncated {
                name: self.name.clone(),
                offset: at,
                what: "a block",
            }),
            Err(BlockError::Bad(msg)) => Err(TraceError::Corrupt {
                name: self.name.clone(),
                offset: at,
                msg,
            }),
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
    pub(super) fn byte(&mut self) -> Result<u8, TraceError> {
        if self.pos < self.end {
            let b = self.buf[self.pos];
            self.pos += 1;
            return Ok(b);
        }
        self.byte_opt()?.ok_or_else(|| self.truncated())
    }

    #[inline]
    pub(super) fn varint(&mut self) -> Result<u64, TraceError> {
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

    /// A varint that must be at most `max`; `what` names the field in the error.
    pub(super) fn bounded(&mut self, what: &str, max: u64) -> Result<u64, TraceError> {
        let v = self.varint()?;
        if v > max {
            return Err(self.malformed(format!("{what} {v} out of range (0-{max})")));
        }
        Ok(v)
    }

    pub(super) fn u32_field(&mut self, what: &str) -> Result<u32, TraceError> {
        Ok(self.bounded(what, u32::MAX as u64)? as u32)
    }

    pub(super) fn cpu(&mut self) -> Result<u32, TraceError> {
        Ok(self.bounded("cpu", MAX_CPU - 1)? as u32)
    }

    pub(super) fn string_ref(&mut self) -> Result<Arc<str>, TraceError> {
        let id = self.varint()?;
        match self.strings.get(id as usize) {
            Some(s) => Ok(s.clone()),
            None => Err(self.malformed(format!(
                "string {id} used before it was defined ({} defined)",
                self.strings.len()
            ))),
        }
    }

    /// The tid of the live task in the slot read next.
    pub(super) fn task(&mut self) -> Result<u32, TraceError> {
        let slot = self.varint()?;
        match self.slots.get(slot as usize) {
            Some(Some(t)) => Ok(t.tid),
            _ => Err(self.malformed(format!("task slot {slot} is not live"))),
        }
    }

    fn str_def(&mut self) -> Result<(), TraceError> {
        let len = self.bounded("string length", MAX_STRING_BYTES)?;
        if self.string_bytes + len > MAX_STRING_TABLE_BYTES {
            return Err(self.malformed(format!(
                "string table exceeds {MAX_STRING_TABLE_BYTES} bytes"
            )));
        }
        let mut s = Vec::with_capacity(len as usize);
        for _ in 0..len {
            s.push(self.byte()?);
        }
        let s = String::from_utf8(s).map_err(|_| self.malformed("string is not UTF-8".into()))?;
        self.string_bytes += len;
        self.strings.push(Arc::from(s));
        Ok(())
    }

    fn end(&mut self) -> Result<(), TraceError> {
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
        Ok(())
    }

    fn lost(&mut self) -> Result<Op, TraceError> {
        let count = self.varint()?;
        self.lost_total = self
            .lost_total
            .checked_add(count)
            .filter(|&t| t <= MAX_LOST_TOTAL)
            .ok_or_else(|| {
                self.malformed(format!(
                    "lost events add up to more than {MAX_LOST_TOTAL} (at most one per possible event)"
                ))
            })?;
        Ok(Op::Lost { count })
    }

    fn next_event(&mut self) -> Result<Option<Event>, TraceError> {
        loop {
            // Load the next block first, so that the record's offset is inside it.
            if self.pos == self.end {
                self.refill()?;
            }
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
                    self.end()?;
                    return Ok(None);
                }
                op::STR_DEF => self.str_def()?,
                op::SYS_NAME => self.sys_name()?,
                op::TASK_NEW..=op::LOST => {}
                _ => return Err(self.malformed(format!("unknown record type 0x{code:02x}"))),
            }
            if code == op::STR_DEF || code == op::SYS_NAME {
                self.records += 1;
                continue;
            }
            let dt = self.varint()?;
            let time = self
                .time
                .checked_add(dt)
                .filter(|&t| t <= MAX_TIME_NS)
                .ok_or_else(|| {
                    self.malformed(format!(
                        "time delta {dt} ns takes the trace past {MAX_TIME_NS} ns"
                    ))
                })?;
            let (tid, op) = match code {
                op::TASK_NEW => self.task_new()?,
                op::EXEC => self.exec()?,
                op::EXIT => self.exit()?,
                op::SWITCH_IN => self.switch_in()?,
                op::SWITCH_OUT => self.switch_out()?,
                op::MIGRATE => self.migrate()?,
                op::SYS_ENTER => self.sys_enter()?,
                op::SYS_EXIT => self.sys_exit()?,
                op::PAGE_ALLOC => self.page_alloc()?,
                op::PAGE_FREE => self.page_free()?,
                op::TLB_FLUSH => self.tlb_flush()?,
                op::PAGE_FAULT => self.page_fault()?,
                _ => (0, self.lost()?),
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
