//! The raw_syscalls family (sys_enter, sys_exit).

use super::convert::{Conversion, Sample};
use crate::format::Op;
use std::io::{self, Write};

impl<W: Write> Conversion<W> {
    pub(super) fn sys_enter(&mut self, s: &Sample) -> io::Result<()> {
        let nr = s.layout.int(s.raw, 0).unwrap_or(0) as u32;
        let args = s.layout.u64s::<6>(s.raw, 1).unwrap_or([0; 6]);
        let enter_ns = s.t + self.base;
        if let Some(l) = self.live.get_mut(&s.tid) {
            l.in_syscall = Some((nr, args, enter_ns));
        }
        self.emit(s.t, s.tid, Op::SysEnter { nr, args })
    }

    /// The exit, with what the call's descriptor referred to (perf/fds.rs); the arguments
    /// are its enter's (none when perf lost it).
    pub(super) fn sys_exit(&mut self, s: &Sample) -> io::Result<()> {
        let nr = s.layout.int(s.raw, 0).unwrap_or(0) as u32;
        let ret = s.layout.int(s.raw, 1).unwrap_or(0) as i64;
        let entered = self.live.get_mut(&s.tid).and_then(|l| l.in_syscall.take());
        let target = match (entered, self.names.get(&nr)) {
            (Some((enr, args, enter_ns)), Some(name)) if enr == nr => {
                self.fds.syscall(s.tid, enter_ns, name, &args, ret)
            }
            _ => Default::default(),
        };
        self.emit(s.t, s.tid, Op::SysExit { nr, ret, target })
    }
}
