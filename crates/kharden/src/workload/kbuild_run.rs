//! The kernel-build run driver: simulates windows of a `make -jN` build's steady state on a
//! machine, pools independent windows (seeds), and says how much of the recorded job's kernel
//! time the modelled paths account for (nothing is calibrated to it).
//! Experiments (experiment/kbuild_table) and sweeps build on it.

use crate::defense;
use crate::defense::registry;
use crate::error::{Error, Result};
use crate::kernel::{Kernel, OracleMode};
use crate::machine::MachineProfile;
use crate::params::{Params, Provenance};
use crate::sim::{Clock, Counter, OwnedCounter, Stats, Time, TimeCategory};
use crate::workload::kbuild::Make;
use crate::workload::kbuild_profile::JobProfile;
use crate::workload::run::{Runner, Window};

/// One simulated row: its samples' windows pooled.
#[derive(Clone)]
pub struct Measured {
    pub label: String,
    pub machine: MachineProfile,
    pub window: Window,
    /// User work cycles done in the window.
    pub user_work_cycles: f64,
    /// Each sample on its own: its tasks' stats and user work cycles.
    pub per_sample: Vec<(Stats, f64)>,
}

impl Measured {
    /// System seconds per cycle of user work.
    pub fn system_per_user_cycle(&self) -> f64 {
        self.window.tasks.system_time().secs() / self.user_work_cycles
    }

    /// System seconds per cycle of user work of each sample on its own.
    pub fn sample_ratios(&self) -> Vec<f64> {
        self.per_sample
            .iter()
            .map(|(tasks, user_work_cycles)| tasks.system_time().secs() / user_work_cycles)
            .collect()
    }

    /// Standard error of system_per_user_cycle() from the spread of the samples, as a
    /// fraction of it; `None` with a single sample.
    pub fn sampling_error(&self) -> Option<f64> {
        standard_error(&self.sample_ratios()).map(|se| se / self.system_per_user_cycle())
    }

    /// Accounts `cycles` per `counter` event to the fitted time of every sample and of the
    /// pooled window, as Kernel::account would have during the run.
    fn account_per_event(&mut self, counter: OwnedCounter, cycles: f64) {
        let clock = Clock::new(self.machine.cpu.frequency_ghz);
        let charge = |stats: &mut Stats| {
            let events = stats.owned(counter) as f64;
            stats.add_time(TimeCategory::Fitted, clock.cycles(events * cycles));
        };
        for (tasks, _) in &mut self.per_sample {
            charge(tasks);
        }
        charge(&mut self.window.tasks);
        charge(&mut self.window.idle);
    }
}

fn ms(v: f64) -> Time {
    Time((v * 1e9) as u64)
}

/// How much simulated time a kbuild run covers.
#[derive(Debug, Clone, Copy)]
pub struct Sampling {
    pub warmup_ms: f64,
    pub window_ms: f64,
    /// The first sample's seed; sample i runs with seed + i.
    pub seed: u64,
    /// Independent windows to simulate (in parallel) and pool.
    pub samples: u32,
}

impl Default for Sampling {
    /// One window (seed 1) of 25 ms after 4 ms of warm-up (the XPFO table's 96-thread rows).
    fn default() -> Self {
        Sampling {
            warmup_ms: 4.0,
            window_ms: 25.0,
            seed: 1,
            samples: 1,
        }
    }
}

/// The standard error of the mean of independent `values`; None with fewer than two.
pub fn standard_error(values: &[f64]) -> Option<f64> {
    let n = values.len() as f64;
    if n < 2.0 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    Some((var / n).sqrt())
}

/// Simulates the build's steady state on `m` under `defenses` with `params`.
pub fn simulate(
    m: &MachineProfile,
    defenses: &str,
    jobs: u32,
    profile: &JobProfile,
    sampling: Sampling,
    params: &Params,
) -> Result<Measured> {
    simulate_with(m, defenses, &[], jobs, profile, sampling, params)
}

/// simulate() with defenses from other crates available. The samples run on threads of
/// their own and are pooled in seed order, so the result does not depend on the host.
pub fn simulate_with(
    m: &MachineProfile,
    defenses: &str,
    extensions: &[defense::Extension],
    jobs: u32,
    profile: &JobProfile,
    sampling: Sampling,
    params: &Params,
) -> Result<Measured> {
    crate::workload::bounds::kbuild_jobs(m, profile, jobs)?;
    // Costs fitted per counted event are accounted, never spent (Kernel::account), so the
    // run's events do not depend on them: simulate without them and add them after. A fit
    // of one is then exact in one step, and runs that differ only in them are one run.
    let families = registry::families_in(defenses);
    let per_event = registry::per_event_costs(&families);
    let mut run_params = params.clone();
    for &(path, _) in &per_event {
        let by = Provenance::Set {
            by: "kbuild_run (added after the run)".into(),
        };
        run_params.set_num("kbuild_run", path, 0.0, by)?;
    }
    // The same inputs give the same windows: `reproduce all` runs each XPFO table's
    // baselines (and their machines' unhardened rows) once, not once per table, whatever
    // the table fitted for defenses the run does not plug in. A recording other than the
    // committed one is an input too.
    let mut key = format!(
        "{m:?}|{defenses}|{jobs}|{profile:?}|{sampling:?}|{:?}",
        run_params.fingerprint(|p| registry::param_applies(p, &families))
    );
    let recording = params.recording();
    if !recording.is_committed() {
        key += &format!("|{}", recording.key());
    }
    // A run another thread has under way is waited for, not run twice (the reproduction
    // tests run the XPFO tables side by side, and they share baselines).
    let slot = done_simulations()
        .lock()
        .expect("not poisoned")
        .entry(key)
        .or_default()
        .clone();
    let mut measured = slot
        .get_or_init(|| {
            simulate_uncached(
                m,
                defenses,
                extensions,
                jobs,
                profile,
                sampling,
                &run_params,
            )
        })
        .clone()?;
    for (path, counter) in per_event {
        measured.account_per_event(counter, params.num(path));
    }
    Ok(measured)
}

fn simulate_uncached(
    m: &MachineProfile,
    defenses: &str,
    extensions: &[defense::Extension],
    jobs: u32,
    profile: &JobProfile,
    sampling: Sampling,
    params: &Params,
) -> Result<Measured> {
    // One window of the build: its stats and the user work cycles done in it.
    let one_sample = |seed: u64| -> Result<(Window, f64)> {
        let mut k = Kernel::boot_with(
            m.clone(),
            defense::parse_list_with(defenses, Some(m), extensions)?,
            params,
            OracleMode::default(),
        );
        k.recycle_frames(profile.steady_state_frames(jobs));
        // Enough jobs that make never runs dry in the window.
        let spec = profile.spec(&k.paths);
        let mut r = Runner::new(k, Make::program(spec, jobs, u64::MAX), seed);
        let window = r.run(ms(sampling.warmup_ms), ms(sampling.window_ms))?;
        if let Some(v) = r.k.violations.first() {
            return Err(Error::new(format!(
                "{defenses} on {}: security oracle violation: {}",
                m.name, v.what
            )));
        }
        let user_work_cycles =
            window.tasks.time(TimeCategory::User).secs() * m.cpu.frequency_ghz * 1e9;
        if user_work_cycles <= 0.0 {
            return Err(Error::new(format!(
                "{defenses} on {}: no user work in the window; lengthen window_ms",
                m.name
            )));
        }
        Ok((window, user_work_cycles))
    };
    let one_sample = &one_sample;
    let samples: Vec<Result<(Window, f64)>> =
        crate::sim::parallel::map_indices(sampling.samples.max(1) as usize, |i| {
            one_sample(sampling.seed + i as u64)
        });
    let mut pooled = Measured {
        label: String::new(),
        machine: m.clone(),
        window: Window::default(),
        user_work_cycles: 0.0,
        per_sample: vec![],
    };
    for sample in samples {
        let (window, user_work_cycles) = sample?;
        pooled
            .per_sample
            .push((window.tasks.clone(), user_work_cycles));
        pooled.window.merge(&window);
        pooled.user_work_cycles += user_work_cycles;
    }
    Ok(pooled)
}

/// Forgets the simulations this process has run, so the next call of each simulates again
/// (what a benchmark of the engine needs before every iteration).
pub fn forget_simulations() {
    done_simulations().lock().expect("not poisoned").clear();
}

/// A simulation's result, once the thread that runs it has it.
type Done = std::sync::Arc<std::sync::OnceLock<Result<Measured>>>;

/// Simulations this process has run or is running, by everything that decides their result.
fn done_simulations() -> &'static std::sync::Mutex<std::collections::HashMap<String, Done>> {
    static DONE: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, Done>>> =
        std::sync::OnceLock::new();
    DONE.get_or_init(Default::default)
}

/// The build's kernel cycles per user cycle as `measured` on its machine under `defenses`,
/// against the recorded (unhardened) job's: how much of the measured kernel time the
/// modelled paths account for.
/// The modelled kernel cycles per user cycle of `measured`, and the recording's. The
/// recording's mitigations the modelled kernel left out are put back (kernel/mitigations.rs):
/// the share says what the modelled paths cover, not which mitigations a machine runs.
fn kernel_per_user(measured: &Measured, profile: &JobProfile) -> (f64, f64) {
    let m = &measured.machine;
    let left_out = measured
        .window
        .tasks
        .counter(Counter::MitigationCyclesLeftOut) as f64;
    let modelled = (measured.window.tasks.system_time().secs() * m.cpu.frequency_ghz * 1e9
        + left_out)
        / measured.user_work_cycles;
    (modelled, profile.system_cycles() / profile.user_cycles())
}

/// How much of the recorded job's kernel time the modelled paths give in `measured` (1.0:
/// all of it).
pub fn kernel_share(measured: &Measured, profile: &JobProfile) -> f64 {
    let (modelled, target) = kernel_per_user(measured, profile);
    modelled / target
}

pub fn kernel_share_note(measured: &Measured, profile: &JobProfile, defenses: &str) -> String {
    let m = &measured.machine;
    let (modelled, target) = kernel_per_user(measured, profile);
    let mut split = kernel_split(measured, profile);
    let short = |r: &SplitRow| r.recorded_ms.unwrap_or(0.0) - r.model_ms;
    split.sort_by(|a, b| short(b).total_cmp(&short(a)));
    let gaps: Vec<String> = split
        .iter()
        .take(3)
        .filter(|r| short(r) > 0.0)
        .map(|r| {
            format!(
                "{} {:.1} of {:.1}",
                r.op,
                r.model_ms,
                r.recorded_ms.unwrap_or(0.0)
            )
        })
        .collect();
    format!(
        "{}: the modelled kernel paths give {:.3} kernel cycles per user cycle {}, the unhardened recording {:.3} ({:.0}%); nothing is calibrated to close the gap. Largest shortfalls, ms per job at the recording's clock, modelled (without the recording's mitigations this kernel does not run) of recorded: {} (kharden run --workload kbuild prints every operation)",
        m.name,
        modelled,
        match defenses {
            "none" => "unhardened".to_string(),
            d => format!("under {d}"),
        },
        target,
        100.0 * modelled / target,
        gaps.join(", ")
    )
}

/// One operation's kernel time per compile job, the model's beside the recording's.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SplitRow {
    pub op: String,
    /// Modelled kernel time per job in ms, at the recording host's clock (the model's
    /// kernel cycles per user cycle times the recorded job's user cycles).
    pub model_ms: f64,
    /// The recorded job's kernel time in this operation (its kernel_time_split share of
    /// system_seconds); `None` where the recording has no such class.
    pub recorded_ms: Option<f64>,
}

/// Where `measured`'s kernel time went by operation, beside the recorded job's split
/// (workloads/kbuild-job.toml [kernel_time_split]); largest recorded first.
pub fn kernel_split(measured: &Measured, profile: &JobProfile) -> Vec<SplitRow> {
    let ghz = measured.machine.cpu.frequency_ghz;
    let per_job_ms = |t: crate::sim::Time| {
        t.secs() * ghz / measured.user_work_cycles * profile.user_cycles() / profile.host_ghz * 1e3
    };
    let mut rows: Vec<SplitRow> = measured
        .window
        .kernel_by_op
        .iter()
        .map(|(&op, &t)| SplitRow {
            op: op.to_string(),
            model_ms: per_job_ms(t),
            recorded_ms: None,
        })
        .collect();
    for (op, share) in &profile.kernel_time_split {
        let ms = share * profile.system_seconds * 1e3;
        match rows.iter_mut().find(|r| &r.op == op) {
            Some(r) => r.recorded_ms = Some(ms),
            None => rows.push(SplitRow {
                op: op.clone(),
                model_ms: 0.0,
                recorded_ms: Some(ms),
            }),
        }
    }
    let key = |r: &SplitRow| r.recorded_ms.unwrap_or(0.0).max(r.model_ms);
    rows.sort_by(|a, b| key(b).total_cmp(&key(a)).then(a.op.cmp(&b.op)));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::paths::recording::tests::slower;

    /// The memo of simulations tells recordings apart: a build on a recording whose
    /// anonymous faults took longer simulates again and spends more system time per user
    /// cycle; the committed recording's build after it is the memo's first.
    #[test]
    fn the_memo_keeps_builds_on_two_recordings_apart() {
        let dir = tempfile::tempdir().unwrap();
        let slower = std::sync::Arc::new(slower(dir.path(), "fault-anon", 5000.0));
        let m = crate::machine::load("ivybridge-i5-3550").unwrap();
        let profile = JobProfile::builtin();
        let sampling = Sampling {
            warmup_ms: 1.0,
            window_ms: 4.0,
            seed: 1,
            samples: 1,
        };
        let system = |p: &Params| {
            simulate(&m, "none", 4, &profile, sampling, p)
                .unwrap()
                .system_per_user_cycle()
        };
        let committed = system(&Params::linux());
        let longer = system(&Params::linux().with_recording(slower));
        assert!(longer > committed, "{committed} -> {longer}");
        assert_eq!(system(&Params::linux()), committed);
    }
}
