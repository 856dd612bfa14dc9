//! The kmem family: page allocations (classified by their GFP flags) and frees.

use super::convert::{Conversion, Sample};
use crate::format::Op;
use std::io::{self, Write};

impl<W: Write> Conversion<W> {
    pub(super) fn page_alloc(&mut self, s: &Sample) -> io::Result<()> {
        let pfn = s.layout.int(s.raw, 0).unwrap_or(0);
        let order = s.layout.int(s.raw, 1).unwrap_or(0).min(63) as u8;
        let gfp = s.layout.int(s.raw, 2).unwrap_or(0);
        let class = self.gfp_bits.classify(gfp);
        self.emit(
            s.t,
            s.tid,
            Op::PageAlloc {
                pfn,
                order,
                gfp,
                class,
            },
        )
    }

    pub(super) fn page_free(&mut self, s: &Sample) -> io::Result<()> {
        let pfn = s.layout.int(s.raw, 0).unwrap_or(0);
        let order = s.layout.int(s.raw, 1).unwrap_or(0).min(63) as u8;
        self.emit(s.t, s.tid, Op::PageFree { pfn, order })
    }
}
