//! Inter-processor interrupts: smp_call_function_many() (kernel/smp.c, 4.20) with its real
//! costs, including the cache lines it moves between CPUs.
//!
//! Initiator, per target: csd_lock() reads its call slot for that target (last written by the
//! target when it released the slot), llist_add() writes the target's call queue, one APIC
//! ICR write. Then it spins on each slot until the target releases it; those reads overlap
//! (speculative loads), so only the last acknowledgement's transfer is waited for in full.
//! Target, per interrupt: entry/exit and llist_del_all() of its queue (written by the
//! initiator); per request: read the slot and the initiator's flush_tlb_info, run the
//! function, write the slot's flag to release it. An idle target first leaves its C-state.

use crate::arch::x86::VirtAddr;
use crate::kernel::{CpuId, Kernel, MmId};
use crate::sim::CpuSet;
use crate::sim::{Counter, FlushReason, Time, TimeCategory};

/// The function a target CPU runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpiWork {
    FlushTlbMm {
        mm: MmId,
        start: VirtAddr,
        pages: u64,
        new_gen: u64,
    },
    FlushTlbKernel {
        start: VirtAddr,
        pages: u64,
    },
    /// do_sync_core() after a text patch: a serialising instruction, nothing to flush.
    SyncCore,
}

impl IpiWork {
    /// The recorded handler path (kernels/): the interrupt's entry and exit, the queue's
    /// drain and the callback. A text patch's do_sync_core() has no recording of its own;
    /// membarrier's ipi_mb() is the nearest, a callback that does nothing but a barrier.
    fn handler_path(self) -> &'static str {
        match self {
            IpiWork::FlushTlbMm { .. } | IpiWork::FlushTlbKernel { .. } => "ipi-tlb-flush",
            IpiWork::SyncCore => "ipi-membarrier",
        }
    }
}

/// How far apart two CPUs are (Kernel::distance).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Distance {
    SameCore,
    SameSocket,
    OtherSocket,
}

impl Kernel {
    /// Which socket a CPU sits on, and whether two CPUs are SMT siblings.
    pub(in crate::kernel) fn socket_of(&self, cpu: CpuId) -> usize {
        let t = &self.machine.topology;
        cpu / (t.cores_per_socket * t.threads_per_core) as usize
    }
    fn same_core(&self, a: CpuId, b: CpuId) -> bool {
        let tpc = self.machine.topology.threads_per_core as usize;
        a / tpc == b / tpc
    }

    /// Latency of one cache-line transfer between two CPUs (call queueing, acknowledgement):
    /// the profile's core-to-core latency, else an L2 hit between SMT siblings, an LLC hit on
    /// one socket, a remote-memory access across sockets.
    pub(super) fn line_transfer(&self, a: CpuId, b: CpuId) -> Time {
        self.transfer_over(self.distance(a, b))
    }

    /// How far apart two CPUs are, for what a transfer between them costs.
    pub(super) fn distance(&self, a: CpuId, b: CpuId) -> Distance {
        if self.same_core(a, b) {
            Distance::SameCore
        } else if self.socket_of(a) == self.socket_of(b) {
            Distance::SameSocket
        } else {
            Distance::OtherSocket
        }
    }

    /// line_transfer() between two CPUs `d` apart.
    pub(super) fn transfer_over(&self, d: Distance) -> Time {
        let (m, l) = (&self.machine.memory, &self.machine.costs.line_transfer_ns);
        match d {
            Distance::SameCore => l
                .same_core_ns
                .map_or_else(|| self.clock.cycles(m.l2_hit_cycles as f64), Time::from_ns),
            Distance::SameSocket => l
                .same_socket_ns
                .map_or_else(|| self.clock.cycles(m.llc_hit_cycles as f64), Time::from_ns),
            Distance::OtherSocket => Time::from_ns(l.remote_socket_ns.unwrap_or(m.dram_remote_ns)),
        }
    }

    /// Which APIC write reaches `cpu`: with the profile's `ipi_cpus_per_write` = n, the
    /// CPUs of a socket go n to a write in CPU (APIC ID) order. Linux's x2APIC cluster mode
    /// groups 16 APIC IDs (arch/x86/kernel/apic/x2apic_cluster.c); the model's IDs have no
    /// holes, so a socket whose real IDs do (a 24-core Skylake-SP's) needs a write or two
    /// more than modelled.
    fn ipi_write_group(&self, cpu: CpuId) -> usize {
        let t = &self.machine.topology;
        let per_socket = (t.cores_per_socket * t.threads_per_core) as usize;
        let per_write = self.machine.costs.ipi_cpus_per_write.unwrap_or(1) as usize;
        let socket = cpu / per_socket;
        socket * per_socket.div_ceil(per_write) + (cpu % per_socket) / per_write
    }

    pub fn ipi_latency(&self, a: CpuId, b: CpuId) -> Time {
        let l = &self.machine.costs.ipi_latency_ns;
        Time::from_ns(match self.distance(a, b) {
            Distance::SameCore => l.same_core_ns,
            Distance::SameSocket => l.same_socket_ns,
            Distance::OtherSocket => l.remote_socket_ns,
        })
    }

    /// Runs `work` on every CPU in `targets` (not including `cpu`) and waits for all of them.
    pub fn smp_call_function_many(&mut self, cpu: CpuId, targets: &CpuSet, work: IpiWork) {
        self.note_clock_read();
        if self.fast_forward {
            // Fast-forwarded history: a page-sized kernel flush reached CPUs that had never
            // touched the page (nothing ran before the simulation), so only full flushes
            // (after direct-map splits) and user-mm flushes change remote TLBs.
            if !matches!(work, IpiWork::FlushTlbKernel { pages, .. } if pages <= self.params.tlb_single_page_flush_ceiling)
            {
                for t in targets.iter() {
                    self.run_handler_work(t, work);
                }
            }
            return;
        }
        // Queue a call on each target first (csd_lock() reads the slot the target released,
        // llist_add() its queue), then send: one APIC write per destination group of the
        // targets (arch_send_call_function_ipi_mask; groups in CPU order).
        for t in targets.iter() {
            let lines = self.line_transfer(cpu, t) * 2;
            let c = &mut self.cpus[cpu];
            c.now += lines;
            c.stats.add_time(TimeCategory::IpiSend, lines);
        }
        let send_cycles = self.machine.costs.ipi_send_cycles as f64;
        let mut sent = Vec::with_capacity(targets.len());
        let mut group = None;
        for t in targets.iter() {
            let g = self.ipi_write_group(t);
            if group != Some(g) {
                group = Some(g);
                self.compute(cpu, send_cycles, TimeCategory::IpiSend);
            }
            self.cpus[cpu].stats.count(Counter::IpisSent);
            sent.push((t, self.cpus[cpu].now));
        }
        let mut last_ack = self.cpus[cpu].now;
        for (t, at) in sent {
            let arrival = at + self.ipi_latency(cpu, t);
            let done = self.run_ipi_handler(t, cpu, arrival, work);
            last_ack = last_ack.max(done + self.line_transfer(t, cpu));
        }
        let c = &mut self.cpus[cpu];
        if last_ack > c.now {
            let wait = last_ack - c.now;
            c.stats.add_time(TimeCategory::IpiWait, wait);
            c.spin_until = last_ack;
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
    fn run_ipi_handler(
        &mut self,
        t: CpuId,
        initiator: CpuId,
        arrival: Time,
        work: IpiWork,
    ) -> Time {
        let idle = self.cpus[t].current.is_none();
        let booking = self.cpus[t].irq_calendar.place(arrival);
        let mut start = booking.start;
        if idle && !booking.drained {
            self.cpus[t].idle_stats.count(Counter::IpisToIdle);
            start += self.idle_exit_latency(t, arrival);
            let c = &mut self.cpus[t];
            c.now = c.now.max(start);
        }
        let before = self.cpus[t].now;
        // The target's page tables are those of its present mode (PTI switches them on entry
        // from user mode), but what the interrupt interrupted, and so whose time it is under
        // tick accounting, is the mode at the moment it arrived, which the target may have
        // simulated past already, or not reached yet (mode_log.rs).
        let was_user = self.cpus[t].user_mode && !idle;
        // Where the handler's time goes: the idle task's, the interrupted task's system time,
        // or (other accounting) a bucket moved afterwards.
        let set_aside = !idle
            && match self.params.irq_time {
                crate::kernel::IrqTime::TaskSystem => false,
                crate::kernel::IrqTime::Tick => {
                    let c = &mut self.cpus[t];
                    c.mode_log.interrupted_user(arrival, c.now, c.user_mode)
                }
                crate::kernel::IrqTime::Excluded => true,
            };
        let mut aside = crate::sim::Stats::default();
        if idle {
            let c = &mut self.cpus[t];
            std::mem::swap(&mut c.stats, &mut c.idle_stats);
        } else if set_aside {
            std::mem::swap(&mut self.cpus[t].stats, &mut aside);
        }
        self.cpus[t].user_mode = false;
        let transfer = self.line_transfer(initiator, t);
        let handler = self.params.call_function_handler_cycles;
        if booking.drained {
            // The interrupt already running drains the request: the callback's work alone.
            self.compute(t, handler, TimeCategory::Kernel);
        } else {
            let entry =
                self.machine.costs.interrupt_entry_cycles as f64 + self.params.irq_path_cycles;
            self.compute(t, entry, TimeCategory::InterruptEntry);
            if was_user {
                self.with_defenses(|d, k| d.on_kernel_entry(k, t));
            }
            // llist_del_all() of the queue the initiator wrote.
            self.stall(t, transfer, TimeCategory::IpiHandler);
            // The handler's recorded code and data through the target's TLBs and caches,
            // with the estimated callback work.
            let path = work.handler_path();
            if let Err(e) = self.run_known_path(
                t,
                path,
                crate::kernel::paths::path_work::Work::Cycles(handler),
            ) {
                panic!("IPI handler: {e}");
            }
        }
        self.stall(
            t,
            transfer * self.params.ipi_lines_per_request as u64,
            TimeCategory::IpiHandler,
        );
        self.run_handler_work(t, work);
        if was_user && !booking.drained {
            self.with_defenses(|d, k| d.on_kernel_exit(k, t));
        }
        self.cpus[t].user_mode = was_user;
        self.cpus[t].stats.count(Counter::NrTlbRemoteFlushReceived);
        if idle {
            let c = &mut self.cpus[t];
            std::mem::swap(&mut c.stats, &mut c.idle_stats);
        } else if set_aside {
            let c = &mut self.cpus[t];
            std::mem::swap(&mut c.stats, &mut aside);
            c.stats.merge_events(&aside);
            let bucket = if self.params.irq_time == crate::kernel::IrqTime::Tick {
                TimeCategory::IrqInUser
            } else {
                TimeCategory::Irq
            };
            c.stats.add_time(bucket, aside.total_time());
        }
        let took = self.cpus[t].now - before;
        let done = start + took;
        self.cpus[t].irq_calendar.book(booking, arrival, done);
        // A target spinning for its own shootdown's acknowledgements takes the interrupt
        // inside that spin (interrupts stay enabled in csd_lock_wait): the handler replaces
        // spin time instead of adding to it.
        if !idle && start < self.cpus[t].spin_until {
            let overlap = took.min(self.cpus[t].spin_until - start);
            let c = &mut self.cpus[t];
            c.now = c.now - overlap;
            c.stats.remove_time(TimeCategory::IpiWait, overlap);
        }
        done
    }

    /// `cpu` waits `d` for cache lines.
    pub(super) fn stall(&mut self, cpu: CpuId, d: Time, category: TimeCategory) {
        let c = &mut self.cpus[cpu];
        c.now += d;
        c.stats.add_time(category, d);
    }

    fn run_handler_work(&mut self, t: CpuId, work: IpiWork) {
        match work {
            IpiWork::FlushTlbMm {
                mm,
                start,
                pages,
                new_gen,
            } => self.flush_tlb_func(t, mm, start, pages, new_gen, FlushReason::RemoteShootdown),
            IpiWork::FlushTlbKernel { start, pages } => {
                self.flush_kernel_range_local(t, start, pages, FlushReason::RemoteShootdown)
            }
            IpiWork::SyncCore => {}
        }
    }

    /// Exit latency of the C-state an idle CPU is in when woken at `at`: the deepest state
    /// whose target residency the CPU's recent idle intervals justify (a menu-governor-like
    /// choice), then that interval estimate is updated.
    pub(crate) fn idle_exit_latency(&mut self, cpu: CpuId, at: Time) -> Time {
        self.note_clock_read();
        let c = &mut self.cpus[cpu];
        let slept = (at - c.now).ns();
        let predicted = c.idle_estimate_ns;
        c.idle_estimate_ns = 0.75 * c.idle_estimate_ns + 0.25 * slept;
        let state = self
            .machine
            .cstates
            .iter()
            .rev()
            .find(|s| s.target_residency_us * 1000.0 <= predicted);
        state.map_or(Time::ZERO, |s| Time::from_ns(s.exit_latency_us * 1000.0))
    }
}

#[cfg(test)]
mod tests {
    use crate::arch::x86::VirtAddr;
    use crate::kernel::memory::layout;
    use crate::kernel::{IrqTime, Kernel};
    use crate::sim::{Stats, TimeCategory};
    use crate::{defense, machine};

    /// CPU 0 flushes one kernel page everywhere while CPU 1 runs a task in user mode;
    /// returns CPU 1's stats.
    fn target_stats(irq_time: IrqTime) -> Stats {
        target_stats_after(irq_time, |_| {})
    }

    /// As target_stats, with CPU 1 first running `ahead` (which moves its clock past the
    /// moment the IPI arrives).
    fn target_stats_after(irq_time: IrqTime, ahead: impl FnOnce(&mut Kernel)) -> Stats {
        let params = crate::params::Params::linux()
            .with("kernel.irq_time", irq_time.name())
            .unwrap();
        let mut k = Kernel::boot_with(
            machine::load("ivybridge-i5-3550").unwrap(),
            defense::parse_list("none").unwrap(),
            &params,
            Default::default(),
        );
        for cpu in 0..2 {
            let t = k.spawn(&format!("t{cpu}"), None);
            k.switch_to(cpu, t);
            k.enter_user(cpu);
        }
        ahead(&mut k);
        let before = k.cpus[1].stats.clone();
        k.flush_tlb_kernel_range(0, VirtAddr(layout::DIRECT_MAP), 1);
        let mut s = k.cpus[1].stats.clone();
        s.subtract(&before);
        s
    }

    #[test]
    fn a_handler_on_a_user_task_is_its_system_user_or_no_time_by_accounting() {
        let precise = target_stats(IrqTime::TaskSystem);
        let handler = precise.system_time();
        assert!(
            handler.ns() > 0.0 && precise.time(TimeCategory::IpiHandler) > crate::sim::Time::ZERO
        );
        let tick = target_stats(IrqTime::Tick);
        assert_eq!(
            (tick.system_time(), tick.time(TimeCategory::IrqInUser)),
            (crate::sim::Time::ZERO, handler)
        );
        assert_eq!(
            tick.user_time(),
            handler,
            "the tick after the interrupt samples user mode"
        );
        let excluded = target_stats(IrqTime::Excluded);
        assert_eq!(excluded.time(TimeCategory::Irq), handler);
        assert_eq!(
            (excluded.system_time(), excluded.user_time()),
            (crate::sim::Time::ZERO, crate::sim::Time::ZERO)
        );
        for s in [&tick, &excluded] {
            assert_eq!(
                s.counter(crate::sim::Counter::NrTlbRemoteFlushReceived),
                1,
                "events are counted whoever pays"
            );
        }
    }

    /// The handler runs the recorded ipi-tlb-flush path, on a CPU running a task and on an
    /// idle one (whose handler stack is the CPU's own).
    #[test]
    fn a_handler_runs_its_recorded_path_on_a_busy_or_an_idle_cpu() {
        use crate::sim::Counter::KernelTextLines;
        let busy = target_stats(IrqTime::TaskSystem);
        let mut k = Kernel::boot(
            machine::load("ivybridge-i5-3550").unwrap(),
            defense::parse_list("none").unwrap(),
        );
        let path = k.paths.get(k.paths.id("ipi-tlb-flush").unwrap()).clone();
        assert!(
            path.heap_lines() > 0,
            "the trace measured the handler's data"
        );
        let t = k.spawn("t0", None);
        k.switch_to(0, t);
        k.flush_tlb_kernel_range(0, VirtAddr(layout::DIRECT_MAP), 1);
        let idle = &k.cpus[1].idle_stats;
        for s in [&busy, idle] {
            assert_eq!(s.counter(KernelTextLines), path.text_lines() as u64);
        }
    }

    #[test]
    fn under_tick_accounting_a_handler_is_system_time_if_it_arrived_in_kernel_mode() {
        // CPU 1 has already simulated a long system call (300 µs) and returned to user mode
        // when CPU 0, still at the start, sends its IPI: it lands inside that system call.
        let tick = target_stats_after(IrqTime::Tick, |k| {
            k.in_kernel(1, 0.0, |k| {
                k.compute(1, 1e6, TimeCategory::Kernel);
                Ok(())
            })
            .unwrap();
            assert!(k.cpus[1].user_mode);
        });
        assert!(tick.time(TimeCategory::IpiHandler) > crate::sim::Time::ZERO);
        assert_eq!(tick.time(TimeCategory::IrqInUser), crate::sim::Time::ZERO);
        assert_eq!(tick.user_time(), crate::sim::Time::ZERO);
    }

    /// CPU 0's time sending one kernel flush to every other CPU of `m`, with the profile's
    /// `ipi_cpus_per_write` replaced by `per_write`.
    fn broadcast_send_time(m: &str, per_write: Option<u32>) -> crate::sim::Time {
        let mut m = machine::load(m).unwrap();
        m.costs.ipi_cpus_per_write = per_write;
        let mut k = Kernel::boot(m, defense::parse_list("none").unwrap());
        let before = k.cpus[0].stats.time(TimeCategory::IpiSend);
        k.flush_tlb_kernel_range(0, VirtAddr(layout::DIRECT_MAP), 1);
        k.cpus[0].stats.time(TimeCategory::IpiSend) - before
    }

    #[test]
    fn one_apic_write_reaches_a_cluster_or_a_flat_logical_mask() {
        let k = Kernel::boot(
            machine::load("xeon-platinum-8160").unwrap(),
            defense::parse_list("none").unwrap(),
        );
        // Two sockets of 48 CPUs in clusters of 16: three writes per socket.
        let groups: Vec<usize> = [0, 15, 16, 47, 48, 95]
            .iter()
            .map(|&c| k.ipi_write_group(c))
            .collect();
        assert_eq!(groups, [0, 0, 1, 2, 3, 5]);
        // The i5's three other CPUs: one write (flat logical) against three (physical).
        let cycle = |m: &str| {
            let p = machine::load(m).unwrap();
            crate::sim::Time::from_ns(p.costs.ipi_send_cycles as f64 / p.cpu.frequency_ghz)
        };
        let (flat, physical) = (
            broadcast_send_time("ivybridge-i5-3550", Some(8)),
            broadcast_send_time("ivybridge-i5-3550", None),
        );
        let saved = (physical - flat).ns();
        assert!(
            (saved - 2.0 * cycle("ivybridge-i5-3550").ns()).abs() < 1e-6,
            "{saved} ns"
        );
    }
}
