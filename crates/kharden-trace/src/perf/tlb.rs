//! The tlb family: TLB flushes, charged to the tree task whose address space they flush.

use super::convert::{Conversion, Sample};
use crate::format::Op;
use std::io::{self, Write};

impl<W: Write> Conversion<W> {
    /// A flush by a tree task, or by the idle task on a CPU that lazily kept a tree task's
    /// address space.
    pub(super) fn tlb_flush(&mut self, s: &Sample, in_tree: bool) -> io::Result<()> {
        let owner = if in_tree {
            Some(s.tid)
        } else if s.tid == 0 {
            self.lazy_owner
                .get(&s.cpu)
                .copied()
                .filter(|o| self.live.contains_key(o))
        } else {
            None
        };
        let Some(o) = owner else { return Ok(()) };
        let reason = s.layout.int(s.raw, 0).unwrap_or(0) as u32;
        let pages = s.layout.int(s.raw, 1).unwrap_or(0);
        self.emit(
            s.t,
            o,
            Op::TlbFlush {
                cpu: s.cpu,
                reason,
                pages,
            },
        )
    }
}
