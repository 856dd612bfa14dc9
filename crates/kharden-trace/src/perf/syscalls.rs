//! The raw_syscalls family (sys_enter, sys_exit) and the syscall names of the trace header.

use super::convert::{Conversion, Sample};
use crate::format::Op;
use std::collections::HashMap;
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
