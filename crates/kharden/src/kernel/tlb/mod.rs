//! Keeping TLBs coherent across CPUs: per-CPU address-space identifiers (asid.rs), Linux's
//! flush API and switch_mm (tlbflush.rs), the IPIs that carry shootdowns and when their
//! handlers run on the target (ipi.rs, irq_calendar.rs, mode_log.rs), kernel lines several
//! CPUs share (shared_line.rs), and the property every flush policy must keep (coherence.rs).

pub mod asid;
pub mod coherence;
pub mod ipi;
pub mod irq_calendar;
pub mod mode_log;
pub mod shared_line;
pub mod tlbflush;
