//! Runs one prepared point and turns what it measured into a row: the workload's own
//! figures, then every time category, counter and flush reason of its tasks' stats (named
//! as `run --json` names them, report/stats_json.rs).

use super::point::{Prepared, Resolved};
use super::record::{Cell, Record};
use crate::defense::{self, Extension};
use crate::error::{Error, Result};
use crate::kernel::{Kernel, OracleMode};
use crate::sim::Stats;
use crate::virt::vmx::ExitReason;
use crate::virt::SsddOutcome;
use crate::workload::kbuild_profile::JobProfile;
use crate::workload::kbuild_run::{simulate_with, Sampling};
use crate::workload::kernel_ops;
use crate::workload::SyscallLoop;

/// The point's row: its inputs, then its outputs or its one-line error.
pub fn record(p: &Prepared, extensions: &[Extension]) -> Record {
    let mut cells = inputs(p);
    // A panic is a bug, but it fails this point only: the sweep goes on.
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| outputs(p, extensions)));
    match run {
        Ok(Ok(out)) => cells.extend(out),
        Ok(Err(e)) => cells.push(("error".into(), Cell::Text(e.to_string()))),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let msg = format!("internal error (please report): {what}");
            cells.push(("error".into(), Cell::Text(msg.replace('\n', " "))));
        }
    }
    Record {
        key: p.point.key(),
        cells,
    }
}

fn inputs(p: &Prepared) -> Vec<(String, Cell)> {
    let text = |s: &str| Cell::Text(s.to_string());
    let mut cells = vec![
        ("key".to_string(), text(&p.point.key())),
        ("machine".into(), text(&p.point.machine.0)),
        ("cpus".into(), Cell::Int(p.machine.threads() as i64)),
        ("defense".into(), text(&p.point.defense.0)),
        ("workload".into(), text(&p.point.workload.0.label())),
    ];
    if let Resolved::Kbuild { jobs, .. } | Resolved::Fio { jobs, .. } = p.workload {
        cells.push(("jobs".into(), Cell::Int(jobs as i64)));
    }
    for (path, (value, _)) in &p.point.set {
        cells.push((format!("set.{path}"), text(value)));
    }
    cells
}

fn outputs(p: &Prepared, extensions: &[Extension]) -> Result<Vec<(String, Cell)>> {
    let m = &p.machine;
    let mut out: Vec<(String, Cell)> = vec![];
    let mut put = |name: &str, v: f64| out.push((name.to_string(), Cell::Float(v)));
    let stats = match &p.workload {
        Resolved::SyscallLoop {
            syscall,
            iterations,
            loops,
            guest,
        } => {
            let vm = guest.map(|g| g.vm(m, &p.params)).transpose()?;
            let mut k = boot(p, extensions)?;
            if let Some(vm) = vm {
                k.run_in_vm(vm);
            }
            let mut lp = SyscallLoop::new(syscall, *iterations)?;
            lp.start(&mut k)?;
            for _ in 0..lp.warmup {
                lp.measure(&mut k, 1)?;
            }
            let mut total: Option<Stats> = None;
            let mut elapsed = 0.0;
            for _ in 0..*loops {
                let l = lp.measure(&mut k, *iterations)?;
                elapsed += l.elapsed.secs();
                match &mut total {
                    Some(t) => t.merge(&l.stats),
                    None => total = Some(l.stats),
                }
            }
            violations(&k)?;
            put("seconds", elapsed);
            put(
                "ns_per_iteration",
                elapsed * 1e9 / (*iterations * *loops as u64) as f64,
            );
            total.unwrap_or_default()
        }
        Resolved::Kbuild {
            jobs,
            warmup_ms,
            window_ms,
            seed,
            samples,
        } => {
            let profile = JobProfile::builtin();
            let sampling = Sampling {
                warmup_ms: *warmup_ms,
                window_ms: *window_ms,
                seed: *seed,
                samples: *samples,
            };
            let r = simulate_with(
                m,
                &p.point.defense.0,
                extensions,
                *jobs,
                &profile,
                sampling,
                &p.params,
            )?;
            let w = &r.window;
            put("seconds", w.elapsed.secs());
            put("user_s", w.tasks.user_time().secs());
            put("system_s", w.tasks.system_time().secs());
            put("system_per_user_cycle", r.system_per_user_cycle());
            put(
                "system_ms_per_job",
                r.system_per_user_cycle() * profile.user_cycles() * 1e3,
            );
            put(
                "compile_jobs_of_work",
                r.user_work_cycles / profile.user_cycles(),
            );
            put("idle_system_s", w.idle.system_time().secs());
            if let Some(e) = r.sampling_error() {
                put("sampling_error", e);
            }
            w.tasks.clone()
        }
        Resolved::KernelOp(kernel_ops::Choice { op, caches, node }) => {
            let mut k = boot(p, extensions)?;
            let r = kernel_ops::run(&mut k, *op, *caches, *node, false)?;
            violations(&k)?;
            put("seconds", r.elapsed.secs());
            put(
                "ns_per_iteration",
                r.elapsed.secs() * 1e9 / op.iterations() as f64,
            );
            put("repeated_iterations", r.repeated as f64);
            r.stats
        }
        Resolved::Fio {
            jobs,
            warmup_ms,
            window_ms,
        } => {
            let r = crate::workload::fio::simulate(
                m,
                &p.point.defense.0,
                extensions,
                *jobs,
                *warmup_ms,
                *window_ms,
                &p.params,
            )?;
            put("seconds", r.window.elapsed.secs());
            put("ios", r.ios as f64);
            put("iops", r.iops);
            put("user_s", r.window.tasks.user_time().secs());
            put("system_s", r.window.tasks.system_time().secs());
            r.window.tasks
        }
        Resolved::Ssdd(opts) => {
            let r = opts.run(m, &p.params)?;
            ssdd_cells(&r, m.cpu.frequency_ghz, &mut put);
            match r {
                SsddOutcome::Kernel(r) => r.per_step.stats,
                // The path model's guest is no kernel model: it has no kernel stats.
                SsddOutcome::Path(_) => return Ok(out),
            }
        }
    };
    out.extend(stats_cells(&stats)?);
    Ok(out)
}

/// An ssdd run's time and, per measured step, its exits by reason, CR0 writes, what KVM's
/// MMU did and (path model) its events and the microseconds of each part of a step.
fn ssdd_cells(r: &SsddOutcome, ghz: f64, put: &mut impl FnMut(&str, f64)) {
    put("seconds", r.seconds());
    let n = r.measured_steps() as f64;
    put("measured_steps", n);
    for (reason, exits) in ExitReason::ALL.iter().zip(r.exits()) {
        put(
            &format!("exits_per_step.{}", reason.name()),
            exits as f64 / n,
        );
    }
    put("cr0_writes_per_step", r.cr0_writes() as f64 / n);
    for (name, v) in r.mmu().named() {
        put(&format!("kvm_mmu_per_step.{name}"), v as f64 / n);
    }
    match r {
        SsddOutcome::Path(r) => {
            let c = &r.counts;
            for (name, v) in [
                ("ept_violations", c.ept_violations),
                ("shadow_pf", c.shadow_pf),
                ("pt_write_faults", c.pt_write_faults),
                ("sw_walks", c.sw_walks),
                ("walks", c.walks),
                ("flushes", c.flushes),
            ] {
                put(&format!("{name}_per_step"), v as f64 / n);
            }
            for (name, cycles) in r.per_step.named() {
                put(&format!("us_per_step.{}", column(name)), cycles / ghz / 1e3);
            }
        }
        SsddOutcome::Kernel(r) => put("flushes_per_step", r.counts.flushes as f64 / n),
    }
}

/// A column name from a label: lower case, every run of other characters one underscore
/// ("CR0 handling+MMU" -> "cr0_handling_mmu").
fn column(label: &str) -> String {
    let words: Vec<String> = label
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| w.to_ascii_lowercase())
        .collect();
    words.join("_")
}

/// The point's kernel: its machine, its defenses, its parameters.
fn boot(p: &Prepared, extensions: &[Extension]) -> Result<Kernel> {
    let m = &p.machine;
    let defenses = defense::parse_list_with(&p.point.defense.0, Some(m), extensions)?;
    Ok(Kernel::boot_with(
        m.clone(),
        defenses,
        &p.params,
        OracleMode::default(),
    ))
}

fn violations(k: &Kernel) -> Result<()> {
    match k.violations.first() {
        Some(v) => Err(Error::new(format!("security oracle violation: {}", v.what))),
        None => Ok(()),
    }
}

/// The stats as `run --json` writes them, one cell per entry.
fn stats_cells(stats: &Stats) -> Result<Vec<(String, Cell)>> {
    let v = serde_json::to_value(stats).map_err(|e| Error::new(e.to_string()))?;
    let map = v
        .as_object()
        .ok_or_else(|| Error::new("stats: expected a JSON object"))?;
    Ok(map
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), Cell::from_json(v)?)))
        .collect())
}
