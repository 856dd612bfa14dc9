//! Running a kernel path (paths/table.rs lays them out) on a CPU.
//!
//! A path fetches its text through the ITLB (one translation per 4 KiB text page) and the
//! instruction cache (one fetch per 64-byte line), and touches its data through the DTLB and
//! the data caches: the image's rodata, data and bss lines, the direct-map lines (slab
//! objects, per-CPU data, the task) and the stack lines measured for it, or the objects
//! estimated for it. What the TLBs and caches hold then decides what a path costs on a
//! machine: PTI's CR3 writes, global kernel pages, PCIDs, the direct map's page size and the
//! node a line lives on all act on these touches. Then it runs its work (paths/table.rs
//! derives it), less the recording's mitigations this kernel does not run.

use super::table::{KernelPath, Object, PathId, SLOT_LINES};
use crate::arch::caches::{HitLevel, L1Side};
use crate::arch::x86::{Access, VirtAddr};
use crate::error::{Error, Result};
use crate::kernel::footprints::path_footprint::{LINE_BYTES, PAGE_BYTES};
use crate::kernel::memory::layout::{direct_map, per_cpu_page, KERNEL_STACK_BYTES, KERNEL_TEXT};
use crate::kernel::{CpuId, Kernel};
use crate::sim::{Counter, TimeCategory};

impl Kernel {
    /// `work`, recording-host cycles of path `id`'s work, less the recording's mitigations
    /// this kernel does not run (kernel/mitigations.rs), counted on `cpu` as left out.
    pub(crate) fn work_on_this_kernel(&mut self, cpu: CpuId, id: PathId, work: f64) -> f64 {
        let kept = self.paths.get(id).mitigation_cycles.work_without_unrun(
            work,
            self.params.speculation_mitigations,
            &self.machine,
        );
        let left_out = (work - kept).round() as u64;
        if left_out > 0 {
            self.cpus[cpu]
                .stats
                .add(Counter::MitigationCyclesLeftOut, left_out);
        }
        kept
    }

    /// Runs path `id` on `cpu`: its text through the ITLB and instruction cache, its data
    /// through the DTLB and data caches (both charged to kernel-cache-miss beyond L1 hits,
    /// translations to kernel-tlb-refill), then `work` cycles of its own work (the measured
    /// work when `None`). Lines still in L1 from the path's last run here are replayed as
    /// hits (kernel/paths/l1_replay.rs).
    pub fn run_path(&mut self, cpu: CpuId, id: PathId, work: Option<f64>) -> Result<()> {
        if self.fast_forward {
            return Ok(());
        }
        let paths = self.paths.clone();
        let p = paths.get(id);
        let memos = &mut self.cpus[cpu].path_memo;
        if memos.len() <= id.0 {
            memos.resize(paths.paths.len(), Default::default());
        }
        let mut memo = std::mem::take(&mut memos[id.0]);
        memo.text.shape(p.text.len(), p.text_lines());
        memo.data.shape(
            p.data.len() + p.image.len() + 1,
            p.data.iter().map(|d| d.1 as usize).sum::<usize>() + p.image_lines() + p.heap_lines(),
        );
        let mut stall = 0.0;
        let mut mapped = None;
        let mut first = 0;
        for (g, (page, lines)) in p.text.iter().enumerate() {
            let va = VirtAddr(KERNEL_TEXT + page * PAGE_BYTES);
            let base = self.kernel_page(cpu, p, va, Access::Exec, &mut mapped)?;
            let offsets = lines.iter().enumerate().map(|(i, &l)| {
                let sequential = i > 0 && lines[i - 1] + 1 == l;
                (l * LINE_BYTES - page * PAGE_BYTES, sequential)
            });
            let side = L1Side::Instruction;
            stall += self.run_lines(cpu, side, &mut memo.text, g, first, base, offsets);
            first += lines.len();
        }
        self.settle(cpu, L1Side::Instruction, &mut memo.text);
        first = 0;
        for (g, &(object, lines)) in p.data.iter().enumerate() {
            let va = self.object_va(cpu, object, lines);
            let t = self.touch_kernel(cpu, va, Access::Write).map_err(|f| {
                Error::new(format!(
                    "kernel fault in {} at {va} ({object:?}): {f:?}",
                    p.name
                ))
            })?;
            let base = t.page.0 + (va.0 & (t.size.bytes() - 1));
            let offsets = (0..lines as usize).map(|l| (l as u64 * LINE_BYTES, false));
            stall += self.run_lines(cpu, L1Side::Data, &mut memo.data, g, first, base, offsets);
            first += lines as usize;
        }
        mapped = None;
        for (g, (page, lines)) in p.image.iter().enumerate() {
            let base = self.kernel_page(cpu, p, VirtAddr(*page), Access::Read, &mut mapped)?;
            let offsets = lines.iter().map(|&l| (l * LINE_BYTES - page, false));
            let g = p.data.len() + g;
            stall += self.run_lines(cpu, L1Side::Data, &mut memo.data, g, first, base, offsets);
            first += lines.len();
        }
        mapped = None;
        let heap = self.kernel_heap[self.cpus[cpu].mmu.node() as usize];
        for &page in &p.heap.pages {
            let va = direct_map(heap + page);
            let pa = self.kernel_page(cpu, p, va, Access::Write, &mut mapped)?;
            debug_assert_eq!(pa, heap + page, "the direct map is linear");
        }
        let offsets = p.heap.lines.iter().map(|&l| (l * LINE_BYTES, false));
        let g = p.data.len() + p.image.len();
        stall += self.run_lines(cpu, L1Side::Data, &mut memo.data, g, first, heap, offsets);
        self.settle(cpu, L1Side::Data, &mut memo.data);
        self.cpus[cpu].path_memo[id.0] = memo;
        self.compute(cpu, stall, TimeCategory::KernelCacheMiss);
        self.compute(
            cpu,
            work.or(p.work_cycles).unwrap_or(0.0),
            TimeCategory::Kernel,
        );
        Ok(())
    }

    /// The physical address of kernel page `va` (text fetched, image data read, heap
    /// written), translated through the ITLB or DTLB once per entry it keeps (`mapped` keeps
    /// the last one: the pages of a 2 MiB mapping are one entry where the TLB holds 2 MiB
    /// pages, and the later ones would hit it; an ITLB of 4 KiB entries only, as
    /// Silvermont's, fractures the mapping and looks up each page).
    fn kernel_page(
        &mut self,
        cpu: CpuId,
        p: &KernelPath,
        va: VirtAddr,
        access: Access,
        mapped: &mut Option<(u64, u64, u64)>,
    ) -> Result<u64> {
        if let Some((start, len, pa)) = *mapped {
            if (start..start + len).contains(&va.0) {
                return Ok(pa + (va.0 - start));
            }
        }
        let t = self.touch_kernel(cpu, va, access).map_err(|f| {
            Error::new(format!(
                "kernel fault on {}'s page {va} ({access:?}): {f:?}",
                p.name
            ))
        })?;
        let exec = access == Access::Exec;
        let len = self.cpus[cpu].mmu.l1_entry_size(exec, t.size).bytes();
        let start = va.0 & !(len - 1);
        let pa = t.page.0 + (start & (t.size.bytes() - 1));
        *mapped = Some((start, len, pa));
        Ok(pa + (va.0 - start))
    }

    /// Loads (or fetches, for text) the lines at `offsets` from physical `base` on `cpu`'s
    /// caches, each flagged when it continues a straight run of code; records each line's
    /// address and L1 slot in `placed`; returns the cycles waited beyond L1 hits
    /// (line_stall).
    pub(super) fn fetch_lines(
        &mut self,
        cpu: CpuId,
        base: u64,
        offsets: impl Iterator<Item = (u64, bool)>,
        side: L1Side,
        placed: &mut [(u64, usize)],
    ) -> f64 {
        let (core, socket, remote) = self.line_place(cpu, base);
        let text = side == L1Side::Instruction;
        self.count_lines(cpu, side, placed.len() as u64);
        let stats = &mut self.cpus[cpu].stats;
        let mut stall = 0.0;
        for ((off, sequential), place) in offsets.zip(placed) {
            let pa = base + off;
            let (h, slot) = self.caches.access(side, core, socket, pa, remote);
            *place = (pa, slot);
            match h {
                HitLevel::L1 => {}
                HitLevel::L2 | HitLevel::Llc => stats.count(Counter::KernelLineL1Misses),
                HitLevel::LocalDram => {
                    stats.count(Counter::KernelLineL1Misses);
                    stats.count(Counter::KernelLinesFromMemory);
                    if text {
                        stats.count(Counter::KernelTextFromMemory);
                    }
                }
                HitLevel::RemoteDram => {
                    stats.count(Counter::KernelLineL1Misses);
                    stats.count(Counter::KernelLinesFromMemory);
                    stats.count(Counter::KernelLinesFromRemoteMemory);
                    if text {
                        stats.count(Counter::KernelTextFromMemory);
                        stats.count(Counter::KernelTextFromRemoteMemory);
                    }
                }
            }
            stall += self.caches.line_stall(h, text && sequential);
        }
        stall
    }

    /// Counts `n` kernel text or data lines run on `cpu`.
    pub(super) fn count_lines(&mut self, cpu: CpuId, side: L1Side, n: u64) {
        let counter = match side {
            L1Side::Instruction => Counter::KernelTextLines,
            L1Side::Data => Counter::KernelDataLines,
        };
        self.cpus[cpu].stats.add(counter, n);
    }

    /// Where `cpu` reaches the memory at physical `pa` from: its core and socket (whose
    /// caches serve it), and whether `pa` lives on another node than the CPU's.
    pub(crate) fn line_place(&self, cpu: CpuId, pa: u64) -> (usize, usize, bool) {
        let mmu = &self.cpus[cpu].mmu;
        let remote = self.mem.node_of(crate::arch::x86::PhysAddr(pa).pfn()) != mmu.node();
        (mmu.core(), mmu.socket(), remote)
    }

    /// `cpu` loads the data line at physical `pa` from its line_place(): where it hit.
    pub(crate) fn load_line(&mut self, cpu: CpuId, pa: u64) -> HitLevel {
        let (core, socket, remote) = self.line_place(cpu, pa);
        self.caches.load(core, socket, pa, remote)
    }

    /// Stores to `lines` lines from physical `pa` (a clear, a copy, a new object): a stream
    /// (`stream_lines`), its DRAM lines counted as kernel_store_lines.memory. 64 x 67 ns /
    /// 10, about 430 ns, for a cold 4 KiB clear on haswell-i7-4770.
    pub fn store_lines(&mut self, cpu: CpuId, pa: u64, lines: u64) {
        let pas = (0..lines).map(|l| pa + l * LINE_BYTES);
        self.stream_lines(cpu, pas, Counter::KernelStoreLinesFromMemory);
    }

    /// Independent accesses to the lines at physical addresses `pas`: each is brought into
    /// `cpu`'s caches. Lines found in a cache cost nothing here (the copy's or the path's own
    /// cycles cover them). Lines from DRAM arrive at most lines_in_flight at a time, and a
    /// stream of them outruns the store buffer, so by Little's law the stream waits their
    /// summed latency over lines_in_flight (kernel-cache-miss); they are counted in
    /// `from_memory`.
    pub(in crate::kernel) fn stream_lines(
        &mut self,
        cpu: CpuId,
        pas: impl Iterator<Item = u64>,
        from_memory: Counter,
    ) {
        if self.fast_forward {
            return;
        }
        let (mut lines, mut waited) = (0, 0.0);
        for pa in pas {
            let h = self.load_line(cpu, pa);
            if h.is_dram() {
                lines += 1;
                waited += self.caches.stall_cycles(h);
            }
        }
        if lines > 0 {
            self.cpus[cpu].stats.add(from_memory, lines);
            let stall = waited / self.caches.lines_in_flight;
            self.compute(cpu, stall, TimeCategory::KernelCacheMiss);
        }
    }

    /// Where the first of the `lines` a path touches of `object` lies, for the task
    /// running on `cpu` (the stack's used part is its top).
    fn object_va(&self, cpu: CpuId, object: Object, lines: u64) -> VirtAddr {
        let task = self.cpus[cpu].current.map(|t| &self.tasks[t]);
        match (object, task) {
            (Object::PerCpu, _) => per_cpu_page(cpu),
            (Object::KernelStack, Some(task)) => {
                task.stack.offset(KERNEL_STACK_BYTES - lines * LINE_BYTES)
            }
            // An interrupt on an idle CPU: its handler's stack is the CPU's hardirq stack,
            // which the model keeps at the end of the CPU's per-CPU page (Linux gives it 16
            // KiB of its own).
            (Object::KernelStack, None) => per_cpu_page(cpu)
                .offset(PAGE_BYTES - lines.min(PAGE_BYTES / LINE_BYTES) * LINE_BYTES),
            (Object::TaskStruct, Some(task)) => task.task_struct,
            (Object::Process(slot), Some(task)) => {
                let slot = slot as u64;
                let per_page = PAGE_BYTES / (SLOT_LINES * LINE_BYTES);
                let page = self.mms[task.mm].objects[(slot / per_page) as usize];
                page.offset((slot % per_page) * SLOT_LINES * LINE_BYTES)
            }
            (Object::TaskStruct | Object::Process(_), None) => {
                panic!("a path with task objects ran on idle CPU {cpu}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::kernel::memory::page_alloc::Gfp;
    use crate::kernel::Kernel;
    use crate::sim::{Counter, TimeCategory};
    use crate::{defense, machine};

    /// A getppid on the seeds' Skylake-SP runs its recorded work less its Safe RET returns
    /// beyond the empty syscall's at the recording host's cost; told to run what the
    /// recording ran, the whole of it.
    #[test]
    fn a_syscall_runs_without_the_safe_ret_its_kernel_does_not_run() {
        use crate::kernel::footprints::footprint::Footprints;
        use crate::kernel::OracleMode;
        let f = Footprints::builtin();
        let returns = |p: &str| f.path(p).and_then(|p| p.returns).unwrap();
        let host = crate::machine::load(&f.kernel.host_machine).unwrap();
        let safe_ret = host.costs.return_thunk_cycles.unwrap()
            * (returns("getppid") - returns(crate::kernel::paths::table::EMPTY_SYSCALL));
        assert!(safe_ret > 0.0);
        let kernel_time = |choice: &str| {
            let params = crate::params::Params::linux()
                .with("kernel.speculation_mitigations", choice)
                .unwrap();
            let mut k = Kernel::boot_with(
                crate::machine::load("xeon-platinum-8160").unwrap(),
                vec![],
                &params,
                OracleMode::Every,
            );
            let t = k.spawn("caller", None);
            k.switch_to(0, t);
            k.enter_user(0);
            let spec = crate::kernel::paths::syscall::lookup(&k.paths, "getppid").unwrap();
            k.syscall(0, &spec).unwrap();
            let before = k.cpus[0].stats.time(TimeCategory::Kernel);
            k.syscall(0, &spec).unwrap();
            k.cpus[0].stats.time(TimeCategory::Kernel) - before
        };
        let (auto, recorded) = (kernel_time("auto"), kernel_time("recorded"));
        let ghz = crate::machine::load("xeon-platinum-8160")
            .unwrap()
            .cpu
            .frequency_ghz;
        let cycles = |t: crate::sim::Time| t.0 as f64 * 1e-3 * ghz;
        assert!(
            (cycles(recorded - auto) - safe_ret).abs() < 1.0,
            "{} cycles apart, expected {safe_ret}",
            cycles(recorded - auto)
        );
    }

    /// A path's kernel text, mapped by 2 MiB pages, walks once per 2 MiB page where the ITLB
    /// holds 2 MiB entries, and once per 4 KiB page where it holds 4 KiB entries only
    /// (Silvermont's, CPUID leaf 2): the large page is fractured there.
    #[test]
    fn text_walks_once_per_entry_the_itlb_keeps() {
        use crate::arch::x86::InvpcidType;
        use crate::machine::PageSizeName::{Size2M, Size4K};
        let walks_after_full_flush = |itlb_sizes: &[crate::machine::PageSizeName]| {
            let mut m = machine::load("atom-c2750").unwrap();
            let itlb = m.tlb.iter_mut().find(|a| a.name == "l1i").unwrap();
            itlb.page_sizes = itlb_sizes.to_vec();
            let mut k = Kernel::boot(m, defense::parse_list("none").unwrap());
            let task = k.spawn("t", None);
            k.switch_to(0, task);
            let id = k.paths.id("fork").expect("a recorded path");
            k.run_path(0, id, Some(0.0)).unwrap();
            k.cpus[0].mmu.invpcid(InvpcidType::AllInclGlobal);
            let before = k.cpus[0].stats.counter(Counter::PageWalks);
            k.run_path(0, id, Some(0.0)).unwrap();
            let text = &k.paths.get(id).text;
            let pages_4k = text.len() as u64;
            let mut pages_2m: Vec<u64> = text.iter().map(|(page, _)| page / 512).collect();
            pages_2m.dedup();
            let walks = k.cpus[0].stats.counter(Counter::PageWalks) - before;
            (walks, pages_4k, pages_2m.len() as u64)
        };
        let (fractured, pages_4k, pages_2m) = walks_after_full_flush(&[Size4K]);
        let (whole, _, _) = walks_after_full_flush(&[Size4K, Size2M]);
        assert!(
            pages_4k > pages_2m,
            "the path spans 4 KiB pages of some 2 MiB page twice"
        );
        assert_eq!(fractured - whole, pages_4k - pages_2m);
    }

    /// Each node has its own copy of the heap, and a path reads the copy of its CPU's node.
    #[test]
    fn a_path_reads_its_own_nodes_heap() {
        let m = machine::load("xeon-e5-2690v3-2s").unwrap();
        let mut k = Kernel::boot(m, defense::parse_list("none").unwrap());
        assert_eq!(k.kernel_heap.len(), 2);
        let id = k.paths.id("getppid").unwrap();
        let lines = k.paths.get(id).heap_lines() as u64;
        let t = k.spawn("t", None);
        for node in [0, 1] {
            let cpu = (0..k.cpus.len())
                .find(|&c| k.cpus[c].mmu.node() == node)
                .unwrap();
            k.switch_to(cpu, t);
            let heap = k.kernel_heap[node as usize];
            assert_eq!(k.mem.node_of(crate::arch::x86::PhysAddr(heap).pfn()), node);
            let heap_range = heap..heap + k.paths.heap.bytes();
            let p = k.paths.get(id).clone();
            k.run_path(cpu, id, Some(0.0)).unwrap();
            // Each line run is local, and now in L1 at its heap address.
            let mut found = 0;
            for &l in &p.heap.lines {
                let pa = heap_range.start + l * super::LINE_BYTES;
                let (core, socket, remote) = k.line_place(cpu, pa);
                assert!(!remote && heap_range.contains(&pa));
                let h = k.caches.load(core, socket, pa, remote);
                found += u64::from(h == crate::arch::caches::HitLevel::L1);
            }
            assert_eq!(found, lines, "node {node}");
        }
    }

    /// A page cleared with its lines in no cache waits 64 DRAM latencies over the core's
    /// lines in flight; cleared again, its lines are cached and the clear waits for nothing.
    #[test]
    fn cold_stores_wait_for_dram_at_the_rate_lines_in_flight_allow() {
        let mut m = machine::load("haswell-i7-4770").unwrap();
        for lines_in_flight in [10, 20] {
            m.memory.lines_in_flight = lines_in_flight;
            let mut k = Kernel::boot(m.clone(), defense::parse_list("none").unwrap());
            let pfn = k.alloc_page(0, Gfp::PageCache, None);
            let waited = |k: &Kernel| k.cpus[0].stats.time(TimeCategory::KernelCacheMiss);
            let before = waited(&k);
            k.store_lines(0, pfn.addr().0, 64);
            let cold = waited(&k) - before;
            let dram =
                m.memory.dram_local_ns * m.cpu.frequency_ghz - m.memory.l1d_hit_cycles as f64;
            let want = k.clock.cycles(64.0 * dram / lines_in_flight as f64);
            assert_eq!(cold, want, "{lines_in_flight} lines in flight");
            let stats = &k.cpus[0].stats;
            assert_eq!(stats.counter(Counter::KernelStoreLinesFromMemory), 64);
            let before = waited(&k);
            k.store_lines(0, pfn.addr().0, 64);
            assert_eq!(waited(&k) - before, crate::sim::Time::ZERO, "hot clear");
        }
    }
}
