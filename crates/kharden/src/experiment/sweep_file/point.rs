//! Points: the grid's cartesian product and the listed points, each checked and resolved
//! (machine loaded and scaled, parameters set, defenses parsed, workload bounded) before
//! any point runs, so a bad name fails the whole file with the line that wrote it.

use super::spec::{self, WorkloadSpec};
use crate::defense::{self, Extension};
use crate::error::{Error, Result};
use crate::experiment::sweep::scaled;
use crate::machine::{self, MachineProfile};
use crate::params::{machine_params, Params, Provenance};
use crate::virt::kernel_guest::GuestVmOptions;
use crate::virt::{SsddOptions, SsddWords};
use crate::workload::kernel_ops;
use crate::workload::{self, bounds, kbuild_profile::JobProfile};
use std::collections::BTreeMap;
use std::ops::Range;

type Span = Range<usize>;

/// One point as written: its inputs and where each came from.
#[derive(Debug, Clone)]
pub struct Point {
    pub machine: (String, Span),
    pub cpus: Option<(u32, Span)>,
    pub defense: (String, Span),
    pub workload: (WorkloadSpec, Span),
    /// The point's own parameter values: path -> (value text, span), sorted by path.
    pub set: BTreeMap<String, (String, Span)>,
}

impl Point {
    /// The point's identity: equal keys run the same simulation (resume skips them).
    pub fn key(&self) -> String {
        let mut parts = vec![
            format!("machine={}", self.machine.0),
            format!(
                "cpus={}",
                self.cpus.as_ref().map_or("-".into(), |c| c.0.to_string())
            ),
            format!("defense={}", self.defense.0),
            format!("workload={}", self.workload.0.label()),
        ];
        parts.extend(self.set.iter().map(|(p, (v, _))| format!("{p}={v}")));
        parts.join("; ")
    }
}

/// A point ready to run: everything resolved and checked.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub point: Point,
    pub machine: MachineProfile,
    pub params: Params,
    pub workload: Resolved,
}

/// A workload with its defaults filled in for the point's machine.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    SyscallLoop {
        syscall: String,
        iterations: u64,
        loops: u32,
        /// The KVM guest the loop runs in (`virt = "kvm"`), if any.
        guest: Option<GuestVmOptions>,
    },
    Kbuild {
        jobs: u32,
        warmup_ms: f64,
        window_ms: f64,
        seed: u64,
        samples: u32,
    },
    KernelOp(kernel_ops::Choice),
    Ssdd(SsddOptions),
    Fio {
        jobs: u32,
        warmup_ms: f64,
        window_ms: f64,
    },
}

/// The file's points: the grid's product (machine, cpus, defense, workload, then each
/// parameter in path order) followed by the listed points.
pub fn expand(place: &str, text: &str, file: &spec::File) -> Result<Vec<Point>> {
    let mut points = vec![];
    if let Some(g) = &file.grid {
        let cpus: Vec<Option<(u32, Span)>> = match &g.cpus {
            None => vec![None],
            Some(c) => c.iter().map(|c| Some((*c.get_ref(), c.span()))).collect(),
        };
        let workloads = g
            .workload
            .iter()
            .map(|w| workload_of(place, text, w))
            .collect::<Result<Vec<_>>>()?;
        let flat = spec::flatten_set(&g.set);
        // The product's size first: a few long lists would not fit in memory.
        let size = [
            g.machine.len(),
            cpus.len(),
            g.defense.len(),
            workloads.len(),
        ]
        .into_iter()
        .chain(
            flat.iter()
                .map(|(_, v, _)| v.as_array().map_or(1, Vec::len)),
        )
        .try_fold(1usize, |n, k| n.checked_mul(k))
        .filter(|&n| n <= super::MAX_POINTS);
        if size.is_none() {
            return Err(Error::at(
                place,
                format!("grid: more than {} points", super::MAX_POINTS),
            ));
        }
        let mut sets: Vec<BTreeMap<String, (String, Span)>> = vec![BTreeMap::new()];
        for (path, value, span) in flat {
            let values = match &value {
                toml::Value::Array(a) if !a.is_empty() => a.clone(),
                _ => {
                    return Err(spec::at(
                        place,
                        text,
                        span,
                        format!("grid.set.{path}: expected a non-empty list of values"),
                    ))
                }
            };
            let texts = values
                .iter()
                .map(|v| spec::value_text(place, text, span.clone(), &path, v))
                .collect::<Result<Vec<_>>>()?;
            let mut product = Vec::with_capacity(sets.len() * texts.len());
            for s in &sets {
                for t in &texts {
                    let mut s = s.clone();
                    s.insert(path.clone(), (t.clone(), span.clone()));
                    product.push(s);
                }
            }
            sets = product;
        }
        for m in &g.machine {
            for c in &cpus {
                for d in &g.defense {
                    for w in &workloads {
                        for s in &sets {
                            points.push(Point {
                                machine: (m.get_ref().clone(), m.span()),
                                cpus: c.clone(),
                                defense: (d.get_ref().clone(), d.span()),
                                workload: w.clone(),
                                set: s.clone(),
                            });
                        }
                    }
                }
            }
        }
    }
    for p in &file.point {
        let mut set = BTreeMap::new();
        for (path, value, span) in spec::flatten_set(&p.set) {
            let t = spec::value_text(place, text, span.clone(), &path, &value)?;
            set.insert(path, (t, span));
        }
        points.push(Point {
            machine: (p.machine.get_ref().clone(), p.machine.span()),
            cpus: p.cpus.as_ref().map(|c| (*c.get_ref(), c.span())),
            defense: (p.defense.get_ref().clone(), p.defense.span()),
            workload: workload_of(place, text, &p.workload)?,
            set,
        });
    }
    if points.len() > super::MAX_POINTS {
        return Err(Error::at(
            place,
            format!(
                "{} points: expected at most {}",
                points.len(),
                super::MAX_POINTS
            ),
        ));
    }
    if points.is_empty() {
        return Err(Error::at(
            place,
            "no points: expected a [grid] or at least one [[point]]",
        ));
    }
    Ok(points)
}

fn workload_of(
    place: &str,
    text: &str,
    w: &toml::Spanned<toml::Value>,
) -> Result<(WorkloadSpec, Span)> {
    WorkloadSpec::from_toml(w.get_ref())
        .map(|s| (s, w.span()))
        .map_err(|e| spec::at(place, text, w.span(), format!("workload: {e}")))
}

/// Where the machines of a sweep come from, loaded once per name.
#[derive(Default)]
pub struct Machines(BTreeMap<String, MachineProfile>);

impl Machines {
    fn load(&mut self, name: &str) -> Result<MachineProfile> {
        if let Some(m) = self.0.get(name) {
            return Ok(m.clone());
        }
        let m = machine::load(name)?;
        self.0.insert(name.to_string(), m.clone());
        Ok(m)
    }
}

/// Resolves and checks one point. `base` holds the file's (and command line's) common
/// parameters; `machine_set` the common `machine.*` assignments.
pub fn prepare(
    place: &str,
    text: &str,
    point: &Point,
    base: &Params,
    machine_set: &[(String, String, Span)],
    machines: &mut Machines,
    extensions: &[Extension],
) -> Result<Prepared> {
    // Messages of the shared checks name the flag ("--defense: ..."); in a sweep file
    // the key is the place.
    let err = |span: &Span, e: Error| {
        let msg = e.to_string().trim_start_matches("--").replace(": --", ": ");
        spec::at(place, text, span.clone(), msg)
    };
    let (name, mspan) = &point.machine;
    let mut m = machines
        .load(name)
        .map_err(|e| err(mspan, Error::new(format!("machine: {e}"))))?;
    if let Some((n, cspan)) = &point.cpus {
        if *n == 0 || *n > 1024 {
            return Err(err(
                cspan,
                Error::new(format!("cpus: expected 1..1024, got {n}")),
            ));
        }
        m = scaled(&m, *n).map_err(|e| err(cspan, e))?;
    }
    let mut params = base.clone();
    let by = || Provenance::Set {
        by: format!("sweep file {place}"),
    };
    let common = machine_set
        .iter()
        .map(|(p, v, s)| (p.as_str(), v.as_str(), s));
    let own = point
        .set
        .iter()
        .map(|(p, (v, s))| (p.as_str(), v.as_str(), s));
    for (path, value, span) in common.chain(own) {
        if let Some(rest) = path.strip_prefix("machine.") {
            m = machine_params::set(&m, "set", rest, value).map_err(|e| err(span, e))?;
        } else {
            params
                .set_text("set", path, value, by())
                .map_err(|e| err(span, e))?;
        }
    }
    let (dname, dspan) = &point.defense;
    if dname.split(',').any(|d| d.trim().is_empty()) {
        return Err(err(
            dspan,
            Error::new(format!("defense: empty defense name in '{dname}'")),
        ));
    }
    defense::parse_list_with(dname, Some(&m), extensions).map_err(|e| err(dspan, e))?;
    let (w, wspan) = &point.workload;
    let resolved = resolve_workload(w, &m).map_err(|e| err(wspan, e))?;
    if matches!(resolved, Resolved::Ssdd(_)) && !["none", "kernexec"].contains(&dname.as_str()) {
        return Err(err(
            dspan,
            Error::new(format!("defense: '{dname}': an ssdd point's guest runs KERNEXEC whatever the defense; leave defense out or write \"kernexec\"")),
        ));
    }
    Ok(Prepared {
        point: point.clone(),
        machine: m,
        params,
        workload: resolved,
    })
}

/// Fills a workload's defaults for machine `m` and checks its bounds.
fn resolve_workload(w: &WorkloadSpec, m: &MachineProfile) -> Result<Resolved> {
    workload::check_name(&w.name)?;
    let given = |keys: &[&str]| -> Result<()> {
        for opt in w.options() {
            let key = opt.split('=').next().unwrap_or_default();
            if !keys.contains(&key) {
                return Err(Error::new(format!(
                    "workload: {}: option {key} is not one of {}",
                    w.name,
                    keys.join(", ")
                )));
            }
        }
        Ok(())
    };
    match w.name.as_str() {
        "syscall-loop" => {
            given(&[
                "syscall",
                "iterations",
                "loops",
                "virt",
                "mmu",
                "kvm_variant",
                "ept_page",
            ])?;
            let guest = syscall_loop_guest(w, m)?;
            let syscall = w.syscall.clone().unwrap_or_else(|| "getppid".into());
            let iterations = w.iterations.unwrap_or(100_000);
            let loops = w.loops.unwrap_or(1);
            bounds::syscall_loop(loops, iterations)?;
            workload::SyscallLoop::new(&syscall, iterations)
                .map_err(|e| Error::new(format!("workload: {e}")))?;
            Ok(Resolved::SyscallLoop {
                syscall,
                iterations,
                loops,
                guest,
            })
        }
        "kernel-op" => {
            given(&["op", "caches", "node"])?;
            let name = |o: &str| format!("workload: kernel-op: {o}");
            let choice =
                kernel_ops::Choice::parse(w.op.as_deref(), w.caches.as_deref(), w.node, m, name)?;
            Ok(Resolved::KernelOp(choice))
        }
        "ssdd" => {
            given(&["mmu", "kvm_variant", "guest_model", "vcpus", "ept_page"])?;
            let words = SsddWords {
                mmu: w.mmu.as_deref(),
                kvm_variant: w.kvm_variant.as_deref(),
                guest_model: w.guest_model.as_deref(),
                vcpus: w.vcpus,
                ept_page: w.ept_page.as_deref(),
            };
            let opts = SsddOptions::parse(&words, |o| format!("workload: ssdd: {o}"))?;
            crate::virt::ssdd::check_support(m, opts.flavour)?;
            Ok(Resolved::Ssdd(opts))
        }
        "kbuild" => {
            given(&[
                "jobs",
                "jobs_per_cpu",
                "warmup_ms",
                "window_ms",
                "window_cpu_ms",
                "seed",
                "samples",
            ])?;
            let jobs = match (w.jobs, w.jobs_per_cpu) {
                (Some(_), Some(_)) => {
                    return Err(Error::new(
                        "workload: kbuild: jobs and jobs_per_cpu exclude each other",
                    ))
                }
                (Some(j), None) => j,
                (None, Some(r)) if r.is_finite() && r > 0.0 && r <= 16.0 => {
                    (m.threads() as f64 * r).ceil() as u32
                }
                (None, Some(r)) => {
                    return Err(Error::new(format!(
                        "workload: kbuild: jobs_per_cpu: expected 0 < ratio <= 16, got {r}"
                    )))
                }
                (None, None) => m.threads(),
            };
            bounds::kbuild_jobs(m, &JobProfile::builtin(), jobs)?;
            let warmup_ms = w.warmup_ms.unwrap_or(4.0);
            let window_ms = match (w.window_ms, w.window_cpu_ms) {
                (Some(_), Some(_)) => {
                    return Err(Error::new(
                        "workload: kbuild: window_ms and window_cpu_ms exclude each other",
                    ))
                }
                (Some(ms), None) => ms,
                (None, Some(cpu_ms)) => cpu_ms / jobs as f64,
                (None, None) => 24.0,
            };
            if !(warmup_ms >= 0.0 && window_ms > 0.0 && warmup_ms + window_ms <= 10_000.0) {
                return Err(Error::new(
                    "workload: kbuild: expected 0 <= warmup_ms, 0 < window, total at most 10000 ms",
                ));
            }
            let samples = w.samples.unwrap_or(1);
            if !(1..=64).contains(&samples) {
                return Err(Error::new(format!(
                    "workload: kbuild: samples: expected 1..64, got {samples}"
                )));
            }
            Ok(Resolved::Kbuild {
                jobs,
                warmup_ms,
                window_ms,
                seed: w.seed.unwrap_or(1),
                samples,
            })
        }
        "fio-randread" => {
            given(&["jobs", "warmup_ms", "window_ms"])?;
            let jobs = w.jobs.unwrap_or(1);
            crate::workload::fio::check_jobs(m, jobs)?;
            let warmup_ms = w.warmup_ms.unwrap_or(1.0);
            let window_ms = w.window_ms.unwrap_or(4.0);
            if !(warmup_ms >= 0.0 && window_ms > 0.0 && warmup_ms + window_ms <= 10_000.0) {
                return Err(Error::new(
                    "workload: fio-randread: expected 0 <= warmup_ms, 0 < window_ms, total at most 10000 ms",
                ));
            }
            Ok(Resolved::Fio {
                jobs,
                warmup_ms,
                window_ms,
            })
        }
        other => Err(Error::new(format!(
            "workload: {other}: not runnable in a sweep"
        ))),
    }
}

/// A syscall loop's KVM guest: `virt = "kvm"` with its MMU (tdp or legacy), CR0 variant and
/// EPT page size, checked against the machine's virtualization hardware; those options
/// without `virt` are refused rather than ignored.
fn syscall_loop_guest(w: &WorkloadSpec, m: &MachineProfile) -> Result<Option<GuestVmOptions>> {
    let name = |o: &str| format!("workload: syscall-loop: {o}");
    match w.virt.as_deref() {
        Some("kvm") => {
            let g = GuestVmOptions::parse(
                w.mmu.as_deref(),
                w.kvm_variant.as_deref(),
                w.ept_page.as_deref(),
                name,
            )?;
            crate::virt::ssdd::check_support(m, g.flavour)?;
            Ok(Some(g))
        }
        Some(other) => Err(Error::at(
            name("virt"),
            format!("expected kvm, got \"{other}\""),
        )),
        None => {
            let guest_only = [
                ("mmu", w.mmu.is_some()),
                ("kvm_variant", w.kvm_variant.is_some()),
                ("ept_page", w.ept_page.is_some()),
            ];
            match guest_only.iter().find(|(_, given)| *given) {
                Some((option, _)) => Err(Error::at(
                    name(option),
                    "applies to a loop in a guest: add virt = \"kvm\"",
                )),
                None => Ok(None),
            }
        }
    }
}
