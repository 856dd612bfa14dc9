//! The unhardened kernel: boot (kernel page tables), address spaces, tasks, and the mechanism
//! API that kernel paths and defenses share (touch memory, write CR3, invalidate, flush).
//! Policy lives in `defense/`: the kernel only calls hooks at named events.

pub mod footprints;
pub mod hooks;
pub mod memory;
pub mod mitigations;
pub mod params;
pub mod paths;
pub mod sched;
pub mod steady;
pub mod tlb;

use crate::arch::caches::CacheHierarchy;
use crate::arch::x86::mmu::Translated;
use crate::arch::x86::{
    paging, Access, Fault, InvpcidType, Mmu, PageSize, Pcid, Pfn, PhysAddr, PhysMem, PteFlags,
    TlbHolders, VirtAddr, WalkEnv,
};
use crate::machine::MachineProfile;
use crate::sim::{Clock, Counter, CpuSet, Stats, Time, TimeCategory};
pub use hooks::{Defense, Hypervisor, OracleMode, Violation};
use memory::layout::*;
use memory::{page_alloc, reap};
use paths::{l1_replay, table};
use sched::{balance, scheduler};
use tlb::{asid, coherence, irq_calendar, mode_log};

pub type CpuId = usize;
pub type MmId = usize;
pub type TaskId = usize;

/// Which kernel mappings carry the global bit. Linux sets G on all kernel mappings when the
/// CPU has PGE; PTI clears it on the image and puts it back on what it clones into the user
/// page tables. As measured on Debian's 6.1 kernel (QEMU's `info tlb`,
/// scripts/kernel_text_mapping/): `All` without PTI, `ClonedImage` with PTI chosen
/// automatically on a CPU without PCID, `EntryText` with pti=on or PCID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelGlobal {
    All,
    /// Text and rodata (pti_clone_kernel_text() clones both, up to __end_rodata_aligned, and
    /// sets G on the 2 MiB PMDs it clones and on the text).
    ClonedImage,
    /// The whole image, text to the end of bss, keeps head_64.S's G bit: Linux PTI without
    /// PCID before "x86/mm/pti: Clear Global bit more aggressively" (Linux 4.18.5).
    WholeImage,
    /// Only the 2 MiB page of entry text (pti_clone_entry_text() sets G on the PMD it clones).
    EntryText,
    None,
}

impl KernelGlobal {
    /// Whether the 2 MiB kernel image page at `va` (text from KERNEL_TEXT, then rodata,
    /// then data) is mapped global, the entry code lying in page `entry_text`.
    pub fn image_page_is_global(self, va: VirtAddr, entry_text: VirtAddr) -> bool {
        match self {
            KernelGlobal::All => true,
            KernelGlobal::ClonedImage => va.0 < KERNEL_DATA,
            KernelGlobal::WholeImage => true,
            KernelGlobal::EntryText => va == entry_text,
            KernelGlobal::None => false,
        }
    }
}

/// Boot-time choices the defenses make in `Defense::configure`, fixed from then on.
#[derive(Debug, Clone)]
pub struct BootConfig {
    pub global_kernel: KernelGlobal,
    /// Enable CR4.PCIDE when the CPU has PCID (`nopcid` clears it).
    pub use_pcid: bool,
    /// The page allocator keeps user and page-cache frames (GFP_USER, ASI's
    /// __GFP_SENSITIVE) on per-CPU free lists of their own, apart from the kernel's, so a
    /// freed frame is handed out again to an allocation of its own sensitivity (ASI's
    /// sensitivity-aware free lists).
    pub sensitive_freelists: bool,
    /// Bytes of `struct page` per frame: 64 in Linux 4.x-6.x on x86-64; a defense that adds
    /// fields to it (XPFO) makes it larger, and a frame's struct then straddles two lines.
    pub struct_page_bytes: u64,
    pub oracle: OracleMode,
}

/// How the kernel accounts hard-IRQ time that interrupts a task (kernel/sched/cputime.c);
/// the parameter `kernel.irq_time` names it in kebab case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IrqTime {
    /// The interrupted task's system time, whatever mode it was in: precise accounting at
    /// kernel entry and exit (CONFIG_VIRT_CPU_ACCOUNTING_GEN on nohz_full CPUs).
    #[default]
    TaskSystem,
    /// Tick sampling without IRQ time accounting (the tick cannot fire inside a handler, so
    /// it samples the mode the handler returns to): user time when it interrupted user mode,
    /// system time when it interrupted the kernel.
    Tick,
    /// CONFIG_IRQ_TIME_ACCOUNTING: measured and charged to the CPU's irq time, to no task.
    Excluded,
}

impl IrqTime {
    /// The word of the parameter kernel.irq_time.
    pub fn name(self) -> &'static str {
        match self {
            IrqTime::TaskSystem => "task-system",
            IrqTime::Tick => "tick",
            IrqTime::Excluded => "excluded",
        }
    }
}

impl Default for BootConfig {
    fn default() -> Self {
        BootConfig {
            global_kernel: KernelGlobal::All,
            use_pcid: true,
            sensitive_freelists: false,
            struct_page_bytes: 64,
            oracle: OracleMode::default(),
        }
    }
}

/// One hardware thread.
pub struct Cpu {
    pub mmu: Mmu,
    /// This CPU's clock: when its current work ends.
    pub now: Time,
    pub user_mode: bool,
    /// When this CPU was in user mode, for interrupts that arrive in its simulated past.
    pub mode_log: mode_log::ModeLog,
    /// The running task; `None` when idle.
    pub current: Option<TaskId>,
    pub stats: Stats,
    /// Work done while idle (IPI handlers): Linux charges it to the idle task, not to the
    /// workload's system time.
    pub idle_stats: Stats,
    pub asid: asid::AsidState,
    /// Recent idle-interval estimate, for choosing a C-state.
    pub idle_estimate_ns: f64,
    /// Free frames of this CPU's list (Linux pcp lists).
    pub(crate) pcp: Vec<Pfn>,
    /// Free user and page-cache frames of this CPU, when they are kept apart
    /// (BootConfig::sensitive_freelists).
    pub(crate) pcp_sensitive: Vec<Pfn>,
    /// Tasks waiting to run here.
    pub(crate) rq: std::collections::VecDeque<TaskId>,
    /// Woken from idle and not yet started.
    pub(crate) starting: bool,
    /// When the running task's time slice began.
    pub(crate) slice_start: Time,
    /// The load balancer's tick and per-domain state.
    pub(crate) balance: balance::BalanceState,
    /// When this CPU is busy in interrupt handlers.
    pub(crate) irq_calendar: irq_calendar::IrqCalendar,
    /// Until when it spins waiting for its own IPIs' acknowledgements.
    pub(crate) spin_until: Time,
    /// Per kernel path: where its lines were in L1 after its last run here
    /// (kernel/paths/l1_replay.rs).
    pub(crate) path_memo: Vec<l1_replay::PathResidence>,
}

/// An address space. `user_root` is the second PGD that user mode runs on, when a defense
/// (PTI) creates one; `node_roots` its PGD per NUMA node, when a defense (kernel text
/// replication) gives every node its own, and `node_user_roots` the same for `user_root`.
#[derive(Debug)]
pub struct Mm {
    pub root: Pfn,
    pub user_root: Option<Pfn>,
    /// One PGD per node, indexed by node (`root` among them), or empty: every node uses `root`.
    pub node_roots: Vec<Pfn>,
    /// One user PGD per node (`user_root` among them), or empty: every node uses `user_root`.
    pub node_user_roots: Vec<Pfn>,
    /// The node its page tables are allocated on: the creating CPU's (Linux allocates page
    /// tables from the local node).
    pub node: u32,
    /// Unique over the kernel's life (Linux mm->context.ctx_id).
    pub ctx_id: u64,
    /// Flush generation (Linux mm->context.tlb_gen), bumped by every flush_tlb_mm_range().
    pub tlb_gen: u64,
    /// CPUs that may hold TLB entries of this mm (Linux mm_cpumask).
    pub cpumask: CpuSet,
    /// Anonymous regions mapped by mmap(): (start, pages).
    pub vmas: Vec<(VirtAddr, u64)>,
    next_mmap: u64,
    /// The heap: pages [heap, heap + heap_pages) are populated, backed by `anon` in order.
    pub heap: VirtAddr,
    pub heap_pages: u64,
    pub anon: Vec<Pfn>,
    /// Live tasks using this address space (Linux mm_users): its threads.
    pub users: u32,
    /// The process's slab objects (mm_struct, files_struct, ...: kernel/paths/table.rs), in the
    /// direct map.
    pub objects: [VirtAddr; table::PROCESS_OBJECT_PAGES],
}

#[derive(Debug)]
pub struct Task {
    pub name: String,
    pub mm: MmId,
    pub parent: Option<TaskId>,
    pub state: scheduler::TaskState,
    pub last_cpu: Option<CpuId>,
    /// When it last stopped running (the load balancer leaves cache-hot tasks in place).
    pub last_ran: Option<Time>,
    /// task_struct, in the direct map.
    pub task_struct: VirtAddr,
    pub stack: VirtAddr,
}

pub struct Kernel {
    pub machine: MachineProfile,
    pub clock: Clock,
    pub config: BootConfig,
    /// The kernel's software costs, resolved from the run's parameters at boot.
    pub params: params::KernelParams,
    /// Every parameter the run booted with (workloads read theirs; JSON output records it).
    pub run_params: crate::params::Params,
    /// The kernel paths' measured footprints and work (kernel/paths/table.rs).
    pub paths: std::sync::Arc<table::KernelPaths>,
    pub mem: PhysMem,
    pub caches: CacheHierarchy,
    pub cpus: Vec<Cpu>,
    /// Which CPUs may hold which kernel page's translation (arch/x86/holders.rs), so an
    /// invalidation of every CPU visits only those.
    pub holders: TlbHolders,
    /// init_mm's PGD: the template of every address space's kernel half.
    pub kernel_root: Pfn,
    /// init_mm's PGD per NUMA node, indexed by node, when a defense replicates the kernel
    /// half (kernel/memory/numa.rs); empty otherwise.
    pub kernel_node_roots: Vec<Pfn>,
    pub mms: Vec<Mm>,
    pub tasks: Vec<Task>,
    /// Slots of `tasks` and `mms` freed by memory/reap.rs, taken again by the next fork.
    pub task_slots: reap::Slots,
    pub mm_slots: reap::Slots,
    pub violations: Vec<Violation>,
    /// Returns to user mode so far (drives sampled oracle checks).
    returns_to_user: u64,
    /// Allocated pages and what they are for.
    pub(crate) pages: crate::sim::IntMap<Pfn, page_alloc::PageInfo>,
    /// File pages cached in memory (shared by all tasks).
    pub page_cache: Vec<Pfn>,
    /// Pages of the files read by position (Kernel::pread), by file << 32 | page index.
    pub(crate) file_pages: crate::sim::IntMap<u64, Pfn>,
    /// The kernel's own random choices (which cached page a read hits), seeded at boot.
    pub rng: crate::sim::Pcg32,
    /// Per node: bytes of its memory the direct map covers so far (memory/direct_map.rs).
    pub(crate) direct_map_covered: Vec<u64>,
    /// Per node: the physical base of its copy of the kernel heap (paths/table.rs, KernelHeap).
    pub(crate) kernel_heap: Vec<u64>,
    /// Contents of patched kernel text, by physical line: the version last written there
    /// (kernel/memory/numa.rs; unpatched lines are version 0).
    pub text_contents: crate::sim::IntMap<u64, u64>,
    /// Patched kernel text lines by virtual address, and the version the last patch wrote.
    pub text_patches: crate::sim::IntMap<u64, u64>,
    pub text_version: u64,
    /// The earliest clock of any CPU with work (set by the engine loop at each step).
    pub global_now: Time,
    /// Fast-forward: what happened before a measured run began (a job's past, a reaped
    /// task's teardown). The state that lasts changes as it did (allocations, mappings, the
    /// direct map's splits, the defenses' page state, the flushes those need) and nothing
    /// takes simulated time. What the warm-up overwrites is skipped: kernel paths run
    /// nothing and page copies only kmap and kunmap (no translation, no lines), so the TLBs
    /// and caches hold what the warm-up leaves, not what a job's whole past replayed back to
    /// back on one CPU would.
    pub fast_forward: bool,
    defenses: Vec<Box<dyn Defense>>,
    /// Decisions made from a CPU clock so far (kernel/steady.rs).
    clock_reads: std::cell::Cell<u64>,
    /// While a steady-state probe runs: whether the oracle, asked at every return to user
    /// mode, found anything (kernel/steady.rs).
    oracle_probe: Option<bool>,
    /// The hypervisor the kernel runs under, if it is a guest (`run_in_vm`).
    pub vm: Option<Box<dyn Hypervisor>>,
}

impl Kernel {
    /// Boots with the run's resolved parameters; the defenses read theirs in `configure`.
    pub fn boot_with(
        machine: MachineProfile,
        mut defenses: Vec<Box<dyn Defense>>,
        params: &crate::params::Params,
        oracle: OracleMode,
    ) -> Kernel {
        let mut config = BootConfig {
            oracle,
            ..BootConfig::default()
        };
        for d in defenses.iter_mut() {
            d.configure(&mut config, &machine, params);
        }
        let features = machine.cpu.features.clone();
        if !features.global_pages {
            config.global_kernel = KernelGlobal::None;
        }
        let mut mem = PhysMem::new(machine.numa_nodes());
        let kernel_root = mem.alloc_table(0);
        let mut k = Kernel {
            clock: Clock::new(machine.cpu.frequency_ghz),
            caches: CacheHierarchy::new(&machine),
            cpus: vec![],
            holders: TlbHolders::new(machine.threads() as usize),
            kernel_root,
            kernel_node_roots: vec![],
            mms: vec![],
            tasks: vec![],
            task_slots: Default::default(),
            mm_slots: Default::default(),
            violations: vec![],
            returns_to_user: 0,
            pages: Default::default(),
            page_cache: vec![],
            file_pages: Default::default(),
            rng: crate::sim::Pcg32::new(1, 0x6b68),
            fast_forward: false,
            direct_map_covered: vec![0; machine.numa_nodes() as usize],
            kernel_heap: vec![],
            text_contents: Default::default(),
            text_patches: Default::default(),
            text_version: 0,
            global_now: Time::ZERO,
            defenses: vec![],
            clock_reads: Default::default(),
            oracle_probe: None,
            vm: None,
            mem,
            config,
            params: params::KernelParams::from(params),
            run_params: params.clone(),
            paths: params.recording().paths.clone(),
            machine,
        };
        k.map_kernel_half();
        let t = &k.machine.topology;
        let threads_per_socket = (t.cores_per_socket * t.threads_per_core) as usize;
        for cpu in 0..k.machine.threads() as usize {
            let socket = cpu / threads_per_socket;
            let core = cpu / t.threads_per_core as usize;
            let node = socket as u32 * t.numa_nodes_per_socket;
            let mut mmu = Mmu::new(&k.machine, core, socket, node);
            if k.config.use_pcid && features.pcid {
                mmu.set_pcide(true);
            }
            mmu.write_cr3(kernel_root, Pcid(0), false);
            k.cpus.push(Cpu {
                mmu,
                now: Time::ZERO,
                user_mode: false,
                mode_log: Default::default(),
                current: None,
                stats: Stats::default(),
                idle_stats: Stats::default(),
                asid: Default::default(),
                idle_estimate_ns: 0.0,
                pcp: vec![],
                pcp_sensitive: vec![],
                rq: Default::default(),
                starting: false,
                slice_start: Time::ZERO,
                balance: Default::default(),
                irq_calendar: Default::default(),
                spin_until: Time::ZERO,
                path_memo: vec![],
            });
        }
        k.defenses = defenses;
        k.with_defenses(|d, k| d.on_boot(k));
        k
    }

    /// Maps the kernel image, the direct map, vmalloc's top-level tables and the
    /// cpu_entry_area into init_mm's PGD.
    fn map_kernel_half(&mut self) {
        let g = self.config.global_kernel;
        let entry_text = self.paths.entry_text_page();
        let image_bytes = KERNEL_TEXT_BYTES + KERNEL_RODATA_BYTES + KERNEL_DATA_BYTES;
        let image = self.mem.alloc_data_contiguous(0, image_bytes >> 12, 512);
        let m2 = PageSize::Size2M.bytes();
        for off in (0..image_bytes).step_by(m2 as usize) {
            let va = VirtAddr(KERNEL_TEXT + off);
            let flags = if off < KERNEL_TEXT_BYTES {
                PteFlags::KERNEL_TEXT
            } else if off < KERNEL_TEXT_BYTES + KERNEL_RODATA_BYTES {
                PteFlags::KERNEL_RODATA
            } else {
                PteFlags::KERNEL_DATA
            }
            .with_global(g.image_page_is_global(va, entry_text));
            paging::map(
                &mut self.mem,
                self.kernel_root,
                va,
                PhysAddr(image.addr().0 + off),
                PageSize::Size2M,
                flags,
                0,
            );
        }
        // The kernel heap, 2 MiB aligned: its regions are mapped as the guest's were.
        let heap_frames = self.paths.heap.bytes() >> 12;
        self.kernel_heap = (0..self.mem.nodes())
            .map(|n| self.mem.alloc_data_contiguous(n, heap_frames, 512).addr().0)
            .collect();
        for node in 0..self.mem.nodes() {
            self.cover_direct_map(node);
        }
        // mark_rodata_ro(): text and rodata are read-only through their direct-map alias too.
        for off in (0..KERNEL_TEXT_BYTES + KERNEL_RODATA_BYTES).step_by(m2 as usize) {
            self.protect_direct_map_2m(PhysAddr(image.addr().0 + off));
        }
        // vmalloc: preallocate the PUD so kernel stacks mapped later are seen by every PGD
        // (Linux: preallocate_vmalloc_pages()).
        let pud = self.mem.alloc_table(0);
        self.mem.write(
            self.kernel_root,
            VirtAddr(VMALLOC).index(4),
            crate::arch::x86::Pte::table(pud, false),
        );
        // cpu_entry_area: entry text shared by all CPUs, entry stack and TSS per CPU. Shared
        // by the user and kernel tables, so Linux makes it global whenever the CPU has PGE
        // (cea_set_pte(); measured on 6.1 with pti=on too); FreeBSD's PTI has no global pages.
        let cea_global = g != KernelGlobal::None;
        let entry_text = self.mem.alloc_data(0);
        for cpu in 0..self.machine.threads() as usize {
            let base = cpu_entry_area(cpu);
            let flags = PteFlags::KERNEL_TEXT.with_global(cea_global);
            paging::map(
                &mut self.mem,
                self.kernel_root,
                base,
                entry_text.addr(),
                PageSize::Size4K,
                flags,
                0,
            );
            for page in 1..3 {
                let frame = self.mem.alloc_data(0);
                let flags = PteFlags::KERNEL_DATA.with_global(cea_global);
                paging::map(
                    &mut self.mem,
                    self.kernel_root,
                    base.offset(page * 4096),
                    frame.addr(),
                    PageSize::Size4K,
                    flags,
                    0,
                );
            }
        }
    }

    /// Calls `f` on every defense, in the order given on the command line. Re-entrant: a
    /// hook may call kernel code that raises other hooks (an XPFO flush reaches PTI's user
    /// PCID); only the defense whose hook is running is skipped for the nested events.
    pub fn with_defenses(&mut self, mut f: impl FnMut(&mut dyn Defense, &mut Kernel)) {
        for i in 0..self.defenses.len() {
            let mut d = std::mem::replace(&mut self.defenses[i], Box::new(hooks::Running));
            f(d.as_mut(), self);
            self.defenses[i] = d;
        }
    }

    pub fn defense_names(&self) -> Vec<String> {
        self.defenses.iter().map(|d| d.name()).collect()
    }

    /// A new process with its own address space: text, data, C library and stack mapped.
    pub fn spawn(&mut self, name: &str, parent: Option<TaskId>) -> TaskId {
        self.spawn_on(0, name, parent)
    }

    /// spawn() with the kernel's own allocations (task_struct, kernel stack) made on `cpu`
    /// through the page allocator, as fork does.
    pub fn spawn_on(&mut self, cpu: CpuId, name: &str, parent: Option<TaskId>) -> TaskId {
        let node = self.cpus[cpu].mmu.node();
        let root = self.mem.alloc_table(node);
        let kernel_half = self.kernel_pgd_of_node(node);
        for i in 256..512 {
            paging::share_pml4_entry(&mut self.mem, root, kernel_half, i);
        }
        let cpumask = CpuSet::new(self.cpus.len());
        let objects = [(); table::PROCESS_OBJECT_PAGES]
            .map(|_| direct_map(self.alloc_page(cpu, page_alloc::Gfp::Kernel, None).addr().0));
        let heap = VirtAddr(USER_HEAP);
        let mm = Mm {
            root,
            user_root: None,
            node_roots: vec![],
            node_user_roots: vec![],
            node,
            ctx_id: self.mm_slots.created + 1,
            tlb_gen: 1,
            cpumask,
            vmas: vec![],
            next_mmap: USER_MMAP,
            heap,
            heap_pages: 0,
            anon: vec![],
            users: 0,
            objects,
        };
        let mm_id = self.mm_slots.fill(&mut self.mms, mm);
        self.with_defenses(|d, k| d.on_mm_created(k, cpu, mm_id));
        for (base, pages, flags) in [
            (USER_TEXT, 4, PteFlags::USER_TEXT),
            (USER_DATA, 2, PteFlags::USER_DATA),
            (USER_LIBC, 8, PteFlags::USER_TEXT),
            (USER_STACK_TOP - 4 * 4096, 4, PteFlags::USER_DATA),
        ] {
            for p in 0..pages {
                let frame = self.mem.alloc_data(0);
                self.map_user(mm_id, VirtAddr(base + p * 4096), frame.addr(), flags);
            }
        }
        self.add_task(cpu, name, parent, mm_id)
    }

    /// A new thread in `leader`'s process: its own task_struct and kernel stack, the
    /// leader's address space. Like spawn(), a set-up call that charges no time; defenses
    /// hear of it as a fork (copy_process duplicates the task_struct either way).
    pub fn spawn_thread(&mut self, cpu: CpuId, leader: TaskId, name: &str) -> TaskId {
        let (mm, parent) = (self.tasks[leader].mm, self.tasks[leader].parent);
        let thread = self.add_task(cpu, name, parent, mm);
        self.with_defenses(|d, k| d.on_task_forked(k, cpu, leader, thread));
        thread
    }

    /// A task of address space `mm`, its task_struct and kernel stack allocated on `cpu`.
    fn add_task(&mut self, cpu: CpuId, name: &str, parent: Option<TaskId>, mm: MmId) -> TaskId {
        let task_id = self.task_slots.next(self.tasks.len());
        self.mms[mm].users += 1;
        let ts = self.alloc_page(cpu, page_alloc::Gfp::Kernel, None);
        let stack = kernel_stack(task_id);
        for p in 0..KERNEL_STACK_BYTES / 4096 {
            let frame = self.alloc_page(cpu, page_alloc::Gfp::Kernel, None);
            paging::map(
                &mut self.mem,
                self.kernel_root,
                stack.offset(p * 4096),
                frame.addr(),
                PageSize::Size4K,
                PteFlags::KERNEL_DATA,
                0,
            );
        }
        let state = scheduler::TaskState::Runnable;
        let task = Task {
            name: name.into(),
            mm,
            parent,
            state,
            last_cpu: None,
            last_ran: None,
            task_struct: direct_map(ts.addr().0),
            stack,
        };
        self.task_slots.fill(&mut self.tasks, task)
    }

    /// Maps one user page into `mm`; lets defenses mirror a newly populated PGD slot.
    pub fn map_user(&mut self, mm: MmId, va: VirtAddr, pa: PhysAddr, flags: PteFlags) {
        let (root, node) = (self.mms[mm].root, self.mms[mm].node);
        let slot = va.index(4);
        let was_present = self.mem.read(root, slot).present();
        paging::map(&mut self.mem, root, va, pa, PageSize::Size4K, flags, node);
        if !was_present {
            self.with_defenses(|d, k| d.on_user_pgd_populated(k, mm, slot));
        }
    }

    /// Puts `task` on `cpu` and loads its address space (kernel CR3; the return to user
    /// mode goes through the exit path).
    pub fn switch_to(&mut self, cpu: CpuId, task: TaskId) {
        let mm = self.tasks[task].mm;
        self.switch_mm(cpu, mm);
        self.cpus[cpu].current = Some(task);
    }

    pub fn current_task(&self, cpu: CpuId) -> TaskId {
        self.cpus[cpu].current.expect("no task on cpu")
    }

    pub fn current_mm(&self, cpu: CpuId) -> MmId {
        self.tasks[self.current_task(cpu)].mm
    }

    // ----- mechanism API: what kernel paths and defenses do to the hardware -----

    /// Spends `cycles` of work on `cpu`, accounted to `category`.
    pub fn compute(&mut self, cpu: CpuId, cycles: f64, category: TimeCategory) {
        let t = self.account(cpu, cycles, category);
        self.cpus[cpu].now += t;
    }

    /// Accounts `cycles` to `category` on `cpu` without spending them: the CPU's clock does
    /// not move, so nothing simulated waits for them. For a cost fitted to a published
    /// figure per counted event, which stands for work no modelled mechanism derives and so
    /// must not move the events that are modelled (workload::kbuild_run adds such costs
    /// after a simulation that ran without them). Returns the time accounted (none while
    /// fast-forwarding).
    pub fn account(&mut self, cpu: CpuId, cycles: f64, category: TimeCategory) -> Time {
        if self.fast_forward {
            return Time::ZERO;
        }
        let t = self.clock.cycles(cycles);
        self.cpus[cpu].stats.add_time(category, t);
        t
    }

    /// One memory access at `va` in the CPU's current mode; the translation's cost (STLB
    /// lookup, walk) is charged as TLB refill. The access's own latency belongs to the
    /// work it is part of.
    // Inlined into the kernel paths' loops, as before the guest's branch made it too big
    // for the inliner's default: a call per touch cost 10% of a syscall loop's instructions.
    #[inline(always)]
    pub fn touch(&mut self, cpu: CpuId, va: VirtAddr, access: Access) -> Result<Translated, Fault> {
        let c = &mut self.cpus[cpu];
        let mut env = WalkEnv {
            mem: &self.mem,
            caches: &mut self.caches,
            stats: &mut c.stats,
            holders: Some((&mut self.holders, cpu)),
            ept: self.vm.as_mut().map(|vm| vm.second_stage()),
        };
        let translated = c.mmu.translate(&mut env, va, access, c.user_mode);
        if self.vm.is_some() {
            self.charge_vm_exits(cpu);
        }
        let t = translated?;
        let c = &mut self.cpus[cpu];
        if t.cycles > 0.0 && !self.fast_forward {
            let dt = self.clock.cycles(t.cycles);
            c.now += dt;
            c.stats.add_time(
                if c.user_mode {
                    TimeCategory::UserTlbRefill
                } else {
                    TimeCategory::KernelTlbRefill
                },
                dt,
            );
        }
        Ok(t)
    }

    /// A kernel-mode access at kernel or user address `va`: touch(), except that a
    /// not-present fault on a kernel address is offered to the defenses first (ASI's
    /// restricted tables fault on sensitive memory, and its handler switches to the full
    /// tables); when one handles it, the #PF's exception entry and return are charged and
    /// the access retried once.
    #[inline(always)]
    pub fn touch_kernel(
        &mut self,
        cpu: CpuId,
        va: VirtAddr,
        access: Access,
    ) -> Result<Translated, Fault> {
        match self.touch(cpu, va, access) {
            Err(f @ Fault::NotPresent(_)) if va.is_kernel() => {
                self.kernel_fault_retry(cpu, va, access, f)
            }
            r => r,
        }
    }

    #[cold]
    #[inline(never)]
    fn kernel_fault_retry(
        &mut self,
        cpu: CpuId,
        va: VirtAddr,
        access: Access,
        fault: Fault,
    ) -> Result<Translated, Fault> {
        let mut handled = false;
        self.with_defenses(|d, k| handled |= d.on_kernel_fault(k, cpu, va, access));
        if !handled {
            return Err(fault);
        }
        let entry = self.machine.costs.interrupt_entry_cycles as f64;
        self.compute(cpu, entry, TimeCategory::InterruptEntry);
        self.touch(cpu, va, access)
    }

    /// The exits a guest's walk took (EPT violations), charged to `cpu`.
    #[cold]
    #[inline(never)]
    fn charge_vm_exits(&mut self, cpu: CpuId) {
        let exits = self.vm.as_mut().map_or(0.0, |vm| vm.take_exit_cycles());
        if exits > 0.0 {
            self.compute(cpu, exits, TimeCategory::VmExit);
        }
    }

    /// From now on the kernel runs as a guest under `vm`: every CPU enters VMX non-root mode
    /// (its TLBs start empty) and walks in two dimensions. Call before the workload starts.
    pub fn run_in_vm(&mut self, vm: impl Hypervisor + 'static) {
        for c in &mut self.cpus {
            c.mmu.enter_guest();
        }
        self.vm = Some(Box::new(vm));
    }

    /// The hypervisor the kernel runs under, as the type its owner gave `run_in_vm`.
    pub fn vm_as<T: Hypervisor + 'static>(&self) -> Option<&T> {
        self.vm.as_ref()?.as_any().downcast_ref()
    }

    /// MOV to CR0 on `cpu` setting WP to `wp` (KERNEXEC's pax_open_kernel and
    /// pax_close_kernel). On bare metal the instruction is part of the path's work; in a VM
    /// it may exit, and KVM's handling (an MMU reset, a root rebuilt) is charged as vm-exit.
    pub fn write_cr0_wp(&mut self, cpu: CpuId, wp: bool) {
        self.cpus[cpu].mmu.set_wp(wp);
        self.cpus[cpu].stats.count(Counter::Cr0Writes);
        if let Some(vm) = self.vm.as_mut() {
            debug_assert_eq!(self.cpus.len(), 1, "one vCPU's KVM MMU state");
            let w = vm.write_cr0_wp(wp);
            if w.flush {
                self.cpus[cpu].mmu.invept();
            }
            self.compute(cpu, w.cycles, TimeCategory::VmExit);
        }
    }

    /// MOV to CR3 on `cpu`, charged at the profile's cost for a flushing or no-flush write.
    pub fn write_cr3(&mut self, cpu: CpuId, root: Pfn, pcid: Pcid, noflush: bool) {
        let c = &self.machine.costs;
        let flushed = self.cpus[cpu].mmu.write_cr3(root, pcid, noflush);
        let (cycles, counter) = if flushed {
            (c.cr3_write_flush_cycles, Counter::Cr3WriteFlush)
        } else {
            (c.cr3_write_noflush_cycles, Counter::Cr3WriteNoflush)
        };
        self.cpus[cpu].stats.count(counter);
        self.compute(cpu, cycles as f64, TimeCategory::Cr3Write);
    }

    pub fn invlpg(&mut self, cpu: CpuId, va: VirtAddr) {
        if self.holds_no_translation(cpu, va) {
            let mmu = &mut self.cpus[cpu].mmu;
            mmu.forget_paging_structures(mmu.pcid());
        } else {
            self.cpus[cpu].mmu.invlpg(va);
        }
        self.cpus[cpu].stats.count(Counter::Invlpg);
        let cycles = self.machine.costs.invlpg_cycles as f64;
        self.compute(cpu, cycles, TimeCategory::TlbInvalidate);
    }

    /// Whether `cpu`'s TLBs certainly hold no translation of `va`: a kernel page it never
    /// walked (arch/x86/holders.rs), as for every CPU but one when XPFO flushes a page.
    /// Invalidations of such a page skip the probe of the TLB arrays, with the same result.
    fn holds_no_translation(&self, cpu: CpuId, va: VirtAddr) -> bool {
        va.is_kernel() && !self.holders.may_hold(cpu, va)
    }

    /// INVPCID; the caller must have checked the CPU has it.
    pub fn invpcid(&mut self, cpu: CpuId, kind: InvpcidType) {
        let c = &self.machine.costs;
        let (cycles, counter) = match kind {
            InvpcidType::Individual(..) => {
                (c.invpcid_individual_cycles, Counter::InvpcidIndividual)
            }
            InvpcidType::SingleContext(_) => (
                c.invpcid_single_context_cycles,
                Counter::InvpcidSingleContext,
            ),
            InvpcidType::AllInclGlobal => (
                c.invpcid_all_incl_global_cycles,
                Counter::InvpcidAllInclGlobal,
            ),
            InvpcidType::AllNonGlobal => (
                c.invpcid_all_non_global_cycles,
                Counter::InvpcidAllNonGlobal,
            ),
        };
        let cycles = cycles
            .expect("INVPCID on a CPU without it: a defense must check cpu.features.invpcid")
            as f64;
        match kind {
            InvpcidType::Individual(pcid, va) if self.holds_no_translation(cpu, va) => {
                self.cpus[cpu].mmu.forget_paging_structures(pcid)
            }
            _ => self.cpus[cpu].mmu.invpcid(kind),
        }
        self.cpus[cpu].stats.count(counter);
        self.compute(cpu, cycles, TimeCategory::TlbInvalidate);
    }

    /// Runs the oracle at a return to user mode, as often as `config.oracle` asks.
    pub(crate) fn check_at_user_return(&mut self, cpu: CpuId) {
        self.returns_to_user += 1;
        let due = self.config.oracle.due(self.returns_to_user);
        if !due && self.oracle_probe.is_none() {
            return;
        }
        let mut found: Vec<Violation> = coherence::check(self, cpu).into_iter().collect();
        for d in &self.defenses {
            if let Some(v) = d.check_user_mode(self, cpu) {
                found.push(v);
            }
        }
        if let Some(probe) = self.oracle_probe.as_mut() {
            *probe |= !found.is_empty();
        }
        if due {
            self.violations.extend(found);
        }
    }

    /// All CPUs' stats added up.
    pub fn total_stats(&self) -> Stats {
        let mut s = Stats::default();
        for c in &self.cpus {
            s.merge(&c.stats);
        }
        s
    }
}
