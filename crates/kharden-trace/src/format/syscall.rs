//! System-call records: SysName (a definition), SysEnter with its arguments, SysExit with
//! the kind of descriptor the call used (version 3; version 2 has neither).

use super::reader::TraceReader;
use super::varint::{unzigzag, zigzag};
use super::writer::TraceWriter;
use super::{op, FdKind, Op, Target, TraceError};
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

    /// The arguments follow a byte whose bit i says argument i is not zero; only those are
    /// written (descriptors, sizes and flags are small, pointers are not).
    pub(super) fn put_sys_enter(
        &mut self,
        time: u64,
        tid: u32,
        nr: u32,
        args: &[u64; 6],
    ) -> io::Result<()> {
        let slot = self.slot_of(tid)?;
        self.define_syscall(nr);
        self.head(op::SYS_ENTER, time);
        self.varint(slot);
        self.varint(nr as u64);
        let mask = (0..6).fold(0u8, |m, i| m | (((args[i] != 0) as u8) << i));
        self.buf.push(mask);
        for &a in args.iter().filter(|&&a| a != 0) {
            self.varint(a);
        }
        Ok(())
    }

    pub(super) fn put_sys_exit(
        &mut self,
        time: u64,
        tid: u32,
        nr: u32,
        ret: i64,
        target: Target,
    ) -> io::Result<()> {
        let slot = self.slot_of(tid)?;
        self.define_syscall(nr);
        self.head(op::SYS_EXIT, time);
        self.varint(slot);
        self.varint(nr as u64);
        self.varint(zigzag(ret));
        self.varint(target.kind.code() as u64);
        self.varint(target.depth as u64);
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
        let mut args = [0u64; 6];
        if self.version >= 3 {
            let mask = self.byte()?;
            if mask >= 1 << 6 {
                return Err(self.malformed(format!(
                    "argument mask 0x{mask:02x} names more than six arguments"
                )));
            }
            for (i, a) in args.iter_mut().enumerate() {
                if mask & (1 << i) != 0 {
                    *a = self.varint()?;
                    if *a == 0 {
                        return Err(self.malformed(format!(
                            "argument {i} is written but zero (a zero argument is left out)"
                        )));
                    }
                }
            }
        }
        Ok((tid, Op::SysEnter { nr, args }))
    }

    pub(super) fn sys_exit(&mut self) -> Result<(u32, Op), TraceError> {
        let tid = self.task()?;
        let nr = self.u32_field("syscall number")?;
        let ret = unzigzag(self.varint()?);
        let mut target = Target::default();
        if self.version >= 3 {
            let code = self.varint()?;
            target.kind = FdKind::from_code(code)
                .ok_or_else(|| self.malformed(format!("unknown descriptor kind {code}")))?;
            target.depth = self.bounded("path depth", u16::MAX as u64)? as u16;
        }
        Ok((tid, Op::SysExit { nr, ret, target }))
    }
}
