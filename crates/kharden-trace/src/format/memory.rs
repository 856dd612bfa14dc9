//! Memory records: PageAlloc, PageFree (pfns as deltas), TlbFlush, PageFault (addresses as
//! deltas). Orders and flush sizes are checked against what a kernel can produce.

use super::reader::TraceReader;
use super::varint::{unzigzag, zigzag};
use super::writer::TraceWriter;
use super::{op, GfpClass, Op, TraceError, MAX_FLUSH_PAGES, MAX_ORDER};
use std::io::{self, Read, Write};

impl<W: Write> TraceWriter<W> {
    fn put_pfn(&mut self, pfn: u64) {
        self.varint(zigzag(pfn.wrapping_sub(self.prev_pfn) as i64));
        self.prev_pfn = pfn;
    }

    pub(super) fn put_page_alloc(
        &mut self,
        time: u64,
        tid: u32,
        pfn: u64,
        order: u8,
        gfp: u64,
        class: GfpClass,
    ) -> io::Result<()> {
        let slot = self.slot_of(tid)?;
        self.head(op::PAGE_ALLOC, time);
        self.varint(slot);
        self.put_pfn(pfn);
        self.varint(order as u64);
        self.varint(gfp);
        self.varint(class.code() as u64);
        Ok(())
    }

    pub(super) fn put_page_free(
        &mut self,
        time: u64,
        tid: u32,
        pfn: u64,
        order: u8,
    ) -> io::Result<()> {
        let slot = self.slot_of(tid)?;
        self.head(op::PAGE_FREE, time);
        self.varint(slot);
        self.put_pfn(pfn);
        self.varint(order as u64);
        Ok(())
    }

    pub(super) fn put_tlb_flush(
        &mut self,
        time: u64,
        tid: u32,
        cpu: u32,
        reason: u32,
        pages: u64,
    ) -> io::Result<()> {
        let slot = self.slot_of(tid)?;
        self.head(op::TLB_FLUSH, time);
        self.varint(slot);
        self.varint(cpu as u64);
        self.varint(reason as u64);
        self.varint(pages.wrapping_add(1));
        Ok(())
    }

    pub(super) fn put_page_fault(
        &mut self,
        time: u64,
        tid: u32,
        user: bool,
        address: u64,
        error_code: u64,
    ) -> io::Result<()> {
        let slot = self.slot_of(tid)?;
        self.head(op::PAGE_FAULT, time);
        self.varint(slot);
        self.varint(if user { 0 } else { 1 });
        self.varint(zigzag(address.wrapping_sub(self.prev_addr) as i64));
        self.prev_addr = address;
        self.varint(error_code);
        Ok(())
    }
}

impl<R: Read> TraceReader<R> {
    fn pfn(&mut self) -> Result<u64, TraceError> {
        let pfn = self.prev_pfn.wrapping_add(unzigzag(self.varint()?) as u64);
        self.prev_pfn = pfn;
        Ok(pfn)
    }

    fn order(&mut self) -> Result<u8, TraceError> {
        Ok(self.bounded("page order", MAX_ORDER as u64)? as u8)
    }

    pub(super) fn page_alloc(&mut self) -> Result<(u32, Op), TraceError> {
        let tid = self.task()?;
        let pfn = self.pfn()?;
        let order = self.order()?;
        let gfp = self.varint()?;
        let c = self.varint()?;
        let class = GfpClass::from_code(c)
            .ok_or_else(|| self.malformed(format!("GFP class {c} unknown (0-2)")))?;
        Ok((
            tid,
            Op::PageAlloc {
                pfn,
                order,
                gfp,
                class,
            },
        ))
    }

    pub(super) fn page_free(&mut self) -> Result<(u32, Op), TraceError> {
        let tid = self.task()?;
        let pfn = self.pfn()?;
        let order = self.order()?;
        Ok((tid, Op::PageFree { pfn, order }))
    }

    pub(super) fn tlb_flush(&mut self) -> Result<(u32, Op), TraceError> {
        let tid = self.task()?;
        let cpu = self.cpu()?;
        let reason = self.u32_field("flush reason")?;
        // pages+1, 0 meaning TLB_FLUSH_ALL (u64::MAX pages).
        let pages = match self.varint()? {
            0 => u64::MAX,
            p if p - 1 <= MAX_FLUSH_PAGES => p - 1,
            p => {
                return Err(self.malformed(format!(
                    "flush of {} pages out of range (0-{MAX_FLUSH_PAGES}, or all)",
                    p - 1
                )))
            }
        };
        Ok((tid, Op::TlbFlush { cpu, reason, pages }))
    }

    pub(super) fn page_fault(&mut self) -> Result<(u32, Op), TraceError> {
        let tid = self.task()?;
        let user = match self.varint()? {
            0 => true,
            1 => false,
            k => {
                return Err(
                    self.malformed(format!("page fault kind {k} unknown (0 user, 1 kernel)"))
                )
            }
        };
        let address = self.prev_addr.wrapping_add(unzigzag(self.varint()?) as u64);
        self.prev_addr = address;
        let error_code = self.varint()?;
        Ok((
            tid,
            Op::PageFault {
                user,
                address,
                error_code,
            },
        ))
    }
}
