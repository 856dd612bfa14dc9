//! Kernel entry and exit paths: syscalls, page faults, and the user-mode work between them.
//! Defenses hook kernel entry and exit; the oracle runs at the return to user mode.

use super::syscall::{Effect, KTouch, SyscallSpec};
use crate::arch::caches::L1Side;
use crate::arch::x86::{paging, Access, Fault, PteFlags, VirtAddr};
use crate::error::{Error, Result};
use crate::kernel::memory::layout::*;
use crate::kernel::{CpuId, Kernel};
use crate::sim::{Counter, TimeCategory};

/// Lines user code brings into a core's L1 caches (its L1 misses) over some user work.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UserL1Lines {
    pub instruction: f64,
    pub data: f64,
}

impl UserL1Lines {
    pub fn scaled(self, by: f64) -> UserL1Lines {
        UserL1Lines {
            instruction: self.instruction * by,
            data: self.data * by,
        }
    }
}

impl Kernel {
    /// The first return to user mode of the task on `cpu` (after switch_to).
    pub fn enter_user(&mut self, cpu: CpuId) {
        self.with_defenses(|d, k| d.on_kernel_exit(k, cpu));
        self.cpus[cpu].user_mode = true;
        self.log_mode(cpu, true);
        self.check_at_user_return(cpu);
    }

    /// Logs that `cpu` runs in user mode (`true`) or kernel mode from its clock's present
    /// moment on. Only tick accounting asks the log, so only it pays for keeping one.
    pub(crate) fn log_mode(&mut self, cpu: CpuId, user: bool) {
        if self.params.irq_time != crate::kernel::IrqTime::Tick {
            return;
        }
        let c = &mut self.cpus[cpu];
        c.mode_log.record(c.now, user);
    }

    /// Forgets logged modes before `t`, the earliest CPU clock (no IPI can arrive earlier).
    pub(crate) fn forget_modes_before(&mut self, t: crate::sim::Time) {
        if self.params.irq_time != crate::kernel::IrqTime::Tick {
            return;
        }
        for c in self.cpus.iter_mut() {
            c.mode_log.prune(t);
        }
    }

    /// User-mode work: `cycles` of computation touching `touches` (addresses in the task's
    /// address space). A touch of an unpopulated page of an mmap()ed region takes a page fault.
    pub fn user_work(
        &mut self,
        cpu: CpuId,
        cycles: f64,
        touches: &[(VirtAddr, Access)],
    ) -> Result<()> {
        debug_assert!(self.cpus[cpu].user_mode);
        for &(va, access) in touches {
            match self.touch(cpu, va, access) {
                Ok(_) => {}
                Err(Fault::NotPresent(_)) if self.in_vma(cpu, va) => {
                    self.page_fault(cpu, va)?;
                    self.touch(cpu, va, access).map_err(|f| {
                        Error::new(format!(
                            "user access {va} still faults after the fault handler: {f:?}"
                        ))
                    })?;
                }
                Err(f) => {
                    return Err(Error::new(format!(
                        "user access {va} ({access:?}) faults: {f:?}"
                    )))
                }
            }
        }
        self.compute(cpu, cycles, TimeCategory::User);
        Ok(())
    }

    /// What user code's own L1 misses over a stretch of user work leave of the kernel's
    /// lines: `lines` of its lines pass through the core's L1I and L1D (SlotCache::displace).
    pub fn displace_l1_by_user(&mut self, cpu: CpuId, lines: UserL1Lines) {
        let core = self.cpus[cpu].mmu.core();
        self.caches
            .displace_l1(L1Side::Instruction, core, lines.instruction as usize);
        self.caches
            .displace_l1(L1Side::Data, core, lines.data as usize);
    }

    fn in_vma(&self, cpu: CpuId, va: VirtAddr) -> bool {
        self.mms[self.current_mm(cpu)]
            .vmas
            .iter()
            .any(|&(s, pages)| va >= s && va.0 < s.0 + pages * 4096)
    }

    /// A system call from user mode: SYSCALL, entry hooks, the recorded path (its text,
    /// its kernel objects, its work), the user memory it touches, its effect on the address
    /// space, exit hooks, SYSRET.
    pub fn syscall(&mut self, cpu: CpuId, spec: &SyscallSpec) -> Result<()> {
        let roundtrip = self.machine.costs.syscall_roundtrip_cycles as f64;
        self.cpus[cpu].stats.count(Counter::Syscalls);
        self.in_kernel_as(cpu, roundtrip, TimeCategory::SyscallInsn, |k| {
            let work = if spec.work_is_given {
                spec.work_cycles
            } else {
                k.work_on_this_kernel(cpu, spec.path, spec.work_cycles)
            };
            k.run_path(cpu, spec.path, Some(work))?;
            k.kernel_touches(cpu, spec.touches, spec.name)?;
            k.apply(cpu, spec.effect)
        })
    }

    pub(crate) fn kernel_touches(
        &mut self,
        cpu: CpuId,
        touches: &[KTouch],
        path: &str,
    ) -> Result<()> {
        for &t in touches {
            let (va, access) = self.resolve(cpu, t);
            self.touch_kernel(cpu, va, access).map_err(|f| {
                Error::new(format!("kernel fault in {path} at {va} ({t:?}): {f:?}"))
            })?;
        }
        Ok(())
    }

    /// Where a symbolic kernel touch lands for the task on `cpu`.
    pub fn resolve(&self, cpu: CpuId, t: KTouch) -> (VirtAddr, Access) {
        match t {
            KTouch::ParentTaskStruct => {
                let task = &self.tasks[self.current_task(cpu)];
                let parent = task
                    .parent
                    .map_or(task.task_struct, |p| self.tasks[p].task_struct);
                (parent, Access::Read)
            }
            KTouch::PerCpu => (per_cpu_page(cpu), Access::Write),
            KTouch::UserBufferWrite(n) => (VirtAddr(USER_DATA + n * 4096), Access::Write),
            KTouch::UserBufferRead(n) => (VirtAddr(USER_DATA + n * 4096), Access::Read),
        }
    }

    /// A new anonymous VMA of `pages` pages of `mm`; returns its start.
    fn new_vma(&mut self, mm: crate::kernel::MmId, pages: u64) -> VirtAddr {
        let m = &mut self.mms[mm];
        let start = VirtAddr(m.next_mmap);
        m.next_mmap += pages * 4096;
        m.vmas.push((start, pages));
        start
    }

    fn apply(&mut self, cpu: CpuId, effect: Effect) -> Result<()> {
        let mm = self.current_mm(cpu);
        match effect {
            Effect::None => {}
            Effect::MmapAnon { pages } => {
                self.new_vma(mm, pages);
            }
            Effect::MmapPopulate { pages } => {
                let start = self.new_vma(mm, pages);
                let task = self.current_task(cpu);
                for p in 0..pages {
                    let pfn = self.alloc_page(
                        cpu,
                        crate::kernel::memory::page_alloc::Gfp::UserAnon,
                        Some(task),
                    );
                    // The recorded path's work includes clear_page().
                    self.touch_page_copy(cpu, pfn, Access::Write, None)?;
                    self.map_user(mm, start.offset(p * 4096), pfn.addr(), PteFlags::USER_DATA);
                }
            }
            Effect::MunmapLast => {
                let Some((start, pages)) = self.mms[mm].vmas.pop() else {
                    return Ok(());
                };
                let root = self.mms[mm].root;
                let mut cleared = 0;
                for p in 0..pages {
                    if let Some(leaf) = paging::unmap(&mut self.mem, root, start.offset(p * 4096)) {
                        self.free_page(cpu, leaf.page.pfn());
                        cleared += 1;
                    }
                }
                // Like the mmu_gather: flush only if a PTE was cleared. Reuse the address
                // range next time, as the kernel's top-down allocator would.
                self.mms[mm].next_mmap = start.0;
                if cleared > 0 {
                    self.flush_tlb_mm_range(cpu, mm, start, pages);
                }
            }
            Effect::FlushUserRange { pages } => {
                let start = self.mms[mm].heap;
                self.flush_tlb_mm_range(cpu, mm, start, pages);
            }
            Effect::Munmap {
                flush_pages,
                freed_pages,
            } => {
                if let Some((start, _)) = self.mms[mm].vmas.pop() {
                    self.mms[mm].next_mmap = start.0;
                }
                let teardown = freed_pages as f64 * self.params.exit_page_cycles;
                self.compute(cpu, teardown, crate::sim::TimeCategory::Kernel);
                if flush_pages > 0 {
                    let start = self.mms[mm].heap;
                    self.flush_tlb_mm_range(cpu, mm, start, flush_pages);
                }
            }
            Effect::MprotectLast => {
                let Some(&(start, pages)) = self.mms[mm].vmas.last() else {
                    return Ok(());
                };
                let root = self.mms[mm].root;
                let mut changed = 0;
                for p in 0..pages {
                    let va = start.offset(p * 4096);
                    if let Some(leaf) = paging::translate(&self.mem, root, va) {
                        let flags = PteFlags {
                            writable: !leaf.flags.writable,
                            ..PteFlags::USER_DATA
                        };
                        paging::protect(&mut self.mem, root, va, flags);
                        changed += 1;
                    }
                }
                if changed > 0 {
                    self.flush_tlb_mm_range(cpu, mm, start, pages);
                }
            }
        }
        Ok(())
    }
}
