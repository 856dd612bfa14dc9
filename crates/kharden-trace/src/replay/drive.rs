//! Pass 2's engine loop: the run advances in slices of simulated time; between slices the
//! kernel frees exited tasks and the address spaces nobody uses any more (kernel/memory/reap.rs),
//! and the caller hears of the progress (and may stop the run by returning an error).
//! Slicing changes nothing in the simulation: the engine processes the same events in the
//! same order whatever the slice boundaries.

use kharden::kernel::Kernel;
use kharden::sim::Time;
use kharden::workload::program::Program;
use kharden::workload::run::{Runner, Window};
use kharden::Result;

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

/// Runs `program` on `k` to its end, freeing exited tasks as it goes; `tick` is called
/// after every slice.
pub fn drive(
    k: Kernel,
    program: Box<dyn Program>,
    mut tick: impl FnMut(&Progress) -> Result<()>,
) -> Result<Outcome> {
    let mut runner = Runner::new(k, program, 1);
    let mut window = Window::default();
    let mut at = Time::ZERO;
    let mut peak_live = 0;
    loop {
        let w = runner.run(at, SLICE)?;
        window.merge(&w);
        at += SLICE;
        runner.k.reap();
        let live = runner.k.tasks_in_use();
        peak_live = peak_live.max(live);
        tick(&Progress {
            simulated: at,
            tasks_created: runner.k.task_slots.created as usize,
            tasks_live: live,
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
