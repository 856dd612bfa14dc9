//! Load balancing from the scheduler tick (Linux trigger_load_balance, kernel/sched/fair.c,
//! 4.20). Two things happen on a busy CPU's tick:
//! - nohz idle-balance kick: if tasks wait on this CPU while others idle, idle CPUs are
//!   woken to pull them (the model's new-idle balancing, `steal`, does the pulling);
//! - periodic balancing: for each scheduling domain (SMT siblings, the socket, the machine)
//!   whose interval has passed, pull waiting tasks from the busiest run queue of the most
//!   loaded group if the domain is out of balance by more than its imbalance_pct.
//!
//! Wake-up placement (scheduler.rs) already puts a waking task on an idle CPU when there is one,
//! so in an undersubscribed build this rarely moves anything; it matters when tasks
//! outnumber CPUs and queues drift apart as tasks block and exit.

use crate::kernel::{CpuId, Kernel, TaskId};
use crate::sim::{Counter, Time};

/// The scheduler tick: CONFIG_HZ=250, Debian's and Ubuntu's x86-64 configs.
pub const TICK: Time = Time(4_000_000_000);
/// sd_init() (kernel/sched/topology.c, from 3.x until 5.10 halved it): a busy CPU balances a
/// domain busy_factor times less often than an idle one.
const BUSY_FACTOR: u64 = 32;
/// sysctl_sched_migration_cost: a task that ran this recently is cache-hot and stays
/// (can_migrate_task -> task_hot) unless the domain's balancing keeps failing.
pub const MIGRATION_COST: Time = Time(500_000_000);

/// A scheduling-domain level, with sd_init()'s parameters for it (4.20).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// SD_SHARE_CPUCAPACITY: imbalance_pct 110, cache_nice_tries 0.
    Smt,
    /// SD_SHARE_PKG_RESOURCES (MC): imbalance_pct 117, cache_nice_tries 1.
    Socket,
    /// Across sockets (SD_NUMA): imbalance_pct 125, cache_nice_tries 2.
    Machine,
}

impl Level {
    const ALL: [Level; 3] = [Level::Smt, Level::Socket, Level::Machine];
    fn imbalance_pct(self) -> usize {
        match self {
            Level::Smt => 110,
            Level::Socket => 117,
            Level::Machine => 125,
        }
    }
    fn cache_nice_tries(self) -> u32 {
        match self {
            Level::Smt => 0,
            Level::Socket => 1,
            Level::Machine => 2,
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// Per-CPU balancing state.
#[derive(Debug, Clone, Default)]
pub struct BalanceState {
    next_tick: Time,
    /// Per level: when this CPU last balanced it, and how many balances in a row found an
    /// imbalance but moved nothing (sd->nr_balance_failed).
    last: [Time; 3],
    failed: [u32; 3],
}

impl Kernel {
    /// CPUs sharing `level` with `cpu` (the domain's span), as a range of CPU ids.
    fn span(&self, cpu: CpuId, level: Level) -> std::ops::Range<CpuId> {
        let t = &self.machine.topology;
        let width = match level {
            Level::Smt => t.threads_per_core as usize,
            Level::Socket => (t.cores_per_socket * t.threads_per_core) as usize,
            Level::Machine => self.cpus.len(),
        };
        let first = cpu / width * width;
        first..first + width
    }

    /// The levels this machine has (Linux drops a domain that spans no more than its child).
    fn levels(&self) -> Vec<Level> {
        let mut width = 1;
        let mut levels = vec![];
        for level in Level::ALL {
            let w = self.span(0, level).len();
            if w > width {
                levels.push(level);
                width = w;
            }
        }
        levels
    }

    /// Tasks on `cpu`: the running one and those waiting (rq->nr_running).
    fn nr_running(&self, cpu: CpuId) -> usize {
        self.cpus[cpu].rq.len() + self.cpus[cpu].current.is_some() as usize
    }

    /// The tick on a CPU that runs a task; returns idle CPUs it woke to pull work, which the
    /// engine must start.
    pub fn scheduler_tick(&mut self, cpu: CpuId) -> Vec<CpuId> {
        self.note_clock_read();
        let now = self.cpus[cpu].now;
        if now < self.cpus[cpu].balance.next_tick {
            return vec![];
        }
        self.cpus[cpu].balance.next_tick = Time((now.0 / TICK.0 + 1) * TICK.0);
        self.timer_interrupt(cpu);
        let levels = self.levels();
        for (i, &level) in levels.iter().enumerate() {
            let child = i.checked_sub(1).map(|c| levels[c]);
            self.rebalance_domain(cpu, level, child, now);
        }
        self.nohz_kick(cpu, now)
    }

    /// The local timer interrupt that drives the tick: its entry (from user mode, with
    /// whatever a defense does on entry and exit) and the recorded timer-tick path with its
    /// measured work. One per tick boundary the CPU's time passed (an operation longer than
    /// a tick, which the modelled workloads do not have, would owe more).
    fn timer_interrupt(&mut self, cpu: CpuId) {
        let entry = self.machine.costs.interrupt_entry_cycles as f64;
        self.cpus[cpu].stats.count(Counter::TimerTicks);
        let tick = |k: &mut Kernel| {
            k.run_known_path(
                cpu,
                "timer-tick",
                crate::kernel::paths::path_work::Work::Measured,
            )
        };
        if let Err(e) = self.in_kernel(cpu, entry, tick) {
            panic!("timer tick: {e}");
        }
    }

    /// nohz_balancer_kick(): waiting tasks here and idle CPUs elsewhere; one CPU per
    /// waiting task, nearest first.
    fn nohz_kick(&mut self, cpu: CpuId, now: Time) -> Vec<CpuId> {
        let mut kicked = vec![];
        for level in self.levels() {
            for c in self.span(cpu, level) {
                if kicked.len() < self.cpus[cpu].rq.len() && self.is_idle(c) {
                    let exit = self.idle_exit_latency(c, now);
                    let idle = &mut self.cpus[c];
                    idle.now = idle.now.max(now) + exit;
                    self.cpus[c].starting = true;
                    self.cpus[cpu].stats.count(Counter::NohzBalanceKicks);
                    kicked.push(c);
                }
            }
        }
        kicked
    }

    /// load_balance() of one domain, run when its interval (sd_weight ms, times
    /// BUSY_FACTOR on a busy CPU, at most num_online_cpus / 10 s) has passed.
    fn rebalance_domain(&mut self, cpu: CpuId, level: Level, child: Option<Level>, now: Time) {
        let span = self.span(cpu, level);
        let interval_ms =
            (span.len() as u64 * BUSY_FACTOR).min((self.cpus.len() as u64 * 100).max(1));
        let i = level.index();
        if now < self.cpus[cpu].balance.last[i] + Time(interval_ms * 1_000_000_000) {
            return;
        }
        self.cpus[cpu].balance.last[i] = now;
        // The domain's groups are its child's spans; one CPU per group balances for it
        // (should_we_balance: the group's first CPU when none is idle).
        let group_of = |k: &Kernel, c: CpuId| child.map_or(c..c + 1, |l| k.span(c, l));
        let local = group_of(self, cpu);
        if local.start != cpu && local.clone().all(|c| !self.is_idle(c)) {
            return;
        }
        // find_busiest_group(): the group with the highest load per CPU, and only if it has
        // more tasks than CPUs (group_overloaded) and beats ours by imbalance_pct.
        let load = |k: &Kernel, g: &std::ops::Range<CpuId>| {
            g.clone().map(|c| k.nr_running(c)).sum::<usize>()
        };
        let (local_load, local_width) = (load(self, &local), local.len());
        let mut busiest: Option<(std::ops::Range<CpuId>, usize)> = None;
        let mut g = span.start;
        while g < span.end {
            let group = group_of(self, g);
            g = group.end;
            if group == local {
                continue;
            }
            let l = load(self, &group);
            // Compare loads per CPU without division: l / |group| against the best so far.
            if l > group.len()
                && !busiest
                    .as_ref()
                    .is_some_and(|(b, bl)| l * b.len() <= bl * group.len())
            {
                busiest = Some((group, l));
            }
        }
        let Some((group, busy_load)) = busiest else {
            return;
        };
        if busy_load * local_width * 100 <= local_load * group.len() * level.imbalance_pct() {
            return;
        }
        // find_busiest_queue(), then detach_tasks(): waiting tasks, not cache-hot, while the
        // move still narrows the gap.
        let Some(from) = group
            .clone()
            .filter(|&c| self.nr_running(c) >= 2)
            .max_by_key(|&c| (self.nr_running(c), std::cmp::Reverse(c)))
        else {
            return;
        };
        let hot_ok = self.cpus[cpu].balance.failed[i] > level.cache_nice_tries();
        let mut moved = 0;
        while self.nr_running(from) > self.nr_running(cpu) + 1 {
            let Some(pos) = self.cpus[from]
                .rq
                .iter()
                .rposition(|&t| hot_ok || !self.task_hot(t, now))
            else {
                break;
            };
            let t: TaskId = self.cpus[from].rq.remove(pos).expect("position found");
            self.cpus[cpu].rq.push_back(t);
            self.cpus[cpu].stats.count(Counter::LoadBalancePulls);
            moved += 1;
        }
        self.cpus[cpu].balance.failed[i] = if moved == 0 {
            self.cpus[cpu].balance.failed[i] + 1
        } else {
            0
        };
    }

    fn task_hot(&self, task: TaskId, now: Time) -> bool {
        self.tasks[task]
            .last_ran
            .is_some_and(|t| now < t + MIGRATION_COST)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::Time;
    use crate::{defense, machine};

    fn queued(k: &mut Kernel, cpu: CpuId, n: usize) {
        for i in 0..n {
            let t = k.spawn(&format!("t{cpu}.{i}"), None);
            k.cpus[cpu].rq.push_back(t);
        }
    }

    fn running(k: &mut Kernel, cpu: CpuId) {
        let t = k.spawn(&format!("run{cpu}"), None);
        k.cpus[cpu].current = Some(t);
    }

    /// The i5 model with a task running on each of its 4 CPUs.
    fn i5_all_busy() -> Kernel {
        let mut k = Kernel::boot(
            machine::load("ivybridge-i5-3550").unwrap(),
            defense::parse_list("none").unwrap(),
        );
        for c in 0..4 {
            running(&mut k, c);
        }
        k
    }

    #[test]
    fn a_busy_cpu_pulls_from_a_longer_queue_once_its_interval_passes() {
        let mut k = i5_all_busy();
        queued(&mut k, 0, 3);
        // At the first tick CPU 1 balances the socket (4 CPUs: 4 ms x 32 apart on a busy CPU).
        k.cpus[1].now = Time(200_000_000_000);
        k.scheduler_tick(1);
        assert_eq!(
            (k.cpus[0].rq.len(), k.cpus[1].rq.len()),
            (2, 1),
            "CPU 1 took one task: 3+1 vs 1 became 2+1 vs 1+1"
        );
        queued(&mut k, 0, 2);
        k.cpus[1].now = Time(204_000_000_000);
        k.scheduler_tick(1);
        assert_eq!(
            k.cpus[1].rq.len(),
            1,
            "the next tick is inside the 128 ms busy interval"
        );
        k.cpus[1].now = Time(340_000_000_000);
        k.scheduler_tick(1);
        assert_eq!(
            (k.cpus[0].rq.len(), k.cpus[1].rq.len()),
            (3, 2),
            "4+1 vs 1+1 -> 3+1 vs 2+1"
        );
        assert_eq!(k.cpus[1].stats.counter(Counter::LoadBalancePulls), 2);
    }

    #[test]
    fn cache_hot_tasks_stay_until_balancing_keeps_failing() {
        let mut k = i5_all_busy();
        queued(&mut k, 0, 2);
        let now = Time(1_000_000_000_000);
        for &t in &k.cpus[0].rq.clone() {
            k.tasks[t].last_ran = Some(now - Time(100_000_000)); // ran 0.1 ms ago
        }
        k.cpus[1].now = now;
        k.scheduler_tick(1);
        assert_eq!(k.cpus[1].rq.len(), 0, "both waiting tasks are cache-hot");
        // cache_nice_tries = 1 on the socket level: the second failure lets a hot task go.
        for step in 1..=2u64 {
            k.cpus[1].now = now + Time(step * 130_000_000_000);
            for &t in &k.cpus[0].rq.clone() {
                k.tasks[t].last_ran = Some(k.cpus[1].now - Time(100_000_000));
            }
            k.scheduler_tick(1);
        }
        assert_eq!(k.cpus[1].rq.len(), 1);
    }

    #[test]
    fn waiting_tasks_wake_idle_cpus() {
        let mut k = Kernel::boot(
            machine::load("ivybridge-i5-3550").unwrap(),
            defense::parse_list("none").unwrap(),
        );
        running(&mut k, 0);
        queued(&mut k, 0, 2);
        k.cpus[0].now = Time(8_000_000_000);
        let kicked = k.scheduler_tick(0);
        assert_eq!(kicked, vec![1, 2], "two waiting tasks, two idle CPUs woken");
        assert!(kicked.iter().all(|&c| k.cpus[c].starting));
        // Woken CPUs pull through new-idle balancing when they schedule.
        let t = k.schedule(1);
        assert!(t.is_some() && k.cpus[0].rq.len() == 1);
    }

    #[test]
    fn domains_follow_the_topology() {
        let k = Kernel::boot(
            machine::load("xeon-platinum-8160").unwrap(),
            defense::parse_list("none").unwrap(),
        );
        assert_eq!(k.levels(), vec![Level::Smt, Level::Socket, Level::Machine]);
        assert_eq!(k.span(50, Level::Smt), 50..52);
        assert_eq!(k.span(50, Level::Socket), 48..96);
        let i5 = Kernel::boot(
            machine::load("ivybridge-i5-3550").unwrap(),
            defense::parse_list("none").unwrap(),
        );
        assert_eq!(i5.levels(), vec![Level::Socket], "no SMT, one socket");
    }
}
