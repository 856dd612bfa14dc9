//! Syscall-latency tables (seed 003): rows of (machine, defenses) running a syscall loop,
//! compared with published ns per call.

use super::file::Header;
use super::Fit;
use crate::defense;
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::machine::{self, MachineProfile};
use crate::params::{Overrides, Params};
use crate::report::table::Table;
use crate::report::{Judging, Reproduction, Row};
use crate::sim::{Counter, TimeCategory};
use crate::virt::kernel_guest::GuestVmOptions;
use crate::workload::syscall_loop::{LoopResult, SyscallLoop};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    pub header: Header,
    pub machine: String,
    pub syscall: String,
    pub iterations: u64,
    pub tolerance_pct: f64,
    #[serde(default)]
    pub fit: Option<Fit>,
    pub row: Vec<RowSpec>,
    #[serde(default)]
    pub prediction: Vec<PredictionSpec>,
    /// A syscall whose Linux PTI added cost to print on every x86 profile of the library,
    /// with and without PCID and global kernel text (with its measured Linux work).
    #[serde(default)]
    pub pti_on_every_profile: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowSpec {
    pub label: String,
    #[serde(default)]
    pub judging: Judging,
    pub defense: String,
    pub published: f64,
    #[serde(default)]
    pub machine: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PredictionSpec {
    pub label: String,
    pub defense: String,
    #[serde(default)]
    pub machine: Option<String>,
    #[serde(default)]
    pub syscall: Option<String>,
    /// Run the syscall with its measured Linux work (kernel/paths/table.rs) even where the
    /// experiment fits the work of the same syscall for another kernel.
    #[serde(default)]
    pub measured_work: bool,
    /// Run the loop in a KVM guest (TDP MMU) whose RAM the host backs with pages of this
    /// size (4k, 2m, 1g): virt/kernel_guest.rs.
    #[serde(default)]
    pub guest: Option<String>,
}

pub fn parse(place: &str, text: &str) -> Result<Experiment> {
    let e: Experiment = super::file::read(place, text)?;
    if let Some(fit) = &e.fit {
        let labels: Vec<&str> = e.row.iter().map(|r| r.label.as_str()).collect();
        fit.check(place, &["syscall_work_cycles"], &labels)?;
    }
    if e.iterations == 0 {
        return Err(Error::at(place, "iterations: expected a positive number"));
    }
    for r in &e.row {
        defense::parse_list(&r.defense)
            .map_err(|err| Error::at(place, format!("row \"{}\": {err}", r.label)))?;
    }
    for p in &e.prediction {
        if let Some(g) = &p.guest {
            crate::virt::kernel_guest::parse_backing(g).map_err(|err| {
                Error::at(place, format!("prediction \"{}\": guest: {err}", p.label))
            })?;
        }
    }
    Ok(e)
}

/// One simulated configuration.
pub struct Measured {
    pub label: String,
    pub machine: MachineProfile,
    pub result: LoopResult,
}

/// Simulates `syscall` under `defenses` on `machine` with the handler's work set to `work`,
/// on the machine itself or in a KVM guest whose RAM is backed by `guest` pages.
pub fn simulate(
    machine: &MachineProfile,
    defenses: &str,
    syscall: &str,
    work: Option<f64>,
    iterations: u64,
    params: &Params,
    guest: Option<&str>,
) -> Result<LoopResult> {
    let vm = match guest {
        Some(g) => {
            let name = |o: &str| format!("guest {o}");
            let vm = GuestVmOptions::parse(None, None, Some(g), name)?;
            Some(vm.vm(machine, params)?)
        }
        None => None,
    };
    let mut k = Kernel::boot_with(
        machine.clone(),
        defense::parse_list(defenses)?,
        params,
        Default::default(),
    );
    if let Some(vm) = vm {
        k.run_in_vm(vm);
    }
    let mut lp = SyscallLoop::new(syscall, iterations)?;
    lp.given_work_cycles = work;
    let r = lp.run(&mut k)?;
    if let Some(v) = k.violations.first() {
        return Err(Error::new(format!(
            "{} on {}: security oracle violation: {}",
            defenses, machine.name, v.what
        )));
    }
    Ok(r)
}

pub fn run(e: &Experiment, overrides: &Overrides) -> Result<Reproduction> {
    let base_machine = overrides.apply_machine(&machine::load(&e.machine)?)?;
    let machine_for = |name: &Option<String>| -> Result<MachineProfile> {
        match name {
            Some(n) => overrides.apply_machine(&machine::load(n)?),
            None => Ok(base_machine.clone()),
        }
    };
    let mut params = Params::linux();
    overrides.apply(&mut params)?;
    let params = &params;
    // The fit: time is affine in the handler's work cycles, so one run at zero work gives
    // the offset and the published figure gives the work.
    let mut fitted = vec![];
    let work = match &e.fit {
        None => None,
        Some(fit) => {
            let row = e.row.iter().find(|r| r.label == fit.row).unwrap();
            let m = machine_for(&row.machine)?;
            let zero = simulate(
                &m,
                &row.defense,
                &e.syscall,
                Some(0.0),
                e.iterations,
                params,
                None,
            )?
            .ns_per_iteration();
            let w = (row.published - zero) * m.cpu.frequency_ghz;
            if w < 0.0 {
                return Err(Error::new(format!(
                    "{}: fit impossible: the model alone already takes {zero:.1} ns > published {}",
                    e.header.name, row.published
                )));
            }
            fitted.push(format!(
                "{} = {w:.0} cycles ({} handler work, fitted to \"{}\" = {} ns)",
                fit.parameter, e.syscall, fit.row, row.published
            ));
            Some(w)
        }
    };
    let mut measured = vec![];
    let mut rows = vec![];
    for r in &e.row {
        let m = machine_for(&r.machine)?;
        let res = simulate(&m, &r.defense, &e.syscall, work, e.iterations, params, None)?;
        let mut row = Row::compared(
            &r.label,
            "ns",
            r.published,
            res.ns_per_iteration(),
            e.tolerance_pct,
        );
        r.judging.mark(&mut row);
        row.fitted = e.fit.as_ref().is_some_and(|f| f.row == r.label);
        rows.push(row);
        measured.push(Measured {
            label: r.label.clone(),
            machine: m,
            result: res,
        });
    }
    let mut predictions = vec![];
    let mut notes = vec![];
    for p in &e.prediction {
        let m = match machine_for(&p.machine) {
            Ok(m) => m,
            Err(err) => {
                notes.push(format!("prediction \"{}\" skipped: {err}", p.label));
                continue;
            }
        };
        let syscall = p.syscall.as_deref().unwrap_or(&e.syscall);
        let w = if syscall == e.syscall && !p.measured_work {
            work
        } else {
            None
        };
        let guest = p.guest.as_deref();
        let res = simulate(&m, &p.defense, syscall, w, e.iterations, params, guest)?;
        predictions.push(Row::predicted(
            &format!("{} [{}]", p.label, m.name),
            "ns",
            res.ns_per_iteration(),
        ));
        measured.push(Measured {
            label: format!("{} (prediction)", p.label),
            machine: m,
            result: res,
        });
    }
    let mut breakdowns = vec![breakdown(&e.header.title, &measured)];
    if let Some(syscall) = &e.pti_on_every_profile {
        breakdowns.push(pti_on_every_profile(
            syscall,
            e.iterations,
            overrides,
            params,
        )?);
    }
    notes.extend(rows.iter().zip(&measured).filter_map(implied_cr3_write));
    notes.push("work cycles of syscalls other than the fitted one are estimates (kernel/paths/syscall.rs), not reproduction targets".into());
    Ok(Reproduction {
        rows,
        fitted_parameters: fitted.len() as u32,
        fitted,
        predictions,
        breakdowns,
        notes,
        params: Some(params.to_json()),
        ..e.header.reproduction()
    })
}

/// Linux PTI's added cost per `syscall` (its measured Linux work) on every x86 profile of the
/// library: with PCID where the CPU has it (kernel text not global, as Linux does with
/// PCID), and without PCID with global kernel text (pti=auto) and without (pti=on).
fn pti_on_every_profile(
    syscall: &str,
    iterations: u64,
    overrides: &Overrides,
    params: &Params,
) -> Result<Table> {
    let mut t = Table::new(
        format!("\nLinux PTI's added cost per {syscall} on every x86 profile (its measured Linux work), ns and % of the call without PTI"),
        &["machine", "PTI off ns", "PCID", "no PCID, global text", "no PCID, no global text"],
    );
    let machines: Vec<MachineProfile> = machine::names()
        .into_iter()
        .map(|n| overrides.apply_machine(&machine::load(n)?))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .filter(|m| m.arch == machine::Arch::X86_64)
        .collect();
    const CONFIGS: [&str; 4] = [
        "none",
        "pti:linux",
        "pti:linux,nopcid",
        "pti:linux-forced,nopcid",
    ];
    let runs = crate::sim::parallel::map_indices(machines.len() * CONFIGS.len(), |i| {
        let (m, d) = (&machines[i / CONFIGS.len()], CONFIGS[i % CONFIGS.len()]);
        if d == "pti:linux" && !m.cpu.features.pcid {
            return Ok(None);
        }
        simulate(m, d, syscall, None, iterations, params, None).map(|r| Some(r.ns_per_iteration()))
    });
    let runs: Vec<Option<f64>> = runs.into_iter().collect::<Result<_>>()?;
    for (m, ns) in machines.iter().zip(runs.chunks(CONFIGS.len())) {
        let off = ns[0].expect("every machine runs without PTI");
        let added = |v: Option<f64>| {
            v.map_or("-".into(), |v| {
                format!("{:+.1} ({:+.0}%)", v - off, (v / off - 1.0) * 100.0)
            })
        };
        t.push(vec![
            m.name.clone(),
            format!("{off:.1}"),
            added(ns[1]),
            added(ns[2]),
            added(ns[3]),
        ]);
    }
    Ok(t)
}

/// For a row that misses and writes CR3: the cost per write the published figure would mean
/// if the writes alone made up the difference (an upper bound where refills differ too),
/// beside what the model charges per write.
fn implied_cr3_write((row, m): (&Row, &Measured)) -> Option<String> {
    let r = &m.result;
    let writes =
        r.stats.counter(Counter::Cr3WriteFlush) + r.stats.counter(Counter::Cr3WriteNoflush);
    let published = row.published?;
    if row.fitted || !row.misses() || writes == 0 {
        return None;
    }
    let per_write =
        |ns: f64| ns * r.iterations as f64 / writes as f64 * m.machine.cpu.frequency_ghz;
    let cr3_ns = r.stats.time(TimeCategory::Cr3Write).ns() / r.iterations as f64;
    let gap_ns = published - r.ns_per_iteration();
    Some(format!(
        "\"{}\": were its CR3 writes ({:.2} per iteration) all of the difference, the published figure would mean {:.0} cycles per write; the model charges {:.0} ({})",
        row.label,
        writes as f64 / r.iterations as f64,
        per_write(cr3_ns + gap_ns),
        per_write(cr3_ns),
        m.machine.name
    ))
}

/// Where each configuration's time per iteration goes.
pub fn breakdown(title: &str, measured: &[Measured]) -> Table {
    let cats = [
        TimeCategory::User,
        TimeCategory::SyscallInsn,
        TimeCategory::Kernel,
        TimeCategory::EntryTrampoline,
        TimeCategory::Cr3Write,
        TimeCategory::UserTlbRefill,
        TimeCategory::KernelTlbRefill,
        TimeCategory::TlbInvalidate,
    ];
    let mut header = vec!["configuration", "ns/iter"];
    header.extend(cats.iter().map(|c| c.name()));
    header.extend([
        "walks/iter",
        "EPT walks/iter",
        "cr3 flush/iter",
        "cr3 noflush/iter",
    ]);
    let mut t = Table::new(
        format!("{title}: time per iteration (ns) by category"),
        &header,
    );
    for m in measured {
        let r = &m.result;
        let n = r.iterations as f64;
        let mut row = vec![m.label.clone(), format!("{:.1}", r.ns_per_iteration())];
        row.extend(
            cats.iter()
                .map(|&c| format!("{:.1}", r.stats.time(c).ns() / n)),
        );
        for c in [Counter::PageWalks, Counter::EptWalks] {
            row.push(format!("{:.2}", r.stats.counter(c) as f64 / n));
        }
        row.push(format!(
            "{:.2}",
            r.stats.counter(Counter::Cr3WriteFlush) as f64 / n
        ));
        row.push(format!(
            "{:.2}",
            r.stats.counter(Counter::Cr3WriteNoflush) as f64 / n
        ));
        t.push(row);
    }
    t
}
