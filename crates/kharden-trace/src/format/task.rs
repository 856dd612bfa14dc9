//! Task records: TaskNew (takes a slot), Exec, Exit (frees the slot). A tid is live in at
//! most one slot, and tid 0 (the idle task) is never a task of a trace.

use super::reader::{Task, TraceReader};
use super::writer::TraceWriter;
use super::{op, Op, TraceError, MAX_SLOTS};
use std::io::{self, Read, Write};
use std::sync::Arc;

impl<W: Write> TraceWriter<W> {
    pub(super) fn put_task_new(
        &mut self,
        time: u64,
        tid: u32,
        pid: u32,
        parent: Option<u32>,
        comm: &Arc<str>,
    ) -> io::Result<()> {
        if self.slots.contains_key(&tid) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("task {tid} introduced twice"),
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
        self.slots.insert(tid, slot);
        self.head(op::TASK_NEW, time);
        self.varint(slot);
        self.varint(tid as u64);
        self.varint(pid as u64);
        self.varint(parent.map_or(0, |p| p as u64 + 1));
        self.varint(sid);
        Ok(())
    }

    pub(super) fn put_exec(&mut self, time: u64, tid: u32, filename: &Arc<str>) -> io::Result<()> {
        let slot = self.slot_of(tid)?;
        let sid = self.string(filename);
        self.head(op::EXEC, time);
        self.varint(slot);
        self.varint(sid);
        Ok(())
    }

    pub(super) fn put_exit(&mut self, time: u64, tid: u32) -> io::Result<()> {
        let slot = self.slot_of(tid)?;
        self.head(op::EXIT, time);
        self.varint(slot);
        self.slots.remove(&tid);
        self.free_slots.push(std::cmp::Reverse(slot));
        Ok(())
    }
}

impl<R: Read> TraceReader<R> {
    pub(super) fn task_new(&mut self) -> Result<(u32, Op), TraceError> {
        let slot = self.bounded("task slot", MAX_SLOTS - 1)?;
        let tid = self.u32_field("tid")?;
        if tid == 0 {
            return Err(self.malformed("tid 0 (the idle task) cannot be a task".into()));
        }
        let pid = self.u32_field("pid")?;
        let parent = match self.bounded("parent+1", u32::MAX as u64 + 1)? {
            0 => None,
            p => Some((p - 1) as u32),
        };
        let comm = self.string_ref()?;
        let s = slot as usize;
        if s >= self.slots.len() {
            self.slots.resize_with(s + 1, || None);
        }
        if self.slots[s].is_some() {
            return Err(self.malformed(format!("task slot {slot} is already live")));
        }
        if !self.live_tids.insert(tid) {
            return Err(self.malformed(format!(
                "tid {tid} is already live in another slot (a tid is reused only after its Exit)"
            )));
        }
        self.slots[s] = Some(Task { tid });
        Ok((tid, Op::TaskNew { pid, parent, comm }))
    }

    pub(super) fn exec(&mut self) -> Result<(u32, Op), TraceError> {
        let tid = self.task()?;
        let filename = self.string_ref()?;
        Ok((tid, Op::Exec { filename }))
    }

    pub(super) fn exit(&mut self) -> Result<(u32, Op), TraceError> {
        let slot = self.varint()?;
        let tid = match self.slots.get_mut(slot as usize).and_then(|t| t.take()) {
            Some(t) => t.tid,
            None => return Err(self.malformed(format!("task slot {slot} is not live"))),
        };
        self.live_tids.remove(&tid);
        while matches!(self.slots.last(), Some(None)) {
            self.slots.pop();
        }
        Ok((tid, Op::Exit))
    }
}
