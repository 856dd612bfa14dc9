//! A loop of one system call, modelled on FreeBSD's tools/tools/syscall_timing: each
//! iteration tests the alarm flag, calls the libc stub and issues the syscall.

use crate::arch::x86::{Access, VirtAddr};
use crate::error::{Error, Result};
use crate::kernel::memory::layout::{USER_DATA, USER_LIBC, USER_MMAP, USER_STACK_TOP, USER_TEXT};
use crate::kernel::paths::syscall::{self, Effect, SyscallSpec};
use crate::kernel::Kernel;
use crate::params::{Decl, Unit};
use crate::sim::{Stats, Time};

pub const PARAMS: &[Decl] = &[Decl::num(
    "workload.syscall_loop.user_cycles_per_iteration",
    Unit::Cycles,
    (0.0, 1e6),
    "user-mode cycles of one iteration besides the syscall (loop compare, libc stub)",
)];

#[derive(Debug, Clone)]
pub struct SyscallLoop {
    /// The syscall it loops on (a name of the syscall table, checked by new).
    name: String,
    /// The handler's own work in cycles when an experiment gives it (FreeBSD's getppid in
    /// seed 003 is not the recorded kernel's); else the recording's.
    pub given_work_cycles: Option<f64>,
    /// The syscall as the kernel it runs on resolves it (set by start).
    syscall: Option<SyscallSpec>,
    /// Iterations simulated before measuring (to warm TLBs and caches).
    pub warmup: u64,
    pub iterations: u64,
    /// Runs every iteration, also once the loop has reached a steady state (kernel/steady.rs)
    /// whose iterations could be added at once.
    pub exact: bool,
    /// workload.syscall_loop.user_cycles_per_iteration of the kernel's run (set by start).
    user_cycles: f64,
}

/// What a measured loop did.
#[derive(Debug, Clone)]
pub struct LoopResult {
    pub iterations: u64,
    pub elapsed: Time,
    /// Stats of the measured iterations only.
    pub stats: Stats,
    /// Of `iterations`, how many were added at once as repeats of a steady state.
    pub repeated: u64,
}

impl LoopResult {
    pub fn ns_per_iteration(&self) -> f64 {
        self.elapsed.ns() / self.iterations as f64
    }
}

impl SyscallLoop {
    pub fn new(name: &str, iterations: u64) -> Result<SyscallLoop> {
        if !syscall::is_known(name) {
            return Err(Error::new(format!(
                "--syscall: unknown syscall '{name}': expected one of {}",
                syscall::names().join(", ")
            )));
        }
        if iterations == 0 {
            return Err(Error::new("--iterations: expected a positive number"));
        }
        Ok(SyscallLoop {
            name: name.to_string(),
            given_work_cycles: None,
            syscall: None,
            warmup: 200,
            iterations,
            exact: false,
            user_cycles: 0.0,
        })
    }

    /// Sets up the benchmark process on CPU 0 and returns it in user mode.
    pub fn start(&mut self, k: &mut Kernel) -> Result<()> {
        self.user_cycles = k.run_params.num(PARAMS[0].path);
        let mut spec = syscall::lookup(&k.paths, &self.name).expect("checked by new");
        if let Some(work) = self.given_work_cycles {
            spec.work_cycles = work;
            spec.work_is_given = true;
        }
        self.syscall = Some(spec);
        let parent = k.spawn("sh", None);
        let task = k.spawn("syscall_timing", Some(parent));
        k.switch_to(0, task);
        k.enter_user(0);
        // mprotect needs a populated page to work on.
        if spec.effect == Effect::MprotectLast {
            let mmap = syscall::lookup(&k.paths, "mmap").unwrap();
            k.syscall(0, &mmap)?;
            k.user_work(0, 0.0, &[(VirtAddr(USER_MMAP), Access::Write)])?;
        }
        Ok(())
    }

    /// The syscall of the loop, once started.
    fn spec(&self) -> &SyscallSpec {
        self.syscall.as_ref().expect("start resolves the syscall")
    }

    fn iteration(&self, k: &mut Kernel) -> Result<()> {
        let touches = [
            (VirtAddr(USER_TEXT + 0x100), Access::Exec),
            (VirtAddr(USER_DATA + 0x80), Access::Read),
            (VirtAddr(USER_STACK_TOP - 0x100), Access::Write),
            (VirtAddr(USER_LIBC + 0x1_0a0), Access::Exec),
        ];
        k.user_work(0, self.user_cycles, &touches)?;
        k.syscall(0, self.spec())?;
        // The mmap test writes its page, so munmap has a PTE to clear and a flush to do.
        if let Effect::MmapAnon { .. } = self.spec().effect {
            let munmap = syscall::lookup(&k.paths, "munmap").unwrap();
            k.user_work(0, 0.0, &[(VirtAddr(USER_MMAP), Access::Write)])?;
            k.syscall(0, &munmap)?;
        }
        Ok(())
    }

    /// Runs `warmup` iterations, then `iterations` measured ones.
    pub fn run(&mut self, k: &mut Kernel) -> Result<LoopResult> {
        self.start(k)?;
        for _ in 0..self.warmup {
            self.iteration(k)?;
        }
        self.measure(k, self.iterations)
    }

    /// Runs `n` more iterations on an already started kernel and measures them; unless
    /// `exact`, those after a probed steady state are added at once (kernel/steady.rs).
    pub fn measure(&self, k: &mut Kernel, n: u64) -> Result<LoopResult> {
        let (t0, s0) = (k.cpus[0].now, k.cpus[0].stats.clone());
        let repeated = k.run_iterations(n, self.exact, |k| self.iteration(k))?;
        let mut stats = k.cpus[0].stats.clone();
        stats.subtract(&s0);
        Ok(LoopResult {
            iterations: n,
            elapsed: k.cpus[0].now - t0,
            stats,
            repeated,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{defense, machine};

    fn ns(defenses: &str, syscall: &str) -> (f64, Vec<crate::oracle::Violation>) {
        let m = machine::load("haswell-i7-4770").unwrap();
        let mut k = Kernel::boot(m, defense::parse_list(defenses).unwrap());
        let r = SyscallLoop::new(syscall, 500).unwrap().run(&mut k).unwrap();
        (r.ns_per_iteration(), k.violations.clone())
    }

    #[test]
    fn pti_costs_more_without_pcid_than_with() {
        let (off, v0) = ns("none", "getppid");
        let (pcid, v1) = ns("pti:freebsd", "getppid");
        let (nopcid, v2) = ns("pti:freebsd,nopcid", "getppid");
        eprintln!("off {off:.1} pcid {pcid:.1} nopcid {nopcid:.1}");
        assert!(off < pcid && pcid < nopcid);
        assert!(
            v0.is_empty() && v1.is_empty() && v2.is_empty(),
            "{v1:?} {v2:?}"
        );
    }

    /// A loop run exactly and one that adds its steady state's iterations at once.
    fn exact_and_steady(
        machine: &str,
        defenses: &str,
        syscall: &str,
        n: u64,
    ) -> [(LoopResult, Kernel); 2] {
        [true, false].map(|exact| {
            let m = machine::load(machine).unwrap();
            let mut k = Kernel::boot(m, defense::parse_list(defenses).unwrap());
            let mut lp = SyscallLoop::new(syscall, n).unwrap();
            lp.exact = exact;
            (lp.run(&mut k).unwrap(), k)
        })
    }

    #[test]
    fn a_steady_state_adds_up_to_what_running_every_iteration_gives() {
        let defenses = [
            "none",
            "pti:linux",
            "pti:freebsd",
            "nopcid,pti:linux",
            "nopcid,pti:freebsd",
            "pti:linux,xpfo:deferred",
            "text-repl",
            "pti:broken-user-maps-kernel",
        ];
        for machine in ["haswell-i7-4770", "xeon-e5-2690v3-2s"] {
            for d in defenses {
                for name in syscall::names() {
                    // An odd count: a loop repeating two iterations at a time runs the
                    // last one alone.
                    let [(exact, ke), (steady, ks)] = exact_and_steady(machine, d, name, 3001);
                    let what = format!("{name} under {d} on {machine}");
                    assert_eq!(exact.repeated, 0);
                    assert_eq!(
                        (exact.elapsed, &exact.stats),
                        (steady.elapsed, &steady.stats),
                        "{what}"
                    );
                    assert_eq!(ke.violations, ks.violations, "{what}");
                    assert!(ke.canon().same(&ks.canon()), "{what}: the machines differ");
                    let clocks = |k: &Kernel| k.cpus.iter().map(|c| c.now).collect::<Vec<_>>();
                    assert_eq!(clocks(&ke), clocks(&ks), "{what}");
                    // Flush generations, which the canonical form holds only as lags.
                    let gens = |k: &Kernel| {
                        let mms: Vec<u64> = k.mms.iter().map(|m| m.tlb_gen).collect();
                        let asids: Vec<String> =
                            k.cpus.iter().map(|c| format!("{:?}", c.asid)).collect();
                        (mms, asids)
                    };
                    assert_eq!(gens(&ke), gens(&ks), "{what}");
                    // mmap-locked maps and fills new pages every iteration and never
                    // unmaps them: its state grows, so no iteration repeats another.
                    if !d.contains("broken") && name != "mmap-locked" {
                        assert!(steady.repeated > 2000, "{what}: no steady state found");
                    }
                }
            }
        }
    }

    #[test]
    fn every_syscall_runs_under_every_correct_pti_variant() {
        for name in syscall::names() {
            for d in [
                "none",
                "pti:freebsd",
                "pti:linux",
                "pti:linux,nopcid",
                "pti:freebsd,nopcid",
            ] {
                let (t, v) = ns(d, name);
                assert!(t > 0.0);
                assert!(v.is_empty(), "{name} under {d}: {v:?}");
            }
        }
    }
}
