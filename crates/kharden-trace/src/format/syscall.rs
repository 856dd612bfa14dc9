//! System-call records: SysName (a definition), SysEnter, SysExit.

use super::reader::TraceReader;
use super::varint::{unzigzag, zigzag};
use super::writer::TraceWriter;
use super::{op, Op, TraceError};
use std::io::{self, Read, Write};
use std::sync::Arc;

impl<W: Write> TraceWriter<W> {
    /// Defines syscall `nr`'s name before its first use, if it has one.
    fn define_syscall(&mut self, nr: u32) {
        if !self.sys_defined.insert(nr) {
            return;
        }
        if let Some(name) = self.sys_names.get(&nr).cloned() {
            let id = self.string(&Arc::from(name.as_str()));
            self.buf.push(op::SYS_NAME);
            self.varint(nr as u64);
            self.varint(id);
            self.records += 1;
        }
    }

    pub(super) fn put_sys_enter(&mut self, time: u64, tid: u32, nr: u32) -> io::Result<()> {
        let slot = self.slot_of(tid)?;
        self.define_syscall(nr);
        self.head(op::SYS_ENTER, time);
        self.varint(slot);
        self.varint(nr as u64);
        Ok(())
    }

    pub(super) fn put_sys_exit(
        &mut self,
        time: u64,
        tid: u32,
        nr: u32,
        ret: i64,
    ) -> io::Result<()> {
        let slot = self.slot_of(tid)?;
        self.define_syscall(nr);
        self.head(op::SYS_EXIT, time);
        self.varint(slot);
        self.varint(nr as u64);
        self.varint(zigzag(ret));
        Ok(())
    }
}

impl<R: Read> TraceReader<R> {
    pub(super) fn sys_name(&mut self) -> Result<(), TraceError> {
        let nr = self.u32_field("syscall number")?;
        let s = self.string_ref()?;
        self.sys_names.insert(nr, s);
        Ok(())
    }

    pub(super) fn sys_enter(&mut self) -> Result<(u32, Op), TraceError> {
        let tid = self.task()?;
        let nr = self.u32_field("syscall number")?;
        Ok((tid, Op::SysEnter { nr }))
    }

    pub(super) fn sys_exit(&mut self) -> Result<(u32, Op), TraceError> {
        let tid = self.task()?;
        let nr = self.u32_field("syscall number")?;
        let ret = unzigzag(self.varint()?);
        Ok((tid, Op::SysExit { nr, ret }))
    }
}
