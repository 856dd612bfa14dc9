//! The stats registry: plain arrays of counters and time, indexed by closed enums whose
//! names follow Linux's own (vmstat `nr_tlb_*`, `tlb:tlb_flush` reasons, perf events).

use super::Time;

/// Declares a closed enum with a stable name per variant and an array-backed index.
macro_rules! named_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($(#[$vm])* $v),+ }
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$v),+];
            pub const COUNT: usize = Self::ALL.len();
            pub fn name(self) -> &'static str {
                match self { $($name::$v => $s),+ }
            }
        }
    };
}

named_enum! {
    /// Where simulated time goes (a perf-stat-like breakdown).
    TimeCategory {
        /// User-mode work of the workload.
        User = "user",
        /// TLB refills (STLB hits, page walks) of user-mode accesses.
        UserTlbRefill = "user-tlb-refill",
        /// Kernel work of the unhardened path (syscall bodies, fault handling, scheduling).
        Kernel = "kernel",
        /// TLB refills of kernel-mode accesses.
        KernelTlbRefill = "kernel-tlb-refill",
        /// Waits for kernel text and data lines that missed L1 (kernel/paths/run.rs).
        KernelCacheMiss = "kernel-cache-miss",
        /// SYSCALL/SYSRET (or SVC/ERET) instructions.
        SyscallInsn = "syscall-insn",
        /// Exception and interrupt entry/exit (page faults, IPIs).
        InterruptEntry = "interrupt-entry",
        /// Extra entry/exit code a defense adds (trampolines, stack copies).
        EntryTrampoline = "entry-trampoline",
        /// MOV to CR3 (or TTBR writes).
        Cr3Write = "cr3-write",
        /// INVLPG / INVPCID / TLBI instructions and full flushes.
        TlbInvalidate = "tlb-invalidate",
        /// Sending IPIs (queueing the call, writing the ICR).
        IpiSend = "ipi-send",
        /// Waiting for other CPUs to acknowledge a shootdown.
        IpiWait = "ipi-wait",
        /// An IPI handler's waits for the lines the initiator wrote (its call queue, the
        /// request); the handler's own code, data and work are its kernel path's (kernel,
        /// kernel-cache-miss), the flush its own.
        IpiHandler = "ipi-handler",
        /// Direct-map lookups and changes (lookup_address, set_kpte, splitting large pages).
        DirectMap = "direct-map",
        /// Locked read-modify-writes a defense adds to the kernel's paths (XPFO's page-flag
        /// bits, map count and per-page lock), at the machine's locked_rmw_cycles each.
        LockedRmw = "locked-rmw",
        /// Refcount operations (checked or not).
        Refcount = "refcount",
        /// Waiting for a kernel cache line another CPU holds (global masks, shared counters),
        /// outside the IPI path, which charges its own lines to ipi-*.
        SharedLine = "shared-line",
        /// Kernel work no modelled mechanism derives, charged at a rate an experiment fitted
        /// to a published figure (BootConfig::xpfo_page_cycles).
        Fitted = "fitted",
        /// Hard-IRQ time that interrupted user mode, under tick-sampled accounting: the tick
        /// that follows the interrupt finds user mode, so time(1) counts it as user time.
        IrqInUser = "irq-in-user",
        /// VM exits and entries with the hypervisor's handling (a guest's EPT violations).
        VmExit = "vm-exit",
        /// Hard-IRQ time charged to no task (CONFIG_IRQ_TIME_ACCOUNTING: the CPU's irq column
        /// in /proc/stat), neither user nor system time of the interrupted task.
        Irq = "irq",
    }
}

impl TimeCategory {
    /// Time perf and time(1) count as user time.
    pub fn is_user(self) -> bool {
        matches!(
            self,
            TimeCategory::User | TimeCategory::UserTlbRefill | TimeCategory::IrqInUser
        )
    }

    /// Time perf and time(1) count as system time: everything not user and not irq.
    pub fn is_system(self) -> bool {
        !self.is_user() && self != TimeCategory::Irq
    }
}

named_enum! {
    /// Event counts. Names follow Linux where Linux has one.
    Counter {
        Syscalls = "syscalls",
        KernelEntries = "kernel_entries",
        Cr3WriteFlush = "cr3_write_flush",
        Cr3WriteNoflush = "cr3_write_noflush",
        ItlbL1Hit = "itlb_l1_hit",
        DtlbL1Hit = "dtlb_l1_hit",
        StlbHit = "stlb_hit",
        /// perf's dtlb_load_misses.miss_causes_a_walk + itlb_misses.miss_causes_a_walk.
        PageWalks = "page_walks",
        WalkLoadsL1 = "page_walker_loads.l1",
        WalkLoadsL2 = "page_walker_loads.l2",
        WalkLoadsLlc = "page_walker_loads.l3",
        WalkLoadsDram = "page_walker_loads.memory",
        PscHits = "paging_structure_cache_hits",
        /// Kernel text lines fetched and kernel data lines touched by footprint paths.
        KernelTextLines = "kernel_text_lines",
        KernelDataLines = "kernel_data_lines",
        /// Of those, lines that missed L1 (L1I or L1D), came from DRAM, and from another
        /// node's DRAM.
        KernelLineL1Misses = "kernel_lines.l1_miss",
        KernelLinesFromMemory = "kernel_lines.memory",
        KernelLinesFromRemoteMemory = "kernel_lines.remote_memory",
        /// Kernel text lines that came from DRAM, and of those from another node's DRAM.
        KernelTextFromMemory = "kernel_text.memory",
        KernelTextFromRemoteMemory = "kernel_text.remote_memory",
        /// Lines a page clear, page copy or object initialisation stored that came from
        /// DRAM (kernel/paths/run.rs store_lines).
        KernelStoreLinesFromMemory = "kernel_store_lines.memory",
        /// struct page lines the page allocator touched that came from DRAM
        /// (kernel/memory/struct_page.rs).
        StructPagesFromMemory = "struct_page.memory",
        /// Page-walk loads served by another node's DRAM.
        WalkLoadsRemoteDram = "page_walker_loads.remote_memory",
        /// In a guest: walks of the EPT (guest-physical mapping cache misses), their loads,
        /// and EPT violations (exits to the hypervisor, which maps the page).
        EptWalks = "ept_walks",
        EptWalkLoads = "ept_walk_loads",
        EptViolations = "ept_violations",
        /// MOV to CR0 (KERNEXEC's CR0.WP toggles).
        Cr0Writes = "cr0_writes",
        /// Kernel text lines written by text_poke() (one per copy of the text).
        TextLineWrites = "text_line_writes",
        Invlpg = "invlpg",
        InvpcidIndividual = "invpcid_individual",
        InvpcidSingleContext = "invpcid_single_context",
        InvpcidAllInclGlobal = "invpcid_all_incl_global",
        InvpcidAllNonGlobal = "invpcid_all_non_global",
        /// vmstat: a local flush of the whole (non-global) TLB.
        NrTlbLocalFlushAll = "nr_tlb_local_flush_all",
        /// vmstat: a local flush of single pages.
        NrTlbLocalFlushOne = "nr_tlb_local_flush_one",
        /// vmstat: shootdown requests sent to other CPUs.
        NrTlbRemoteFlush = "nr_tlb_remote_flush",
        /// vmstat: shootdown requests received from other CPUs.
        NrTlbRemoteFlushReceived = "nr_tlb_remote_flush_received",
        /// Broadcast invalidations (INVLPGB, TLBI IS) issued.
        BroadcastInvalidations = "broadcast_invalidations",
        /// IPIs sent (one per target CPU of each call).
        IpisSent = "ipis_sent",
        /// IPIs that woke an idle CPU.
        IpisToIdle = "ipis_to_idle",
        ContextSwitches = "context_switches",
        /// Local timer interrupts taken by busy CPUs (the scheduler tick).
        TimerTicks = "timer_ticks",
        Migrations = "cpu_migrations",
        /// Tasks the periodic load balancer pulled (schedstat lb_gained).
        LoadBalancePulls = "lb_gained",
        /// Idle CPUs woken to pull waiting tasks (nohz idle-balance kicks).
        NohzBalanceKicks = "nohz_balance_kicks",
        Forks = "forks",
        Execs = "execs",
        PagesAllocated = "pages_allocated",
        PagesFreed = "pages_freed",
        DirectMapSplits = "direct_map_splits",
        PageFaults = "page_faults",
        RefcountOps = "refcount_ops",
        /// Misses on kernel lines shared between CPUs outside the IPI path (kernel/tlb/shared_line.rs).
        SharedLineTransfers = "shared_line_transfers",
        /// Cycles of recorded kernel-path work left out for the speculation mitigations the
        /// kernel does not run (kernel/mitigations.rs), rounded per path run.
        MitigationCyclesLeftOut = "mitigation_cycles_left_out",
    }
}

named_enum! {
    /// Linux's `enum tlb_flush_reason` (include/linux/mm_types.h), the `tlb:tlb_flush` reasons.
    FlushReason {
        TaskSwitch = "TLB_FLUSH_ON_TASK_SWITCH",
        RemoteShootdown = "TLB_REMOTE_SHOOTDOWN",
        LocalShootdown = "TLB_LOCAL_SHOOTDOWN",
        LocalMmShootdown = "TLB_LOCAL_MM_SHOOTDOWN",
        RemoteSendIpi = "TLB_REMOTE_SEND_IPI",
    }
}

/// A counter a plug-in owns: a slot its registry entry assigns (defense::registry), so the
/// engine's own enum lists only kernel and hardware events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnedCounter(pub u8);

/// Slots for plug-in counters.
pub const OWNED_COUNTERS: usize = 24;

/// All stats of one simulation. Plain arrays: updating one is an index and an add.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    time: [Time; TimeCategory::COUNT],
    counters: [u64; Counter::COUNT],
    flushes: [u64; FlushReason::COUNT],
    owned: [u64; OWNED_COUNTERS],
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            time: [Time::ZERO; TimeCategory::COUNT],
            counters: [0; Counter::COUNT],
            flushes: [0; FlushReason::COUNT],
            owned: [0; OWNED_COUNTERS],
        }
    }
}

impl Stats {
    pub fn add_time(&mut self, c: TimeCategory, t: Time) {
        self.time[c as usize] += t;
    }
    /// Takes back time charged to `c` (at most what it holds).
    pub fn remove_time(&mut self, c: TimeCategory, t: Time) {
        let slot = &mut self.time[c as usize];
        *slot = *slot - t;
    }
    pub fn count(&mut self, c: Counter) {
        self.counters[c as usize] += 1;
    }
    pub fn add(&mut self, c: Counter, n: u64) {
        self.counters[c as usize] += n;
    }
    pub fn count_owned(&mut self, c: OwnedCounter) {
        self.owned[c.0 as usize] += 1;
    }
    pub fn add_owned(&mut self, c: OwnedCounter, n: u64) {
        self.owned[c.0 as usize] += n;
    }
    pub fn owned(&self, c: OwnedCounter) -> u64 {
        self.owned[c.0 as usize]
    }
    pub fn flush(&mut self, r: FlushReason) {
        self.flushes[r as usize] += 1;
    }
    pub fn time(&self, c: TimeCategory) -> Time {
        self.time[c as usize]
    }
    pub fn counter(&self, c: Counter) -> u64 {
        self.counters[c as usize]
    }
    pub fn flushes(&self, r: FlushReason) -> u64 {
        self.flushes[r as usize]
    }
    pub fn system_time(&self) -> Time {
        TimeCategory::ALL
            .iter()
            .filter(|c| c.is_system())
            .fold(Time::ZERO, |a, &c| a + self.time(c))
    }
    pub fn user_time(&self) -> Time {
        TimeCategory::ALL
            .iter()
            .filter(|c| c.is_user())
            .fold(Time::ZERO, |a, &c| a + self.time(c))
    }
    pub fn total_time(&self) -> Time {
        self.time.iter().fold(Time::ZERO, |a, &t| a + t)
    }
    /// Subtracts an earlier snapshot, leaving what happened since.
    pub fn subtract(&mut self, earlier: &Stats) {
        for (a, b) in self.time.iter_mut().zip(&earlier.time) {
            *a = *a - *b;
        }
        for (a, b) in self.counters.iter_mut().zip(&earlier.counters) {
            *a -= b;
        }
        for (a, b) in self.flushes.iter_mut().zip(&earlier.flushes) {
            *a -= b;
        }
        for (a, b) in self.owned.iter_mut().zip(&earlier.owned) {
            *a -= b;
        }
    }
    /// Adds `other` `times` times over (kernel/steady.rs: the stats of repeated iterations).
    pub fn add_times(&mut self, other: &Stats, times: u64) {
        for (a, b) in self.time.iter_mut().zip(&other.time) {
            *a += Time(b.0 * times);
        }
        let events = [
            (&mut self.counters[..], &other.counters[..]),
            (&mut self.flushes[..], &other.flushes[..]),
            (&mut self.owned[..], &other.owned[..]),
        ];
        for (mine, theirs) in events {
            for (a, b) in mine.iter_mut().zip(theirs) {
                *a += b * times;
            }
        }
    }
    /// Adds every counter of `other` (e.g. per-CPU stats into a machine total).
    pub fn merge(&mut self, other: &Stats) {
        for (a, b) in self.time.iter_mut().zip(&other.time) {
            *a += *b;
        }
        self.merge_events(other);
    }
    /// Adds `other`'s counters and flushes but not its time.
    pub fn merge_events(&mut self, other: &Stats) {
        for (a, b) in self.counters.iter_mut().zip(&other.counters) {
            *a += b;
        }
        for (a, b) in self.flushes.iter_mut().zip(&other.flushes) {
            *a += b;
        }
        for (a, b) in self.owned.iter_mut().zip(&other.owned) {
            *a += b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn merge_adds_everything() {
        let mut a = Stats::default();
        a.count(Counter::PageWalks);
        a.add_time(TimeCategory::User, Time(10));
        let mut b = a.clone();
        b.flush(FlushReason::TaskSwitch);
        a.merge(&b);
        assert_eq!(a.counter(Counter::PageWalks), 2);
        assert_eq!(a.time(TimeCategory::User), Time(20));
        assert_eq!(a.flushes(FlushReason::TaskSwitch), 1);
        assert_eq!(a.total_time(), Time(20));
    }
}
