//! Scheduler records: SwitchIn, SwitchOut, Migrate.

use super::reader::TraceReader;
use super::writer::TraceWriter;
use super::{op, Op, TraceError};
use std::io::{self, Read, Write};

impl<W: Write> TraceWriter<W> {
    pub(super) fn put_switch_in(&mut self, time: u64, tid: u32, cpu: u32) -> io::Result<()> {
        let slot = self.slot_of(tid)?;
        self.head(op::SWITCH_IN, time);
        self.varint(slot);
        self.varint(cpu as u64);
        Ok(())
    }

    pub(super) fn put_switch_out(&mut self, time: u64, tid: u32, state: u64) -> io::Result<()> {
        let slot = self.slot_of(tid)?;
        self.head(op::SWITCH_OUT, time);
        self.varint(slot);
        self.varint(state);
        Ok(())
    }

    pub(super) fn put_migrate(
        &mut self,
        time: u64,
        tid: u32,
        from: u32,
        to: u32,
    ) -> io::Result<()> {
        let slot = self.slot_of(tid)?;
        self.head(op::MIGRATE, time);
        self.varint(slot);
        self.varint(from as u64);
        self.varint(to as u64);
        Ok(())
    }
}

impl<R: Read> TraceReader<R> {
    pub(super) fn switch_in(&mut self) -> Result<(u32, Op), TraceError> {
        let tid = self.task()?;
        Ok((tid, Op::SwitchIn { cpu: self.cpu()? }))
    }

    pub(super) fn switch_out(&mut self) -> Result<(u32, Op), TraceError> {
        let tid = self.task()?;
        let state = self.varint()?;
        Ok((tid, Op::SwitchOut { state }))
    }

    pub(super) fn migrate(&mut self) -> Result<(u32, Op), TraceError> {
        let tid = self.task()?;
        let from = self.cpu()?;
        let to = self.cpu()?;
        Ok((tid, Op::Migrate { from, to }))
    }
}
