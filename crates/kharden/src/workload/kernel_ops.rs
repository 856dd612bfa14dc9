//! The kernel operations of seed 002's evaluation (Kuzin's text-replication RFC), each timed
//! as its cover letter describes, on a CPU of a chosen NUMA node, with hot or cold caches.
//!
//! - fork-1: one fork(), timed from syscall entry to exit in the parent.
//! - fork-1024: 1024 fork()s in a loop, timed around the loop; each child exits on another
//!   core of the same node (the parent's work is timed; the children's share its LLC), and
//!   what it leaves (stack, task_struct, mm, page tables) is freed for the next fork.
//! - mmap-munmap: 1024 iterations of mmap() and munmap() of one anonymous page.
//! - mmap-lock: the same with MAP_LOCKED, which populates the page inside mmap().
//! - open-close: 1024 open()/close() pairs of a character device (the recorded pair opens
//!   /dev/zero; the seed's /dev/null runs the same chrdev_open path).
//! - kill: SIGUSR1 to a forked child sleeping in pause() on another core of the node, timed
//!   from the kill() call to the handler's first instruction (the wake-up IPI, the child's
//!   CPU leaving idle, the switch to it and the signal frame set-up included).
//! - mount: one mount() of procfs.
//!
//! Hot: the operation (one loop iteration, for the loops) ran once just before, so caches
//! and TLBs hold what it left. Cold: after that, every cache level, TLB and paging-structure
//! cache of every CPU is emptied before the timed part (what a cache-thrashing run between
//! measurements leaves: kernel text and data come from DRAM, on their home node); a loop is
//! then cold for its first iteration only. Cold-each: emptied before every iteration of a
//! loop too (the seed does not say which of the two its loops' "cold caches" were).

use crate::arch::x86::InvpcidType;
use crate::error::{Error, Result};
use crate::kernel::paths::path_work::Work;
use crate::kernel::paths::syscall::{self, SyscallSpec};
use crate::kernel::{CpuId, Kernel, TaskId};
use crate::sim::{Stats, Time};

/// One of the seed's operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Fork1,
    Fork1024,
    MmapMunmap,
    MmapLock,
    OpenClose,
    Kill,
    Mount,
}

impl Op {
    pub const ALL: &'static [Op] = &[
        Op::Fork1,
        Op::Fork1024,
        Op::MmapMunmap,
        Op::MmapLock,
        Op::OpenClose,
        Op::Kill,
        Op::Mount,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Op::Fork1 => "fork-1",
            Op::Fork1024 => "fork-1024",
            Op::MmapMunmap => "mmap-munmap",
            Op::MmapLock => "mmap-lock",
            Op::OpenClose => "open-close",
            Op::Kill => "kill",
            Op::Mount => "mount",
        }
    }

    pub fn parse(name: &str) -> Result<Op> {
        super::by_name(Op::ALL, Op::name, name, "operation")
    }

    /// Iterations of the timed loop (1 for the single operations).
    pub fn iterations(self) -> u32 {
        match self {
            Op::Fork1 | Op::Kill | Op::Mount => 1,
            _ => 1024,
        }
    }
}

/// Hot or cold caches (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caches {
    Hot,
    Cold,
    /// Cold before every iteration of a loop, not only the first.
    ColdEach,
}

impl Caches {
    pub const ALL: &'static [Caches] = &[Caches::Hot, Caches::Cold, Caches::ColdEach];

    pub fn name(self) -> &'static str {
        match self {
            Caches::Hot => "hot",
            Caches::Cold => "cold",
            Caches::ColdEach => "cold-each",
        }
    }

    pub fn parse(name: &str) -> Result<Caches> {
        super::by_name(Caches::ALL, Caches::name, name, "cache state")
    }
}

/// One timed operation as `run --workload kernel-op` and a sweep's kernel-op point choose it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    pub op: Op,
    pub caches: Caches,
    /// The NUMA node whose first CPU runs it.
    pub node: u32,
}

impl Choice {
    /// The options as given, None when not (fork-1, hot caches, node 0), checked against
    /// machine `m`; an error names the option as `name` spells it.
    pub fn parse(
        op: Option<&str>,
        caches: Option<&str>,
        node: Option<u32>,
        m: &crate::machine::MachineProfile,
        name: impl Fn(&str) -> String,
    ) -> Result<Choice> {
        let at = |option: &str, e: Error| Error::at(name(option), e);
        let op = Op::parse(op.unwrap_or("fork-1")).map_err(|e| at("op", e))?;
        let caches = Caches::parse(caches.unwrap_or("hot")).map_err(|e| at("caches", e))?;
        let node = node.unwrap_or(0);
        if node >= m.numa_nodes() {
            let nodes = format!(
                "{} has nodes 0 to {}, got {node}",
                m.name,
                m.numa_nodes() - 1
            );
            return Err(at("node", Error::new(nodes)));
        }
        Ok(Choice { op, caches, node })
    }
}

/// What a timed operation took and did.
#[derive(Debug, Clone)]
pub struct OpResult {
    pub elapsed: Time,
    /// Counters of the CPUs the timed part ran on (the timed CPU, and the signalled child's).
    pub stats: Stats,
    /// Loop iterations added at once as repeats of a steady state (kernel/steady.rs).
    pub repeated: u64,
}

/// The benchmark process on a booted kernel: the timed CPU and a second core of its node.
struct Bench {
    cpu: CpuId,
    partner: CpuId,
    task: TaskId,
    /// The signalled child (kill), sleeping on `partner`.
    child: Option<TaskId>,
}

/// Runs `op` on the first CPU of `node` of a booted kernel `k` and times it; unless `exact`,
/// a loop's iterations after a probed steady state are added at once (kernel/steady.rs).
pub fn run(k: &mut Kernel, op: Op, caches: Caches, node: u32, exact: bool) -> Result<OpResult> {
    let mut b = Bench::start(k, node)?;
    if op == Op::Kill {
        b.child = Some(b.sleeping_child(k)?);
    }
    // Warm-up: one run of the operation (one iteration of a loop).
    b.once(k, op)?;
    if caches != Caches::Hot {
        empty_caches(k);
    }
    if op == Op::Kill {
        b.ready(k);
    }
    let cpus = [b.cpu, b.partner];
    let before: Vec<Stats> = cpus.iter().map(|&c| k.cpus[c].stats.clone()).collect();
    let t0 = k.cpus[b.cpu].now;
    let mut repeated = 0;
    let end = if op == Op::Kill {
        b.kill(k)?
    } else {
        let mut first = true;
        repeated = k.run_iterations(op.iterations() as u64, exact, |k| {
            if caches == Caches::ColdEach && !std::mem::take(&mut first) {
                empty_caches(k);
            }
            b.once(k, op)
        })?;
        k.cpus[b.cpu].now
    };
    let mut stats = Stats::default();
    let counted: &[CpuId] = if op == Op::Kill { &cpus } else { &cpus[..1] };
    for (i, &c) in counted.iter().enumerate() {
        let mut s = k.cpus[c].stats.clone();
        s.subtract(&before[i]);
        stats.merge(&s);
    }
    Ok(OpResult {
        elapsed: end - t0,
        stats,
        repeated,
    })
}

/// Empties every cache level, TLB and paging-structure cache of every CPU, charging nothing
/// (clear() counts as a fill, so no path's L1 residence (kernel/paths/l1_replay.rs) survives it).
pub fn empty_caches(k: &mut Kernel) {
    k.caches.clear();
    for c in k.cpus.iter_mut() {
        c.mmu.invpcid(InvpcidType::AllInclGlobal);
    }
}

fn lookup(k: &Kernel, name: &str) -> Result<SyscallSpec> {
    syscall::lookup(&k.paths, name)
        .ok_or_else(|| Error::new(format!("syscall {name} is not in the syscall table")))
}

impl Bench {
    /// The benchmark process on the first CPU of `node`, in user mode; the partner is the
    /// next core of the node (not an SMT sibling).
    fn start(k: &mut Kernel, node: u32) -> Result<Bench> {
        let on_node: Vec<CpuId> = (0..k.cpus.len())
            .filter(|&c| k.cpus[c].mmu.node() == node)
            .collect();
        let tpc = k.machine.topology.threads_per_core as usize;
        let (&cpu, partner) = match on_node.first() {
            Some(c) => (c, on_node.iter().copied().find(|&p| p / tpc != c / tpc)),
            None => {
                return Err(Error::new(format!(
                    "{}: no CPU on NUMA node {node}",
                    k.machine.name
                )))
            }
        };
        let partner = partner.ok_or_else(|| {
            Error::new(format!("{}: node {node} has a single core", k.machine.name))
        })?;
        let shell = k.spawn_on(cpu, "sh", None);
        let task = k.spawn_on(cpu, "bench", Some(shell));
        k.switch_to(cpu, task);
        k.enter_user(cpu);
        Ok(Bench {
            cpu,
            partner,
            task,
            child: None,
        })
    }

    /// One run of `op` (one iteration of a loop); kill's warm-up is a whole signal.
    fn once(&mut self, k: &mut Kernel, op: Op) -> Result<()> {
        let cpu = self.cpu;
        match op {
            Op::Fork1 | Op::Fork1024 => {
                let child = k.fork(cpu, self.task, "child")?;
                self.exit_on_partner(k, child)
            }
            Op::MmapMunmap | Op::MmapLock => {
                let mmap = if op == Op::MmapLock {
                    "mmap-locked"
                } else {
                    "mmap"
                };
                k.syscall(cpu, &lookup(k, mmap)?)?;
                k.syscall(cpu, &lookup(k, "munmap")?)
            }
            Op::OpenClose => k.syscall(cpu, &lookup(k, "open-close")?),
            Op::Mount => k.syscall(cpu, &lookup(k, "mount-proc")?),
            Op::Kill => {
                self.ready(k);
                self.kill(k)?;
                Ok(())
            }
        }
    }

    /// `child` runs on the partner core and exits there at once.
    fn exit_on_partner(&self, k: &mut Kernel, child: TaskId) -> Result<()> {
        self.switch_partner_to(k, child);
        k.exit(self.partner, child)?;
        k.schedule(self.partner);
        // finish_task_switch() away from the dead child frees its stack and task_struct on
        // the partner, mmdrop() its mm and page tables: the next fork reuses them.
        k.reap();
        Ok(())
    }

    /// The partner core, no earlier than the timed CPU's clock, switches to `child`.
    fn switch_partner_to(&self, k: &mut Kernel, child: TaskId) {
        let p = self.partner;
        k.cpus[p].now = k.cpus[p].now.max(k.cpus[self.cpu].now);
        k.cpus[p].rq.push_back(child);
        k.schedule(p);
    }

    /// A forked child with a SIGUSR1 handler, asleep in pause() on the partner core (which
    /// is then idle).
    fn sleeping_child(&self, k: &mut Kernel) -> Result<TaskId> {
        let child = k.fork(self.cpu, self.task, "child")?;
        self.switch_partner_to(k, child);
        k.enter_user(self.partner);
        k.syscall(self.partner, &lookup(k, "rt_sigaction")?)?;
        self.sleep(k, child);
        Ok(child)
    }

    /// The child enters pause() and its core goes idle.
    fn sleep(&self, k: &mut Kernel, child: TaskId) {
        let p = self.partner;
        k.cpus[p].stats.count(crate::sim::Counter::Syscalls);
        k.leave_user_mode(p);
        k.tasks[child].state = crate::kernel::sched::scheduler::TaskState::Blocked;
        k.schedule(p);
    }

    /// The parent sends when the child is asleep: both clocks at the later of the two, so
    /// the child's core has been idle for the same time in every run (its C-state, chosen
    /// from the idle time, does not depend on how long earlier work took).
    fn ready(&self, k: &mut Kernel) {
        let t = k.cpus[self.cpu].now.max(k.cpus[self.partner].now);
        k.cpus[self.cpu].now = t;
        k.cpus[self.partner].now = t;
    }

    /// kill(child, SIGUSR1) on the timed CPU; the child wakes on the partner core, switches
    /// in, and returns to user mode through signal delivery into its handler. Returns when
    /// the handler starts; the handler then returns (rt_sigreturn) and the child sleeps
    /// again, untimed.
    fn kill(&self, k: &mut Kernel) -> Result<Time> {
        let child = self.child.expect("kill has a child");
        let (cpu, p) = (self.cpu, self.partner);
        k.syscall(cpu, &lookup(k, "kill")?)?;
        // try_to_wake_up() near the end of kill() sends the reschedule IPI to the idle core.
        let arrival = k.cpus[cpu].now + k.ipi_latency(cpu, p);
        k.wake_up(child, arrival);
        k.schedule(p);
        // exit_to_user_mode() finds the signal: get_signal(), the rt frame, then user mode.
        k.run_known_path(p, "signal-deliver", Work::Measured)?;
        k.enter_user(p);
        let handler = k.cpus[p].now;
        k.syscall(p, &lookup(k, "rt_sigreturn")?)?;
        self.sleep(k, child);
        Ok(handler)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{defense, machine};

    #[test]
    fn every_operation_runs_on_both_nodes_and_cold_is_slower_than_hot() {
        let m = machine::load("xeon-e5-2690v3-2s").unwrap();
        for &op in Op::ALL.iter().filter(|&&o| o != Op::Fork1024) {
            for node in [0, 1] {
                let time = |caches| {
                    let mut k = Kernel::boot(m.clone(), defense::parse_list("pti:linux").unwrap());
                    let r = run(&mut k, op, caches, node, false).unwrap();
                    assert!(k.violations.is_empty(), "{op:?}: {:?}", k.violations);
                    r.elapsed
                };
                let (hot, cold) = (time(Caches::Hot), time(Caches::Cold));
                assert!(
                    cold > hot,
                    "{op:?} node {node}: cold {cold:?} <= hot {hot:?}"
                );
            }
        }
        assert!(Op::parse("fork").is_err() && Caches::parse("warm").is_err());
    }

    #[test]
    fn a_loop_in_steady_state_adds_up_to_running_every_iteration() {
        let m = machine::load("xeon-e5-2690v3-2s").unwrap();
        for op in [Op::MmapMunmap, Op::MmapLock, Op::OpenClose, Op::Fork1024] {
            for caches in [Caches::Hot, Caches::Cold, Caches::ColdEach] {
                let [exact, steady] = [true, false].map(|exact| {
                    let mut k = Kernel::boot(m.clone(), defense::parse_list("text-repl").unwrap());
                    let r = run(&mut k, op, caches, 1, exact).unwrap();
                    (r, k)
                });
                let what = format!("{op:?} {caches:?}");
                assert_eq!(exact.0.repeated, 0);
                assert_eq!(
                    (exact.0.elapsed, &exact.0.stats),
                    (steady.0.elapsed, &steady.0.stats),
                    "{what}"
                );
                assert!(exact.1.canon().same(&steady.1.canon()), "{what}");
                // A fork wakes its child and waits for it: decisions by the clocks, so no
                // iteration counts as a period.
                assert_eq!(steady.0.repeated > 0, op != Op::Fork1024, "{what}");
            }
        }
    }

    #[test]
    fn a_fork_loop_gets_its_dead_childrens_memory_back() {
        let m = machine::load("xeon-e5-2690v3-2s").unwrap();
        let mut k = Kernel::boot(m, defense::parse_list("pti:linux").unwrap());
        let tasks_before = k.tasks_in_use();
        let r = run(&mut k, Op::Fork1024, Caches::Hot, 0, false).unwrap();
        let per_fork = |c| r.stats.counter(c) as f64 / 1024.0;
        // Each fork clears a task_struct, an mm_struct and two PGD pages (about 250 lines):
        // a fresh frame's lines would come from DRAM, a reused one's are still cached.
        let from_dram = per_fork(crate::sim::Counter::KernelStoreLinesFromMemory);
        assert!(
            from_dram < 10.0,
            "{from_dram} store lines from DRAM per fork"
        );
        // No child outlives the loop (the bench and its shell are the two new tasks).
        assert_eq!(k.tasks_in_use(), tasks_before + 2);
    }

    #[test]
    fn cold_each_empties_the_caches_before_every_iteration_of_a_loop() {
        let m = machine::load("xeon-e5-2690v3-2s").unwrap();
        let time = |op, caches| {
            let mut k = Kernel::boot(m.clone(), defense::parse_list("pti:linux").unwrap());
            let r = run(&mut k, op, caches, 1, false).unwrap();
            (
                r.elapsed,
                r.stats.counter(crate::sim::Counter::KernelTextFromMemory),
            )
        };
        // A loop: every iteration fetches its text from DRAM again, not only the first.
        let (cold, cold_text) = time(Op::OpenClose, Caches::Cold);
        let (each, each_text) = time(Op::OpenClose, Caches::ColdEach);
        assert!(each > cold, "cold-each {each:?} <= cold {cold:?}");
        assert!(
            each_text > 100 * cold_text.max(1),
            "text lines from DRAM: cold-each {each_text}, cold {cold_text}"
        );
        // A single operation: the two are the same.
        assert_eq!(
            time(Op::Mount, Caches::Cold),
            time(Op::Mount, Caches::ColdEach)
        );
        assert_eq!(Caches::parse("cold-each").unwrap(), Caches::ColdEach);
    }
}
