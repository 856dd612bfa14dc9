//! Inter-processor interrupts: smp_call_function_many() with its real costs. The initiator
//! queues a call for each target (a cache-line write to the target's queue), writes the APIC
//! ICR once per target, then spins until every target has run the function and released
//! its call slot. A target pays interrupt entry/exit and the handler; an idle target first
//! leaves its C-state.

use super::cpuset::CpuSet;
use super::{CpuId, Kernel, MmId};
use crate::arch::x86::VirtAddr;
use crate::sim::{Counter, FlushReason, Time, TimeCategory};

/// The function a target CPU runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpiWork {
    FlushTlbMm { mm: MmId, start: VirtAddr, pages: u64, new_gen: u64 },
    FlushTlbKernel { start: VirtAddr, pages: u64 },
}

/// Cycles of the generic IPI handler around the function (flush_smp_call_function_queue:
/// take the per-CPU list, run each call, release the slot). ESTIMATE: ~50 instructions and
/// two cache-line accesses already counted as transfers.
const CALL_FUNCTION_HANDLER_CYCLES: f64 = 150.0;

impl Kernel {
    /// Which socket a CPU sits on, and whether two CPUs are SMT siblings.
    fn socket_of(&self, cpu: CpuId) -> usize {
        let t = &self.machine.topology;
        cpu / (t.cores_per_socket * t.threads_per_core) as usize
    }
    fn same_core(&self, a: CpuId, b: CpuId) -> bool {
        let tpc = self.machine.topology.threads_per_core as usize;
        a / tpc == b / tpc
    }

    /// Latency of one cache-line transfer between two CPUs (call queueing, acknowledgement):
    /// an LLC hit on one socket, a remote-memory access across sockets.
    fn line_transfer(&self, a: CpuId, b: CpuId) -> Time {
        if self.socket_of(a) == self.socket_of(b) {
            self.clock.cycles(self.machine.memory.llc_hit_cycles as f64)
        } else {
            Time::from_ns(self.machine.memory.dram_remote_ns)
        }
    }

    fn ipi_latency(&self, a: CpuId, b: CpuId) -> Time {
        let l = &self.machine.costs.ipi_latency_ns;
        Time::from_ns(if self.same_core(a, b) {
            l.same_core_ns
        } else if self.socket_of(a) == self.socket_of(b) {
            l.same_socket_ns
        } else {
            l.remote_socket_ns
        })
    }

    /// Runs `work` on every CPU in `targets` (not including `cpu`) and waits for all of them.
    pub fn smp_call_function_many(&mut self, cpu: CpuId, targets: &CpuSet, work: IpiWork) {
        if self.fast_forward {
            // Fast-forwarded history: a page-sized kernel flush reached CPUs that had never
            // touched the page (nothing ran before the simulation), so only full flushes
            // (after direct-map splits) and user-mm flushes change remote TLBs.
            if !matches!(work, IpiWork::FlushTlbKernel { pages, .. } if pages <= self.config.tlb_single_page_flush_ceiling) {
                for t in targets.iter() {
                    self.run_handler_work(t, work);
                }
            }
            return;
        }
        let send_cycles = self.machine.costs.ipi_send_cycles as f64;
        // Queue a call on each target, then send the IPIs.
        let mut sent = Vec::with_capacity(targets.len());
        for t in targets.iter() {
            let queue = self.line_transfer(cpu, t);
            let c = &mut self.cpus[cpu];
            c.now += queue;
            c.stats.add_time(TimeCategory::IpiSend, queue);
            self.compute(cpu, send_cycles, TimeCategory::IpiSend);
            self.cpus[cpu].stats.count(Counter::IpisSent);
            sent.push((t, self.cpus[cpu].now));
        }
        let mut last_ack = self.cpus[cpu].now;
        for (t, at) in sent {
            let arrival = at + self.ipi_latency(cpu, t);
            let done = self.run_ipi_handler(t, arrival, work);
            last_ack = last_ack.max(done + self.line_transfer(t, cpu));
        }
        let c = &mut self.cpus[cpu];
        if last_ack > c.now {
            let wait = last_ack - c.now;
            c.stats.add_time(TimeCategory::IpiWait, wait);
            self.spin_until[cpu] = last_ack;
            c.now = last_ack;
        }
        c.stats.add(Counter::NrTlbRemoteFlush, 1);
    }

    /// The target side: returns when the handler finished. A target serves its IPIs one at
    /// a time: a request arriving while the target is still in its call-function handler is
    /// drained by that same interrupt (no new entry, Linux flush_smp_call_function_queue), so
    /// under an IPI storm requests queue up behind each other. A busy target's clock moves by
    /// the handler's cost (the interrupt steals it from the running task); an idle one first
    /// leaves its C-state.
    fn run_ipi_handler(&mut self, t: CpuId, arrival: Time, work: IpiWork) -> Time {
        let idle = self.cpus[t].current.is_none();
        let booking = self.irq_calendar[t].place(arrival);
        let mut start = booking.start;
        if idle && !booking.drained {
            self.cpus[t].idle_stats.count(Counter::IpisToIdle);
            start += self.idle_exit_latency(t, arrival);
            let c = &mut self.cpus[t];
            c.now = c.now.max(start);
        }
        let before = self.cpus[t].now;
        if idle {
            let c = &mut self.cpus[t];
            std::mem::swap(&mut c.stats, &mut c.idle_stats);
        }
        let was_user = std::mem::replace(&mut self.cpus[t].user_mode, false) && !idle;
        if !booking.drained {
            let entry = self.machine.costs.interrupt_entry_cycles as f64;
            self.compute(t, entry, TimeCategory::InterruptEntry);
            if was_user {
                self.with_defenses(|d, k| d.on_kernel_entry(k, t));
            }
        }
        self.compute(t, CALL_FUNCTION_HANDLER_CYCLES, TimeCategory::IpiHandler);
        self.run_handler_work(t, work);
        if was_user && !booking.drained {
            self.with_defenses(|d, k| d.on_kernel_exit(k, t));
        }
        self.cpus[t].user_mode = was_user;
        self.cpus[t].stats.count(Counter::NrTlbRemoteFlushReceived);
        if idle {
            let c = &mut self.cpus[t];
            std::mem::swap(&mut c.stats, &mut c.idle_stats);
        }
        let took = self.cpus[t].now - before;
        let done = start + took;
        self.irq_calendar[t].book(booking, arrival, done);
        // A target spinning for its own shootdown's acknowledgements takes the interrupt
        // inside that spin (interrupts stay enabled in csd_lock_wait): the handler replaces
        // spin time instead of adding to it.
        if !idle && start < self.spin_until[t] {
            let overlap = took.min(self.spin_until[t] - start);
            let c = &mut self.cpus[t];
            c.now = c.now - overlap;
            c.stats.remove_time(TimeCategory::IpiWait, overlap);
        }
        done
    }

    fn run_handler_work(&mut self, t: CpuId, work: IpiWork) {
        match work {
            IpiWork::FlushTlbMm { mm, start, pages, new_gen } => self.flush_tlb_func(t, mm, start, pages, new_gen, FlushReason::RemoteShootdown),
            IpiWork::FlushTlbKernel { start, pages } => self.flush_kernel_range_local(t, start, pages, FlushReason::RemoteShootdown),
        }
    }

    /// Exit latency of the C-state an idle CPU is in when woken at `at`: the deepest state
    /// whose target residency the CPU's recent idle intervals justify (a menu-governor-like
    /// choice), then that interval estimate is updated.
    pub(crate) fn idle_exit_latency(&mut self, cpu: CpuId, at: Time) -> Time {
        let c = &mut self.cpus[cpu];
        let slept = (at - c.now).ns();
        let predicted = c.idle_estimate_ns;
        c.idle_estimate_ns = 0.75 * c.idle_estimate_ns + 0.25 * slept;
        let state = self.machine.cstates.iter().rev().find(|s| s.target_residency_us * 1000.0 <= predicted);
        state.map_or(Time::ZERO, |s| Time::from_ns(s.exit_latency_us * 1000.0))
    }
}
