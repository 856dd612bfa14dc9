//! [`TraceWriter`]: the header, then records buffered into checksummed blocks. The encoding of
//! each record type lives with its decoding (task.rs, sched.rs, syscall.rs, memory.rs).

use super::block::write_block;
use super::varint::put_varint;
use super::{op, Event, Meta, Op, MAGIC, MAX_STRING_BYTES, VERSION};
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::io::{self, Write};
use std::sync::Arc;

/// Payload size at which the writer closes a block.
const BLOCK_TARGET: usize = 1 << 16;

/// Writes a trace. Tasks must be introduced by `TaskNew` before anything else names them.
pub struct TraceWriter<W: Write> {
    out: W,
    pub(super) buf: Vec<u8>,
    prev_time: u64,
    pub(super) prev_pfn: u64,
    pub(super) prev_addr: u64,
    strings: HashMap<Arc<str>, u64>,
    pub(super) slots: HashMap<u32, u64>,
    pub(super) free_slots: BinaryHeap<std::cmp::Reverse<u64>>,
    pub(super) next_slot: u64,
    pub(super) sys_defined: HashSet<u32>,
    pub(super) sys_names: HashMap<u32, String>,
    pub(super) records: u64,
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
        out.write_all(&crc32fast::hash(&json).to_le_bytes())?;
        Ok(TraceWriter {
            out,
            buf: Vec::with_capacity(BLOCK_TARGET + 8192),
            prev_time: 0,
            prev_pfn: 0,
            prev_addr: 0,
            strings: HashMap::new(),
            slots: HashMap::new(),
            free_slots: Default::default(),
            next_slot: 0,
            sys_defined: HashSet::new(),
            sys_names: HashMap::new(),
            records: 0,
            events: 0,
            bytes: (MAGIC.len() + 10 + json.len()) as u64,
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

    pub(super) fn varint(&mut self, v: u64) {
        put_varint(&mut self.buf, v);
    }

    /// The id of string `s`, defining it first if it is new.
    pub(super) fn string(&mut self, s: &Arc<str>) -> u64 {
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

    /// Starts an event record: type and time delta (times never go back).
    pub(super) fn head(&mut self, code: u8, time: u64) {
        let t = time.max(self.prev_time);
        self.buf.push(code);
        put_varint(&mut self.buf, t - self.prev_time);
        self.prev_time = t;
        self.records += 1;
        self.events += 1;
    }

    pub(super) fn slot_of(&self, tid: u32) -> io::Result<u64> {
        self.slots.get(&tid).copied().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("task {tid} used before TaskNew"),
            )
        })
    }

    /// Appends one event. Times earlier than the previous event's are written as equal to it.
    pub fn write(&mut self, ev: &Event) -> io::Result<()> {
        let (t, tid) = (ev.time_ns, ev.tid);
        match &ev.op {
            Op::TaskNew { pid, parent, comm } => self.put_task_new(t, tid, *pid, *parent, comm)?,
            Op::Exec { filename } => self.put_exec(t, tid, filename)?,
            Op::Exit => self.put_exit(t, tid)?,
            Op::SwitchIn { cpu } => self.put_switch_in(t, tid, *cpu)?,
            Op::SwitchOut { state } => self.put_switch_out(t, tid, *state)?,
            Op::Migrate { from, to } => self.put_migrate(t, tid, *from, *to)?,
            Op::SysEnter { nr, args } => self.put_sys_enter(t, tid, *nr, args)?,
            Op::SysExit { nr, ret, target } => self.put_sys_exit(t, tid, *nr, *ret, *target)?,
            Op::PageAlloc {
                pfn,
                order,
                gfp,
                class,
            } => self.put_page_alloc(t, tid, *pfn, *order, *gfp, *class)?,
            Op::PageFree { pfn, order } => self.put_page_free(t, tid, *pfn, *order)?,
            Op::TlbFlush { cpu, reason, pages } => {
                self.put_tlb_flush(t, tid, *cpu, *reason, *pages)?
            }
            Op::PageFault {
                user,
                address,
                error_code,
            } => self.put_page_fault(t, tid, *user, *address, *error_code)?,
            Op::Lost { count } => {
                self.head(op::LOST, t);
                self.varint(*count);
            }
        }
        if self.buf.len() >= BLOCK_TARGET {
            self.flush_buf()?;
        }
        Ok(())
    }

    fn flush_buf(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            self.bytes += write_block(&mut self.out, &self.buf)?;
            self.buf.clear();
        }
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
