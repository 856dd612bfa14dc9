//! Process life and memory paths a build exercises: fork, exec, exit, anonymous page faults,
//! page-cache reads and writes. Each path allocates through the page allocator with the
//! right GFP class and copies page contents through kmap/kunmap, so defenses that hook
//! those (XPFO) see exactly the kernel's events.

use super::path_work::Work;
use crate::arch::x86::{Access, Pfn, PteFlags, VirtAddr};
use crate::error::{Error, Result};
use crate::kernel::memory::page_alloc::Gfp;
use crate::kernel::{CpuId, Kernel, TaskId};
use crate::sim::{Counter, TimeCategory};

// The costs of these paths are parameters (kernel/params.rs, valued in kernels/linux.toml).
// Other paths of the syscall table take no refcount_t (files use atomic_long_t f_count,
// dentries lockrefs).

impl Kernel {
    /// Runs `f` with the CPU in kernel mode, through the entry and exit paths (defenses see
    /// both), charging `entry` cycles of exception or syscall entry/exit.
    pub(crate) fn in_kernel<T>(
        &mut self,
        cpu: CpuId,
        entry: f64,
        f: impl FnOnce(&mut Kernel) -> Result<T>,
    ) -> Result<T> {
        self.in_kernel_as(cpu, entry, TimeCategory::InterruptEntry, f)
    }

    /// in_kernel() with the entry/exit cycles charged to `category` (SYSCALL/SYSRET for
    /// system calls, exception or interrupt entry otherwise).
    pub(crate) fn in_kernel_as<T>(
        &mut self,
        cpu: CpuId,
        entry: f64,
        category: TimeCategory,
        f: impl FnOnce(&mut Kernel) -> Result<T>,
    ) -> Result<T> {
        let from_user = self.cpus[cpu].user_mode;
        if from_user {
            self.log_mode(cpu, false);
        }
        self.compute(cpu, entry / 2.0, category);
        if from_user {
            self.cpus[cpu].user_mode = false;
            self.cpus[cpu].stats.count(Counter::KernelEntries);
            self.with_defenses(|d, k| d.on_kernel_entry(k, cpu));
        }
        let r = f(self);
        if from_user {
            self.with_defenses(|d, k| d.on_kernel_exit(k, cpu));
            self.cpus[cpu].user_mode = true;
            self.check_at_user_return(cpu);
        }
        self.compute(cpu, entry / 2.0, category);
        if from_user {
            self.log_mode(cpu, true);
        }
        r
    }

    /// `n` refcount_t operations on a kernel path: counted, and priced by a refcount defense
    /// (the unhardened kernel's atomic_t cost is part of the path's work).
    pub fn refcount_ops(&mut self, cpu: CpuId, n: u32) {
        self.cpus[cpu].stats.add(Counter::RefcountOps, n as u64);
        self.with_defenses(|d, k| d.on_refcount_ops(k, cpu, n));
    }

    /// kmap(): the kernel alias of a page for a copy that makes `access` to it. On x86-64
    /// that is the direct map; defenses may have to map it back first, or map it elsewhere
    /// (Defense::kmap_alias).
    pub fn kmap(&mut self, cpu: CpuId, pfn: Pfn, access: Access) -> VirtAddr {
        self.with_defenses(|d, k| d.on_kmap(k, cpu, pfn));
        let mut alias = None;
        self.with_defenses(|d, k| {
            if alias.is_none() {
                alias = d.kmap_alias(k, cpu, pfn, access);
            }
        });
        alias.unwrap_or_else(|| self.direct_map_addr(pfn))
    }

    pub fn kunmap(&mut self, cpu: CpuId, pfn: Pfn) {
        self.with_defenses(|d, k| d.on_kunmap(k, cpu, pfn));
    }

    /// Copies one page through kmap: the kernel touches the page's alias (and, for a user
    /// copy, the user buffer page), then unmaps it.
    fn copy_page(
        &mut self,
        cpu: CpuId,
        pfn: Pfn,
        page_access: Access,
        user_buffer: Option<(VirtAddr, Access)>,
    ) -> Result<()> {
        self.touch_page_copy(cpu, pfn, page_access, user_buffer)?;
        self.compute(cpu, self.params.copy_page_cycles, TimeCategory::Kernel);
        Ok(())
    }

    /// copy_page() whose copy work a recorded path's own work already includes: the
    /// translations, the kmap/kunmap and the lines the copy moves, not its time.
    pub(crate) fn touch_page_copy(
        &mut self,
        cpu: CpuId,
        pfn: Pfn,
        page_access: Access,
        user_buffer: Option<(VirtAddr, Access)>,
    ) -> Result<()> {
        let va = self.kmap(cpu, pfn, page_access);
        if self.fast_forward {
            // The kmap/kunmap pair is lasting state (XPFO unmaps a user page's alias at its
            // first kunmap); the copy's translation and lines are not.
            self.kunmap(cpu, pfn);
            return Ok(());
        }
        self.touch_kernel(cpu, va, page_access)
            .map_err(|f| Error::new(format!("kernel copy of page {:#x} at {va}: {f:?}", pfn.0)))?;
        // The copy's lines pass through this CPU's caches (rep movsb/stosb are ordinary
        // write-allocating accesses), evicting what the kernel and the task had there.
        let lines = crate::kernel::footprints::path_footprint::PAGE_BYTES
            / crate::kernel::footprints::path_footprint::LINE_BYTES;
        self.store_lines(cpu, pfn.addr().0, lines);
        if let Some((uva, access)) = user_buffer {
            let t = self
                .touch(cpu, uva, access)
                .map_err(|f| Error::new(format!("kernel copy to user {uva}: {f:?}")))?;
            let in_mapping = uva.0
                & (t.size.bytes() - 1)
                & !(crate::kernel::footprints::path_footprint::PAGE_BYTES - 1);
            self.store_lines(cpu, t.page.0 + in_mapping, lines);
        }
        self.kunmap(cpu, pfn);
        Ok(())
    }

    /// A #PF on an anonymous page at `va` of the current task: allocate a zeroed page
    /// (GFP_HIGHUSER_MOVABLE | __GFP_ZERO, zeroed through kmap) and map it.
    pub fn page_fault(&mut self, cpu: CpuId, va: VirtAddr) -> Result<Pfn> {
        let entry = self.machine.costs.interrupt_entry_cycles as f64;
        self.cpus[cpu].stats.count(Counter::PageFaults);
        self.in_kernel(cpu, entry, |k| {
            k.run_known_path(cpu, "fault-anon", Work::MeasuredLess("clear_page_erms"))?;
            let task = k.current_task(cpu);
            let pfn = k.alloc_page(cpu, Gfp::UserAnon, Some(task));
            k.copy_page(cpu, pfn, Access::Write, None)?;
            let mm = k.tasks[task].mm;
            k.map_user(
                mm,
                va.align_down(crate::arch::x86::PageSize::Size4K),
                pfn.addr(),
                PteFlags::USER_DATA,
            );
            Ok(pfn)
        })
    }

    /// An anonymous page fault on the next page of the current task's heap.
    pub fn anon_fault(&mut self, cpu: CpuId) -> Result<()> {
        let mm = self.current_mm(cpu);
        let va = self.mms[mm].heap.offset(self.mms[mm].heap_pages * 4096);
        let pfn = self.page_fault(cpu, va)?;
        self.mms[mm].anon.push(pfn);
        self.mms[mm].heap_pages += 1;
        Ok(())
    }

    /// A write to a private page mapped read-only (after fork, or a file's private
    /// mapping): do_wp_page copies it into a new anonymous page, mapped at the next page of
    /// the heap (the source page's lines are in the recorded path's copy; the copy's time
    /// is charged as copy_page's).
    pub fn cow_fault(&mut self, cpu: CpuId) -> Result<()> {
        let entry = self.machine.costs.interrupt_entry_cycles as f64;
        self.cpus[cpu].stats.count(Counter::PageFaults);
        let mm = self.current_mm(cpu);
        let va = self.mms[mm].heap.offset(self.mms[mm].heap_pages * 4096);
        let pfn = self.in_kernel(cpu, entry, |k| {
            k.run_known_path(
                cpu,
                "fault-cow",
                Work::MeasuredLess("copy_mc_enhanced_fast_string"),
            )?;
            let task = k.current_task(cpu);
            let pfn = k.alloc_page(cpu, Gfp::UserAnon, Some(task));
            k.copy_page(cpu, pfn, Access::Write, None)?;
            k.map_user(mm, va, pfn.addr(), PteFlags::USER_DATA);
            Ok(pfn)
        })?;
        self.mms[mm].anon.push(pfn);
        self.mms[mm].heap_pages += 1;
        Ok(())
    }

    /// A read fault on a file mapping whose page is in the page cache (an executable's text
    /// and data, a mapped header): the recorded path maps it and up to 15 neighbours
    /// (fault-around); its measured work covers those PTE stores. The pages are not tracked
    /// as the task's: nothing allocates, and exit's zap of them is in exit's work.
    pub fn file_fault(&mut self, cpu: CpuId) -> Result<()> {
        self.mapping_fault(cpu, "fault-file")
    }

    /// A read of an anonymous page not yet mapped: the kernel maps the shared zero page
    /// (kernel/footprints/derived.rs's fault-zero: the anonymous fault without allocating, clearing,
    /// charging or adding a page). Nothing is allocated, so nothing is tracked.
    pub fn zero_page_fault(&mut self, cpu: CpuId) -> Result<()> {
        self.mapping_fault(cpu, "fault-zero")
    }

    /// A page fault that runs `path` and allocates nothing the model tracks.
    fn mapping_fault(&mut self, cpu: CpuId, path: &'static str) -> Result<()> {
        let entry = self.machine.costs.interrupt_entry_cycles as f64;
        self.cpus[cpu].stats.count(Counter::PageFaults);
        self.in_kernel(cpu, entry, |k| k.run_known_path(cpu, path, Work::Measured))
    }

    /// read() of `pages` pages of file data into the user buffer: `misses` of them are not
    /// cached and are allocated into the page cache (filled by DMA, no kernel copy); every
    /// page is then copied out through kmap.
    pub fn file_read(
        &mut self,
        cpu: CpuId,
        fs: PageCacheFs,
        pages: u32,
        misses: u32,
        buffer: VirtAddr,
    ) -> Result<()> {
        let roundtrip = self.machine.costs.syscall_roundtrip_cycles as f64;
        self.cpus[cpu].stats.count(Counter::Syscalls);
        self.in_kernel(cpu, roundtrip, |k| {
            k.run_known_path(cpu, fs.read_path(), Work::MeasuredLess("_copy_to_iter"))?;
            for i in 0..pages {
                let pfn = if i < misses || k.page_cache.is_empty() {
                    let p = k.alloc_page(cpu, Gfp::PageCache, None);
                    k.page_cache.push(p);
                    p
                } else {
                    let j = k.rng.below(k.page_cache.len() as u32) as usize;
                    k.page_cache[j]
                };
                if i > 0 {
                    k.compute(cpu, k.params.file_page_cycles, TimeCategory::Kernel);
                }
                k.copy_page(
                    cpu,
                    pfn,
                    Access::Read,
                    Some((buffer.offset((i as u64 % 2) * 4096), Access::Write)),
                )?;
            }
            Ok(())
        })
    }

    /// pread() of 4 KiB at page `page` of file `file` into the user buffer at `buffer`
    /// (fio's psync engine): the recorded pread64 path, then the page-cache page copied out
    /// through kmap. The file is cached in full (a tmpfs file written before the run): a
    /// page read for the first time is put in the page cache as history, at no cost.
    pub fn pread(&mut self, cpu: CpuId, file: u32, page: u32, buffer: VirtAddr) -> Result<()> {
        let key = (file as u64) << 32 | page as u64;
        let pfn = match self.file_pages.get(&key) {
            Some(&p) => p,
            None => {
                let was = std::mem::replace(&mut self.fast_forward, true);
                let p = self.alloc_page(cpu, Gfp::PageCache, None);
                self.fast_forward = was;
                self.file_pages.insert(key, p);
                p
            }
        };
        let roundtrip = self.machine.costs.syscall_roundtrip_cycles as f64;
        self.cpus[cpu].stats.count(Counter::Syscalls);
        self.in_kernel_as(cpu, roundtrip, TimeCategory::SyscallInsn, |k| {
            k.run_known_path(cpu, "pread64-4k", Work::MeasuredLess("_copy_to_iter"))?;
            k.copy_page(cpu, pfn, Access::Read, Some((buffer, Access::Write)))
        })
    }

    /// write() of `pages` pages into the page cache, the first `new_pages` of them newly
    /// allocated (a file growing), the rest pages already cached (a file rewritten).
    pub fn file_write(
        &mut self,
        cpu: CpuId,
        fs: PageCacheFs,
        pages: u32,
        new_pages: u32,
        buffer: VirtAddr,
    ) -> Result<()> {
        let roundtrip = self.machine.costs.syscall_roundtrip_cycles as f64;
        self.cpus[cpu].stats.count(Counter::Syscalls);
        self.in_kernel(cpu, roundtrip, |k| {
            k.run_known_path(
                cpu,
                fs.write_path(),
                Work::MeasuredLess("copy_folio_from_iter_atomic"),
            )?;
            for i in 0..pages {
                let pfn = if i < new_pages || k.page_cache.is_empty() {
                    let p = k.alloc_page(cpu, Gfp::PageCache, None);
                    k.page_cache.push(p);
                    p
                } else {
                    let j = k.rng.below(k.page_cache.len() as u32) as usize;
                    k.page_cache[j]
                };
                if i > 0 {
                    k.compute(cpu, k.params.file_page_cycles, TimeCategory::Kernel);
                }
                k.copy_page(
                    cpu,
                    pfn,
                    Access::Write,
                    Some((buffer.offset((i as u64 % 2) * 4096), Access::Read)),
                )?;
            }
            Ok(())
        })
    }

    /// fork(): a child process with its own address space.
    pub fn fork(&mut self, cpu: CpuId, parent: TaskId, name: &str) -> Result<TaskId> {
        self.new_process(cpu, parent, name, true)
    }

    /// vfork() or posix_spawn(): a child that borrows the parent's address space until its
    /// exec (kernel/footprints/derived.rs's vfork path: copy_process without dup_mm). The model gives
    /// the child its own empty mm at once; the exec that follows frees nothing of the
    /// parent's, as the real one does not.
    pub fn vfork(&mut self, cpu: CpuId, parent: TaskId, name: &str) -> Result<TaskId> {
        self.new_process(cpu, parent, name, false)
    }

    fn new_process(
        &mut self,
        cpu: CpuId,
        parent: TaskId,
        name: &str,
        copy_mm: bool,
    ) -> Result<TaskId> {
        let roundtrip = self.machine.costs.syscall_roundtrip_cycles as f64;
        self.cpus[cpu].stats.count(Counter::Forks);
        self.in_kernel(cpu, roundtrip, |k| {
            if copy_mm {
                // The recorded fork's latency is the recording driver's (35 mappings, about
                // 140 anonymous pages): the work is a minimal parent's, and each page the
                // parent has mapped adds its copy.
                k.run_known_path(cpu, "fork", Work::NativeNs(k.params.fork_latency_ns))?;
                let pages = k.mms[k.tasks[parent].mm].anon.len() as f64;
                k.compute(cpu, pages * k.params.fork_page_cycles, TimeCategory::Kernel);
            } else {
                k.run_known_path(cpu, "vfork", Work::Measured)?;
            }
            k.refcount_ops(cpu, k.params.fork_refcount_ops);
            let child = k.spawn_on(cpu, name, Some(parent));
            k.fork_stores(cpu, child, copy_mm);
            if copy_mm {
                // dup_mmap() ends with flush_tlb_mm(oldmm), whatever it copied: the
                // parent's private writable PTEs are now read-only (COW), so its TLBs must
                // drop them. The write protection itself and the COW faults after it are
                // not modelled.
                let mm = k.tasks[parent].mm;
                k.flush_tlb_mm_range(
                    cpu,
                    mm,
                    VirtAddr(0),
                    crate::kernel::tlb::tlbflush::FLUSH_ALL,
                );
            }
            k.tasks[child].last_cpu = Some(cpu);
            k.with_defenses(|d, k| d.on_task_forked(k, cpu, parent, child));
            Ok(child)
        })
    }

    /// What copy_process() writes for `child`, as cache fills: dup_task_struct()'s copy of
    /// the whole task_struct, and with `copy_mm` dup_mm()'s copy of mm_struct and
    /// pgd_alloc()'s cleared PGD page(s) (PTI's user PGD too). The copies' time with their
    /// lines cached is in the fork path's measured work; what they add is the waits for
    /// lines from DRAM (store_lines) and the lines they bring into this CPU's caches,
    /// evicting others (what a loop of forks does to the kernel text cached beside them).
    /// The objects are fresh memory unless a reaped child's came back (kernel/memory/reap.rs):
    /// then they are where that child left them.
    fn fork_stores(&mut self, cpu: CpuId, child: TaskId, copy_mm: bool) {
        let line = crate::kernel::footprints::path_footprint::LINE_BYTES;
        let task = &self.tasks[child];
        let ts = task.task_struct.0 - crate::kernel::memory::layout::DIRECT_MAP;
        let task_lines = self.paths.objects_bytes("task_struct").div_ceil(line);
        self.store_lines(cpu, ts, task_lines);
        if !copy_mm {
            return;
        }
        let mm = &self.mms[self.tasks[child].mm];
        let mm_struct = mm.objects[0].0 - crate::kernel::memory::layout::DIRECT_MAP;
        let pgds: Vec<u64> = std::iter::once(mm.root)
            .chain(mm.user_root)
            .map(|p| p.addr().0)
            .collect();
        let mm_lines = self.paths.objects_bytes("mm_struct").div_ceil(line);
        self.store_lines(cpu, mm_struct, mm_lines);
        for pgd in pgds {
            self.store_lines(
                cpu,
                pgd,
                crate::kernel::footprints::path_footprint::PAGE_BYTES / line,
            );
        }
    }

    /// execve(): the task's old user memory is freed and a fresh image mapped.
    pub fn exec(&mut self, cpu: CpuId, task: TaskId) -> Result<()> {
        if self.mms[self.tasks[task].mm].users > 1 {
            return Err(Error::new(format!(
                "exec by task {task}: exec in a multi-threaded process (de_thread) is not modelled"
            )));
        }
        let roundtrip = self.machine.costs.syscall_roundtrip_cycles as f64;
        self.cpus[cpu].stats.count(Counter::Execs);
        self.in_kernel(cpu, roundtrip, |k| {
            k.run_known_path(cpu, "execve", Work::Measured)?;
            k.refcount_ops(cpu, k.params.exec_refcount_ops);
            k.release_user_memory(cpu, task);
            Ok(())
        })
    }

    /// exit(): the last thread out frees the user memory; the task is dead afterwards.
    pub fn exit(&mut self, cpu: CpuId, task: TaskId) -> Result<()> {
        let roundtrip = self.machine.costs.syscall_roundtrip_cycles as f64;
        self.in_kernel(cpu, roundtrip, |k| {
            k.run_known_path(cpu, "exit", Work::NativeNs(k.params.exit_latency_ns))?;
            k.refcount_ops(cpu, k.params.exit_refcount_ops);
            let mm = k.tasks[task].mm;
            k.mms[mm].users = k.mms[mm].users.saturating_sub(1);
            if k.mms[mm].users == 0 {
                k.release_user_memory(cpu, task);
            }
            Ok(())
        })?;
        self.tasks[task].state = crate::kernel::sched::scheduler::TaskState::Dead;
        Ok(())
    }

    /// Unmaps and frees every anonymous page of the task's mm (exit_mmap / exec's mm swap),
    /// with the single full flush the mmu_gather ends with; each page's teardown work
    /// (kernel.exit_page_cycles, timed natively) beside the struct page lines free_page
    /// touches.
    fn release_user_memory(&mut self, cpu: CpuId, task: TaskId) {
        let mm = self.tasks[task].mm;
        let pages = std::mem::take(&mut self.mms[mm].anon);
        if pages.is_empty() {
            return;
        }
        let root = self.mms[mm].root;
        let heap = self.mms[mm].heap;
        for i in 0..pages.len() as u64 {
            crate::arch::x86::paging::unmap(&mut self.mem, root, heap.offset(i * 4096));
        }
        let teardown = pages.len() as f64 * self.params.exit_page_cycles;
        for pfn in pages {
            self.free_page(cpu, pfn);
        }
        self.compute(cpu, teardown, TimeCategory::Kernel);
        self.mms[mm].heap_pages = 0;
        self.flush_tlb_mm_range(cpu, mm, heap, crate::kernel::tlb::tlbflush::FLUSH_ALL);
    }
}

/// Which filesystem's page cache a read or write goes through: its recorded path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageCacheFs {
    /// A disk filesystem (the recording's ext4).
    Disk,
    /// tmpfs (shmem): no disk, no journal.
    Tmpfs,
}

impl PageCacheFs {
    fn read_path(self) -> &'static str {
        match self {
            PageCacheFs::Disk => "read-4k-file",
            PageCacheFs::Tmpfs => "read-4k-tmpfs",
        }
    }

    fn write_path(self) -> &'static str {
        match self {
            PageCacheFs::Disk => "write-4k-file",
            PageCacheFs::Tmpfs => "write-4k-tmpfs",
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::arch::x86::Access;
    use crate::kernel::Kernel;
    use crate::sim::{Counter, TimeCategory};
    use crate::{defense, machine};

    /// An unhardened four-core machine.
    fn boot() -> Kernel {
        Kernel::boot(
            machine::load("ivybridge-i5-3550").unwrap(),
            defense::parse_list("none").unwrap(),
        )
    }

    #[test]
    fn threads_share_the_address_space_until_the_last_one_exits() {
        let mut k = boot();
        let t = k.spawn("leader", None);
        let s = k.spawn_thread(0, t, "sibling");
        let mm = k.tasks[t].mm;
        assert_eq!((k.tasks[s].mm, k.mms[mm].users), (mm, 2));
        k.switch_to(0, t);
        k.enter_user(0);
        k.anon_fault(0).unwrap();
        assert!(k
            .exec(0, t)
            .unwrap_err()
            .to_string()
            .contains("multi-threaded"));
        k.exit(0, t).unwrap();
        assert_eq!(k.mms[mm].anon.len(), 1, "the sibling still uses the page");
        k.switch_to(0, s);
        k.exit(0, s).unwrap();
        assert!(k.mms[mm].anon.is_empty(), "the last thread out frees it");
    }

    /// A task on CPU 0, in user mode, that has faulted in `pages` anonymous pages.
    fn task_with_pages(k: &mut Kernel, pages: usize) -> crate::kernel::TaskId {
        let t = k.spawn("task", None);
        k.switch_to(0, t);
        k.enter_user(0);
        for _ in 0..pages {
            k.anon_fault(0).unwrap();
        }
        assert_eq!(k.mms[k.tasks[t].mm].anon.len(), pages);
        t
    }

    /// Kernel cycles CPU 0 spends in `op`.
    fn kernel_cycles_of(k: &mut Kernel, op: impl FnOnce(&mut Kernel)) -> f64 {
        let kernel = |k: &Kernel| {
            k.clock
                .to_cycles(k.cpus[0].stats.time(TimeCategory::Kernel))
        };
        let before = kernel(k);
        op(k);
        kernel(k) - before
    }

    /// exit_mmap's teardown: the last exit charges kernel.exit_page_cycles for each page the
    /// address space held, on top of what an exit of no pages costs.
    #[test]
    fn the_last_exit_tears_down_each_page_at_the_measured_cost() {
        let exit_kernel_cycles = |pages: usize| {
            let mut k = boot();
            let t = task_with_pages(&mut k, pages);
            kernel_cycles_of(&mut k, |k| k.exit(0, t).unwrap())
        };
        let per_page = boot().params.exit_page_cycles;
        let (one, nine) = (exit_kernel_cycles(1), exit_kernel_cycles(9));
        assert!(per_page > 0.0);
        // Eight more pages: eight teardowns, and whatever their struct page lines add (to
        // within a cycle of rounding).
        let extra = nine - one - 8.0 * per_page;
        assert!(
            (-1.0..8.0 * 0.2 * per_page).contains(&extra),
            "9 pages cost {nine:.0} kernel cycles to exit, 1 page {one:.0}, {per_page} a page"
        );
    }

    /// copy_page_range(): a fork charges kernel.fork_page_cycles for each anonymous page
    /// its parent has mapped, on top of a minimal parent's fork.
    #[test]
    fn fork_copies_each_of_the_parents_pages_at_the_measured_cost() {
        let fork_kernel_cycles = |pages: usize| {
            let mut k = boot();
            let t = task_with_pages(&mut k, pages);
            kernel_cycles_of(&mut k, |k| {
                k.fork(0, t, "child").unwrap();
            })
        };
        let per_page = boot().params.fork_page_cycles;
        let (one, nine) = (fork_kernel_cycles(1), fork_kernel_cycles(9));
        assert!(per_page > 0.0);
        let extra = nine - one - 8.0 * per_page;
        assert!(
            extra.abs() < 1.0,
            "a parent of 9 pages forks in {nine:.0} kernel cycles, of 1 page {one:.0}, {per_page} a page"
        );
    }

    /// exit's work is derived from kernel.exit_latency_ns: 1 us more of it is a recording
    /// host's microsecond more of kernel work in every exit.
    #[test]
    fn exit_work_follows_its_timed_latency() {
        let exit_kernel_cycles = |extra_ns: f64| {
            let mut k = boot();
            k.params.exit_latency_ns += extra_ns;
            let t = task_with_pages(&mut k, 0);
            kernel_cycles_of(&mut k, |k| k.exit(0, t).unwrap())
        };
        let ghz = boot().run_params.recording().footprints.kernel.host_ghz;
        let more = exit_kernel_cycles(1000.0) - exit_kernel_cycles(0.0);
        assert!((more - 1000.0 * ghz).abs() < 1.0, "{more} cycles");
    }

    /// The recording loop's fault cleared its page in clear_page_erms; the model's fault
    /// clears its page itself (copy_page: kernel.copy_page_cycles, and the wait for the
    /// lines that come from memory), so the loop's clear time leaves the path's work. The
    /// kernel category holds exactly that work plus the modelled clear's cycles.
    #[test]
    fn an_anonymous_fault_does_not_pay_its_recorded_clear_twice() {
        let mut k = boot();
        task_with_pages(&mut k, 0);
        let path = k.paths.get(k.paths.id("fault-anon").unwrap()).clone();
        let (work, clear) = (
            path.work_cycles.unwrap(),
            path.native_cycles_in("clear_page_erms").unwrap(),
        );
        let share = clear / path.native_cycles.unwrap();
        assert!(
            (0.1..0.3).contains(&share),
            "clear_page_erms took {share:.3} of the recorded fault"
        );
        let charged = kernel_cycles_of(&mut k, |k| k.anon_fault(0).unwrap());
        let id = k.paths.id("fault-anon").unwrap();
        let expected = k.paths.get(id).mitigation_cycles.work_without_unrun(
            work - clear,
            k.params.speculation_mitigations,
            &k.machine,
        ) + k.params.copy_page_cycles;
        assert!(
            (charged - expected).abs() < 1.0,
            "charged {charged:.1} kernel cycles, expected {expected:.1}"
        );
        assert!(k
            .paths
            .get(k.paths.id("fork").unwrap())
            .native_cycles_in("no_such_function")
            .is_none());
    }

    /// dup_mmap()'s flush_tlb_mm(oldmm): the forking CPU drops the parent's user
    /// translations at once, and every other CPU running the parent's mm is sent the flush.
    /// A vfork copies no address space: it flushes nothing and costs less.
    #[test]
    fn a_fork_flushes_the_parents_tlbs_wherever_its_mm_runs_and_a_vfork_nowhere() {
        let mut k = boot();
        let t = k.spawn("parent", None);
        let s = k.spawn_thread(1, t, "sibling");
        k.switch_to(1, s);
        k.enter_user(1);
        k.switch_to(0, t);
        k.enter_user(0);
        k.anon_fault(0).unwrap();
        let heap = k.mms[k.tasks[t].mm].heap;
        k.user_work(0, 0.0, &[(heap, Access::Write)]).unwrap();
        let holds_heap = |k: &Kernel| k.cpus[0].mmu.tlb_entries().any(|e| e.va() == heap);
        assert!(holds_heap(&k), "the parent's write filled the TLB");
        let flushes = k.cpus[0].stats.counter(Counter::NrTlbLocalFlushAll);
        let ipis = k.cpus[0].stats.counter(Counter::IpisSent);
        let kernel = |k: &Kernel| k.cpus[0].stats.time(TimeCategory::Kernel);
        let before = kernel(&k);
        k.fork(0, t, "child").unwrap();
        let fork = kernel(&k) - before;
        assert!(!holds_heap(&k), "the parent's heap translation is gone");
        assert_eq!(
            k.cpus[0].stats.counter(Counter::NrTlbLocalFlushAll),
            flushes + 1
        );
        assert_eq!(
            k.cpus[0].stats.counter(Counter::IpisSent),
            ipis + 1,
            "the sibling's CPU is sent the flush"
        );
        k.user_work(0, 0.0, &[(heap, Access::Write)]).unwrap();
        let before = kernel(&k);
        k.vfork(0, t, "spawned").unwrap();
        assert!(
            holds_heap(&k),
            "a vfork copies no address space: nothing to flush"
        );
        assert_eq!(
            k.cpus[0].stats.counter(Counter::IpisSent),
            ipis + 1,
            "nor to send"
        );
        assert!(kernel(&k) - before < fork, "a vfork costs less than a fork");
    }
}
