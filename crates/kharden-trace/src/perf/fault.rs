//! The exceptions family (x86): user and kernel page faults.

use super::convert::{Conversion, Sample};
use crate::format::Op;
use std::io::{self, Write};

impl<W: Write> Conversion<W> {
    pub(super) fn page_fault(&mut self, s: &Sample, user: bool) -> io::Result<()> {
        let address = s.layout.int(s.raw, 0).unwrap_or(0);
        let error_code = s.layout.int(s.raw, 1).unwrap_or(0);
        self.emit(
            s.t,
            s.tid,
            Op::PageFault {
                user,
                address,
                error_code,
            },
        )
    }
}
