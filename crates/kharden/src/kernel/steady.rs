//! Steady state: a loop whose iteration leaves the machine as it found it repeats itself.
//!
//! A workload that runs one operation again and again (a syscall loop) soon reaches a state
//! that each iteration gives back: the same lines in every cache in the same recency order,
//! the same TLB and paging-structure-cache entries, the same page tables and kernel objects.
//! The simulation is deterministic, so from such a state every further iteration does
//! exactly what the last one did: the same time on every CPU clock, the same counts. A probe
//! proves it for one iteration: the state before and after, written out without clocks,
//! stamps and memos (Kernel::canon), must be word for word the same, and nothing in the
//! iteration may have decided anything by a clock (an IPI's arrival, a timeslice, a shared
//! line's recent traffic: `note_clock_read`), since the clocks are what the canonical form
//! leaves out. The remaining iterations are then added at once (`repeat`), as exactly as
//! running them: `--exact` runs them one by one, and the tests compare the two.

use super::{Cpu, Kernel};
use crate::sim::{Canon, Stats, Time};

/// What one iteration did to every CPU and to the oracle's count of returns to user mode.
#[derive(Debug, Clone)]
pub struct Period {
    per_cpu: Vec<(Time, Stats, Stats)>,
    returns_to_user: u64,
    /// Per mm: how far its flush generation moved (compared only to the CPUs' record of it).
    tlb_gens: Vec<u64>,
}

/// The state before a probed iteration.
pub struct Probe {
    canon: Canon,
    per_cpu: Vec<(Time, Stats, Stats)>,
    returns_to_user: u64,
    clock_reads: u64,
    tlb_gens: Vec<u64>,
}

impl Kernel {
    /// A decision from a CPU clock (tlb/ipi.rs, sched/scheduler.rs, sched/balance.rs, tlb/shared_line.rs):
    /// an iteration that makes one is never taken for a period.
    pub(crate) fn note_clock_read(&self) {
        self.clock_reads.set(self.clock_reads.get() + 1);
    }

    /// Starts probing the iteration about to run.
    pub fn probe(&mut self) -> Probe {
        self.oracle_probe = Some(false);
        // Kept until the iteration ends: no bigger than its words.
        let mut canon = self.canon();
        canon.shrink_to_fit();
        Probe {
            canon,
            per_cpu: self.clock_and_stats(),
            returns_to_user: self.returns_to_user,
            clock_reads: self.clock_reads.get(),
            tlb_gens: self.mms.iter().map(|m| m.tlb_gen).collect(),
        }
    }

    /// After the probed iteration: its period when it left the state as it found it, the
    /// oracle found nothing at its returns to user mode and no clock decided anything.
    pub fn period(&mut self, p: Probe) -> Option<Period> {
        let oracle_clean = self.oracle_probe.take() == Some(false);
        if !oracle_clean
            || self.clock_reads.get() != p.clock_reads
            || !self.canon_into(Canon::checking(p.canon)).matches()
        {
            return None;
        }
        let per_cpu = self
            .clock_and_stats()
            .into_iter()
            .zip(p.per_cpu)
            .map(|((now, mut stats, mut idle), (now0, stats0, idle0))| {
                stats.subtract(&stats0);
                idle.subtract(&idle0);
                (now - now0, stats, idle)
            })
            .collect();
        let tlb_gens = self
            .mms
            .iter()
            .zip(&p.tlb_gens)
            .map(|(m, &g)| m.tlb_gen - g)
            .collect();
        Some(Period {
            per_cpu,
            returns_to_user: self.returns_to_user - p.returns_to_user,
            tlb_gens,
        })
    }

    /// `times` more iterations of `period`: every clock, log and count moves on as that many
    /// iterations would move it.
    pub fn repeat(&mut self, period: &Period, times: u64) {
        for (c, (dt, stats, idle)) in self.cpus.iter_mut().zip(&period.per_cpu) {
            let shift = Time(dt.0 * times);
            c.now += shift;
            c.mode_log.shift(shift);
            c.stats.add_times(stats, times);
            c.idle_stats.add_times(idle, times);
        }
        self.returns_to_user += period.returns_to_user * times;
        let mms = &self.mms;
        let by = |mm: usize, ctx: u64| {
            let m = mms.get(mm).filter(|m| m.ctx_id == ctx)?;
            Some((m.tlb_gen, period.tlb_gens.get(mm)? * times))
        };
        for c in self.cpus.iter_mut() {
            c.asid.shift_generations(by);
        }
        for (m, dgen) in self.mms.iter_mut().zip(&period.tlb_gens) {
            m.tlb_gen += dgen * times;
        }
    }

    /// Runs `iteration` `n` times. Unless `exact`, it probes now and then (after 64, 128,
    /// 256, ... iterations) whether one iteration, or two in turn (mprotect flips a page's
    /// protection back and forth), give the state back as they found it, and adds the rest
    /// at once when they do. Returns how many iterations were added that way.
    pub fn run_iterations(
        &mut self,
        n: u64,
        exact: bool,
        mut iteration: impl FnMut(&mut Kernel) -> crate::error::Result<()>,
    ) -> crate::error::Result<u64> {
        let (mut done, mut repeated, mut next_probe, mut window) = (0, 0, 64, 1);
        let mut read_clock = false;
        while done < n {
            if exact || done + 1 < next_probe || done + window >= n {
                let reads = self.clock_reads.get();
                iteration(self)?;
                read_clock = self.clock_reads.get() != reads;
                done += 1;
                continue;
            }
            if read_clock {
                // The last iteration decided something by a clock (a wake-up, an IPI); the
                // next most likely does too and could not count as a period: skip the probe
                // (a guess that only saves time; a probe is what proves a period).
                next_probe *= 2;
                continue;
            }
            let probe = self.probe();
            for _ in 0..window {
                iteration(self)?;
            }
            done += window;
            match self.period(probe) {
                Some(period) => {
                    let times = (n - done) / window;
                    self.repeat(&period, times);
                    repeated = times * window;
                    done += repeated;
                    next_probe = u64::MAX; // any remainder runs one by one
                }
                None => {
                    next_probe *= 2;
                    window = 3 - window;
                }
            }
        }
        Ok(repeated)
    }

    fn clock_and_stats(&self) -> Vec<(Time, Stats, Stats)> {
        self.cpus
            .iter()
            .map(|c| (c.now, c.stats.clone(), c.idle_stats.clone()))
            .collect()
    }

    /// The whole state as words, without what only measures or repeats (stats, memos) and
    /// with clocks as orders (kernel/steady.rs). Every field is named, so a new one must be
    /// placed here before the kernel builds.
    pub fn canon(&self) -> Canon {
        self.canon_into(Canon::default())
    }

    /// canon() written into `c` (a Canon::checking compares instead of keeping).
    fn canon_into(&self, mut c: Canon) -> Canon {
        let Kernel {
            // Fixed at boot.
            machine: _,
            clock: _,
            params: _,
            run_params: _,
            paths: _,
            kernel_heap: _,
            config,
            mem,
            caches,
            cpus,
            holders,
            kernel_root,
            kernel_node_roots,
            mms,
            tasks,
            task_slots,
            mm_slots,
            violations,
            // Only says when the sampled oracle runs; a probe checks at every return.
            returns_to_user: _,
            pages,
            page_cache,
            file_pages,
            rng,
            direct_map_covered,
            text_contents,
            text_patches,
            text_version,
            global_now,
            fast_forward,
            defenses,
            clock_reads: _,
            oracle_probe: _,
            vm,
        } = self;
        c.debug(config);
        mem.canon(&mut c);
        caches.canon(&mut c);
        let mm_gen =
            |mm: usize, ctx: u64| mms.get(mm).filter(|m| m.ctx_id == ctx).map(|m| m.tlb_gen);
        for cpu in cpus {
            cpu.canon(&mut c);
            cpu.asid.canon(mm_gen, &mut c);
        }
        holders.canon(&mut c);
        for mm in mms {
            mm.canon(&mut c);
        }
        c.debug(&(kernel_root, kernel_node_roots, tasks, task_slots, mm_slots));
        c.debug(&violations.len());
        c.sorted_map(pages.iter().map(|(p, info)| (p.0, info)));
        c.sorted_map(file_pages.iter());
        c.debug(&(
            page_cache,
            rng,
            direct_map_covered,
            text_version,
            global_now,
            fast_forward,
        ));
        c.sorted_map(text_contents.iter());
        c.sorted_map(text_patches.iter());
        for d in defenses {
            d.canon(&mut c);
        }
        if let Some(vm) = vm {
            vm.canon(&mut c);
        }
        c
    }
}

impl super::Mm {
    /// Everything but the flush generation, which only counts up and is compared with the
    /// CPUs' record of it (written there as a lag: AsidState::canon).
    fn canon(&self, c: &mut Canon) {
        let super::Mm {
            root,
            user_root,
            node_roots,
            node_user_roots,
            node,
            ctx_id,
            tlb_gen: _,
            cpumask,
            vmas,
            next_mmap,
            heap,
            heap_pages,
            anon,
            users,
            objects,
        } = self;
        c.debug(&(
            root,
            user_root,
            node_roots,
            node_user_roots,
            node,
            ctx_id,
            cpumask,
        ));
        c.debug(&(vmas, next_mmap, heap, heap_pages, anon, users, objects));
    }
}

impl Cpu {
    fn canon(&self, c: &mut Canon) {
        let Cpu {
            mmu,
            now,
            user_mode,
            mode_log,
            current,
            stats: _,
            idle_stats: _,
            // With the mms' generations (Kernel::canon).
            asid: _,
            idle_estimate_ns,
            pcp,
            pcp_sensitive,
            rq,
            starting,
            slice_start,
            balance,
            irq_calendar,
            spin_until,
            // Where a path's lines were in L1: a memo of lookups.
            path_memo: _,
        } = self;
        mmu.canon(c);
        mode_log.canon(*now, c);
        c.debug(&(
            user_mode,
            current,
            idle_estimate_ns.to_bits(),
            pcp,
            pcp_sensitive,
            rq,
            starting,
        ));
        c.debug(&(slice_start, balance, irq_calendar, spin_until));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defense;
    use crate::sim::Counter;

    fn kernel(defenses: &str) -> Kernel {
        let m = crate::machine::load("haswell-i7-4770").unwrap();
        Kernel::boot(m, defense::parse_list(defenses).unwrap())
    }

    #[test]
    fn a_decision_from_a_clock_keeps_an_iteration_from_standing_for_the_rest() {
        let mut k = kernel("pti:linux");
        let p = k.probe();
        assert!(k.period(p).is_some(), "nothing ran: the state is as it was");
        let p = k.probe();
        k.should_preempt(0);
        assert!(k.period(p).is_none(), "the timeslice was asked");
    }

    #[test]
    fn a_changed_state_or_a_plug_in_that_cannot_say_its_state_is_never_a_period() {
        let mut k = kernel("none");
        let task = k.spawn("loop", None);
        k.switch_to(0, task);
        let p = k.probe();
        k.caches.clear();
        assert!(k.period(p).is_none(), "the caches were emptied");
        let mut k = kernel("none");
        k.defenses.push(Box::new(super::super::hooks::Running));
        let p = k.probe();
        assert!(k.period(p).is_none(), "a plug-in without canon");
    }

    #[test]
    fn repeating_a_period_moves_clocks_and_counts_on() {
        let mut k = kernel("pti:linux");
        let getppid = crate::kernel::paths::syscall::lookup(&k.paths, "getppid").unwrap();
        let task = k.spawn("loop", None);
        k.switch_to(0, task);
        k.enter_user(0);
        for _ in 0..10 {
            k.syscall(0, &getppid).unwrap();
        }
        let p = k.probe();
        let before = k.cpus[0].now;
        k.syscall(0, &getppid).unwrap();
        let after = k.cpus[0].now;
        let syscalls = k.cpus[0].stats.counter(Counter::Syscalls);
        let period = k
            .period(p)
            .expect("a warm getppid leaves the state as it found it");
        k.repeat(&period, 10);
        assert_eq!(k.cpus[0].now, after + Time((after - before).0 * 10));
        assert_eq!(k.cpus[0].stats.counter(Counter::Syscalls), syscalls + 10);
        assert_eq!(k.cpus[1].now, Time::ZERO, "an idle CPU's clock stays");
    }
}
