//! Pass 2's engine loop: the run advances in slices of simulated time; between slices the
//! kernel frees exited tasks and the address spaces nobody uses any more (kernel/reap.rs),
//! and the caller hears of the progress (and may stop the run by returning an error).
//! Slicing changes nothing in the simulation: the engine processes the same events in the
//! same order whatever the slice boundaries.

use kharden::kernel::sched::TaskState;
use kharden::kernel::{Kernel, MmId, TaskId};
use kharden::sim::Time;
use kharden::workload::program::Program;
use kharden::workload::run::{Runner, Window};
use kharden::Result;
use std::collections::HashMap;

/// Simulated time between two reaping and progress points: 1 ms (tasks that exit within one
/// slice are freed together at its end).
const SLICE: Time = Time(1_000_000_000);

/// Where a replay is.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub simulated: Time,
    pub tasks_created: usize,
    pub tasks_live: usize,
    pub operations: u64,
}

/// A finished replay: the runner (its kernel), the whole run as one window, and the most
/// tasks that were alive (unreaped) at a slice boundary.
pub struct Outcome {
    pub runner: Runner,
    pub window: Window,
    pub peak_live: usize,
}

/// Tasks not yet reaped, and how many of them use each address space.
#[derive(Default)]
struct Reaper {
    seen: usize,
    live: Vec<TaskId>,
    users: HashMap<MmId, u32>,
    dead_mms: Vec<MmId>,
}

impl Reaper {
    fn reap(&mut self, k: &mut Kernel) {
        for t in self.seen..k.tasks.len() {
            self.live.push(t);
            *self.users.entry(k.tasks[t].mm).or_default() += 1;
        }
        self.seen = k.tasks.len();
        // Freeing takes no simulated time: the model's exit path already charges exit.
        let was = std::mem::replace(&mut k.fast_forward, true);
        let users = &mut self.users;
        let dead_mms = &mut self.dead_mms;
        self.live.retain(|&t| {
            if k.tasks[t].state != TaskState::Dead {
                return true;
            }
            let cpu = k.tasks[t].last_cpu.unwrap_or(0);
            if !k.reap_task(cpu, t) {
                return true;
            }
            let mm = k.tasks[t].mm;
            let n = users.get_mut(&mm).expect("counted when seen");
            *n -= 1;
            if *n == 0 {
                users.remove(&mm);
                dead_mms.push(mm);
            }
            false
        });
        self.dead_mms.retain(|&mm| !k.reap_mm(mm));
        k.fast_forward = was;
    }
}

/// Runs `program` on `k` to its end, freeing exited tasks as it goes; `tick` is called
/// after every slice.
pub fn drive(
    k: Kernel,
    program: Box<dyn Program>,
    mut tick: impl FnMut(&Progress) -> Result<()>,
) -> Result<Outcome> {
    let mut runner = Runner::new(k, program, 1);
    let mut reaper = Reaper::default();
    let mut window = Window::default();
    let mut at = Time::ZERO;
    let mut peak_live = 0;
    loop {
        let w = runner.run(at, SLICE)?;
        window.tasks.merge(&w.tasks);
        window.idle.merge(&w.idle);
        at = at + SLICE;
        reaper.reap(&mut runner.k);
        peak_live = peak_live.max(reaper.live.len());
        tick(&Progress {
            simulated: at,
            tasks_created: runner.k.tasks.len(),
            tasks_live: reaper.live.len(),
            operations: runner.ops,
        })?;
        if runner.finished() {
            break;
        }
    }
    window.elapsed = runner
        .k
        .cpus
        .iter()
        .map(|c| c.now)
        .max()
        .unwrap_or(Time::ZERO);
    Ok(Outcome {
        runner,
        window,
        peak_live,
    })
}
