//! Linux's TLB-flush API (arch/x86/mm/tlb.c) over the MMU model: flush_tlb_mm_range() to the
//! CPUs in mm_cpumask with flush generations, tlb_single_page_flush_ceiling, lazy-TLB CPUs
//! skipped, flush_tlb_kernel_range() to every CPU, and switch_mm() with per-CPU ASIDs.

use super::ipi::IpiWork;
use crate::arch::x86::{InvpcidType, Pcid, VirtAddr};
use crate::kernel::{CpuId, Kernel, MmId};
use crate::sim::{Counter, FlushReason};

/// Pages meaning "everything" in a flush request (Linux's TLB_FLUSH_ALL).
pub const FLUSH_ALL: u64 = u64::MAX;

impl Kernel {
    /// The PCID this CPU's kernel mode runs with (ASID + 1; 0 without PCIDs).
    pub fn kernel_pcid(&self, cpu: CpuId) -> Pcid {
        let c = &self.cpus[cpu];
        if c.mmu.pcide() {
            Pcid(c.asid.loaded_asid as u16 + 1)
        } else {
            Pcid(0)
        }
    }

    /// switch_mm_irqs_off(): load `mm` on `cpu`, reusing one of the CPU's ASIDs when it can.
    pub fn switch_mm(&mut self, cpu: CpuId, mm: MmId) {
        let (ctx_id, mm_gen) = (self.mms[mm].ctx_id, self.mms[mm].tlb_gen);
        let c = &mut self.cpus[cpu];
        if c.asid.loaded_mm == Some(mm) {
            // Back from lazy mode on the same mm: catch up with flushes we were spared.
            let was_lazy = std::mem::take(&mut c.asid.is_lazy);
            if was_lazy && c.asid.local_tlb_gen() < mm_gen {
                self.flush_tlb_func(
                    cpu,
                    mm,
                    VirtAddr(0),
                    FLUSH_ALL,
                    mm_gen,
                    FlushReason::TaskSwitch,
                );
            }
            self.mms[mm].cpumask.insert(cpu);
            return;
        }
        if let Some(prev) = c.asid.loaded_mm {
            self.mms[prev].cpumask.remove(cpu);
        }
        let (asid, need_flush) = self.cpus[cpu].asid.choose(mm, ctx_id, mm_gen);
        self.cpus[cpu].asid.load(asid, mm, ctx_id, mm_gen);
        self.mms[mm].cpumask.insert(cpu);
        if need_flush {
            self.cpus[cpu].stats.flush(FlushReason::TaskSwitch);
        }
        let pcide = self.cpus[cpu].mmu.pcide();
        let root = self.pgd(mm, cpu);
        self.write_cr3(cpu, root, self.kernel_pcid(cpu), pcide && !need_flush);
        self.with_defenses(|d, k| d.on_switch_mm(k, cpu, mm, need_flush));
    }

    /// Enters lazy TLB mode (idle or a kernel thread): the mm stays loaded, flushes for it
    /// skip this CPU until it switches back.
    pub fn enter_lazy_tlb(&mut self, cpu: CpuId) {
        self.cpus[cpu].asid.is_lazy = true;
    }

    /// flush_tlb_mm_range(): bump the mm's flush generation, flush locally if it is loaded
    /// here, and IPI the other non-lazy CPUs in its mm_cpumask, waiting for all of them.
    pub fn flush_tlb_mm_range(&mut self, cpu: CpuId, mm: MmId, start: VirtAddr, pages: u64) {
        self.mms[mm].tlb_gen += 1;
        let new_gen = self.mms[mm].tlb_gen;
        if self.cpus[cpu].asid.loaded_mm == Some(mm) {
            self.flush_tlb_func(cpu, mm, start, pages, new_gen, FlushReason::LocalShootdown);
        }
        let mut targets = self.mms[mm].cpumask.clone();
        targets.remove(cpu);
        for c in self.mms[mm].cpumask.iter() {
            if self.cpus[c].asid.is_lazy {
                targets.remove(c);
            }
        }
        if !targets.is_empty() {
            self.cpus[cpu].stats.flush(FlushReason::RemoteSendIpi);
            self.smp_call_function_many(
                cpu,
                &targets,
                IpiWork::FlushTlbMm {
                    mm,
                    start,
                    pages,
                    new_gen,
                },
            );
        }
    }

    /// flush_tlb_func(): bring this CPU's TLB up to the mm's generation `new_gen` with a
    /// partial flush when it is exactly one generation behind and the range is small, else a
    /// full flush of the ASID. Defenses holding other copies (PTI's user PCID) are told.
    pub(crate) fn flush_tlb_func(
        &mut self,
        cpu: CpuId,
        mm: MmId,
        start: VirtAddr,
        pages: u64,
        new_gen: u64,
        reason: FlushReason,
    ) {
        let local_gen = self.cpus[cpu].asid.local_tlb_gen();
        let mm_gen = self.mms[mm].tlb_gen;
        if local_gen >= mm_gen || self.cpus[cpu].asid.loaded_mm != Some(mm) {
            return; // already up to date (a later flush covered this one), or mm not loaded
        }
        let partial = new_gen == local_gen + 1
            && new_gen == mm_gen
            && pages <= self.params.tlb_single_page_flush_ceiling;
        if partial {
            for p in 0..pages {
                self.invlpg(cpu, start.offset(p * 4096));
            }
            self.cpus[cpu].stats.add(Counter::NrTlbLocalFlushOne, pages);
        } else {
            let (root, pcid) = (self.pgd(mm, cpu), self.kernel_pcid(cpu));
            self.write_cr3(cpu, root, pcid, false);
            self.cpus[cpu].stats.count(Counter::NrTlbLocalFlushAll);
        }
        self.cpus[cpu].asid.set_local_tlb_gen(mm_gen);
        self.cpus[cpu].stats.flush(reason);
        let pages = if partial { pages } else { FLUSH_ALL };
        self.with_defenses(|d, k| d.on_user_tlb_flush(k, cpu, mm, start, pages));
    }

    /// flush_tlb_kernel_range(): on_each_cpu() of a kernel-range flush, waiting for all.
    pub fn flush_tlb_kernel_range(&mut self, cpu: CpuId, start: VirtAddr, pages: u64) {
        if let Some(ns) = self.broadcast_invalidation_ns() {
            return self.broadcast_flush(cpu, start, pages, ns);
        }
        self.flush_kernel_range_local(cpu, start, pages, FlushReason::LocalShootdown);
        let mut others = crate::sim::CpuSet::all(self.cpus.len());
        others.remove(cpu);
        if !others.is_empty() {
            self.cpus[cpu].stats.flush(FlushReason::RemoteSendIpi);
            self.smp_call_function_many(cpu, &others, IpiWork::FlushTlbKernel { start, pages });
        }
    }

    /// The cost of one broadcast invalidation where the hardware has it (AMD INVLPGB +
    /// TLBSYNC, as Linux uses it for kernel flushes since 6.15; arm64 TLBI ...IS + DSB ISH).
    fn broadcast_invalidation_ns(&self) -> Option<f64> {
        let c = &self.machine.costs;
        c.invlpgb_ns.or(c.tlbi_broadcast_ns)
    }

    /// A kernel-range flush by broadcast: the hardware invalidates the range (or everything,
    /// above the ceiling) in every CPU's TLB, in every context; no IPI, no remote handler;
    /// the initiator waits for completion.
    fn broadcast_flush(&mut self, cpu: CpuId, start: VirtAddr, pages: u64, ns: f64) {
        if pages > self.params.tlb_single_page_flush_ceiling {
            for c in &mut self.cpus {
                c.mmu.invpcid(InvpcidType::AllInclGlobal);
            }
            self.holders.clear();
        } else {
            for p in 0..pages {
                self.invalidate_page_everywhere(start.offset(p * 4096));
            }
        }
        let t = crate::sim::Time::from_ns(ns);
        if !self.fast_forward {
            let c = &mut self.cpus[cpu];
            c.now += t;
            c.stats.add_time(crate::sim::TimeCategory::TlbInvalidate, t);
        }
        self.cpus[cpu].stats.count(Counter::BroadcastInvalidations);
        self.cpus[cpu].stats.flush(FlushReason::LocalShootdown);
    }

    /// One page invalidated in every context on every CPU, with every CPU's paging-structure
    /// caches: what a broadcast invalidation does, or a purge run on each CPU. Only the
    /// CPUs that may hold something it removes are visited (arch/x86/holders.rs).
    pub(crate) fn invalidate_page_everywhere(&mut self, va: VirtAddr) {
        if let Some(holders) = self.holders.take_page(va) {
            for c in holders.iter() {
                self.cpus[c].mmu.invalidate_page_all_contexts(va);
            }
        }
        for c in self.holders.walked().iter() {
            self.cpus[c].mmu.invalidate_paging_structure_caches();
        }
        self.holders.forget_walked();
    }

    /// do_kernel_range_flush() on one CPU: INVLPG per page up to the ceiling (INVLPG also
    /// drops global entries of the page), else a flush of everything, globals included.
    pub(crate) fn flush_kernel_range_local(
        &mut self,
        cpu: CpuId,
        start: VirtAddr,
        pages: u64,
        reason: FlushReason,
    ) {
        if pages <= self.params.tlb_single_page_flush_ceiling {
            for p in 0..pages {
                self.invlpg(cpu, start.offset(p * 4096));
            }
            self.cpus[cpu].stats.add(Counter::NrTlbLocalFlushOne, pages);
            // Non-global kernel mappings (PTI) live in every ASID's PCID: INVLPG reached only
            // the current one (Linux __flush_tlb_one_kernel -> invalidate_other_asid()).
            if self.cpus[cpu].mmu.pcide()
                && self.config.global_kernel != crate::kernel::KernelGlobal::All
            {
                self.cpus[cpu].asid.invalidate_others();
            }
            self.with_defenses(|d, k| d.on_kernel_page_flush(k, cpu, start, pages));
        } else {
            self.flush_tlb_all_local(cpu);
        }
        self.cpus[cpu].stats.flush(reason);
    }

    /// __flush_tlb_all(): every entry of every PCID, globals included (INVPCID type 2 where
    /// available, else CR4.PGE toggling, charged as a flushing CR3 write pair).
    pub fn flush_tlb_all_local(&mut self, cpu: CpuId) {
        if self.machine.cpu.features.invpcid {
            self.invpcid(cpu, InvpcidType::AllInclGlobal);
        } else {
            self.cpus[cpu].mmu.invpcid(InvpcidType::AllInclGlobal); // same architectural effect
            let cycles = 2.0 * self.machine.costs.cr3_write_flush_cycles as f64;
            self.compute(cpu, cycles, crate::sim::TimeCategory::TlbInvalidate);
        }
        self.cpus[cpu].stats.count(Counter::NrTlbLocalFlushAll);
    }
}
