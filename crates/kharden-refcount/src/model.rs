//! The per-instruction cost model: cycles of LKDTM's loops (and of one refcount operation)
//! on a core we cannot run on.
//!
//! Instructions: the executed instruction sequence of one steady-state iteration of each
//! loop, from the cross-compiled code traced under qemu-user (`model/*.trace`, made by
//! [`crate::gen`]). Cycles: each executed instruction is charged by class from a per-core
//! table (`cores/*.toml`, every number with its source):
//!
//! - an exclusive pair (ld{a}xr ... st{l}xr on the same line, back to back): `exclusive_pair`,
//!   charged on the load, the store is part of it;
//! - an LSE atomic (ldadd, stadd, cas, ...): `lse_atomic`;
//! - an x86 LOCK-prefixed read-modify-write: `locked_rmw`;
//! - a barrier (dmb): `barrier`;
//! - anything else: `other` (dependent chain: its latency, 1 cycle on these cores).
//!
//! A value the sources do not supply may be fitted to one published figure, once per core,
//! never per row; the reproduction lists it.

use crate::{Impl, Op, Variant};
use kharden::machine::{Arch, MachineProfile};
use kharden::report::table::Table;
use kharden::report::{Reproduction, Row};
use kharden::{Error, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::OnceLock;

const ARM64_TRACE: &str = include_str!("../model/arm64.trace");
const X86_TRACE: &str = include_str!("../model/x86-64.trace");
const PUBLISHED: &str = include_str!("../published/seed001.toml");
const CORE_FILES: &[(&str, &str)] = &[
    (
        "cores/cortex-a57.toml",
        include_str!("../cores/cortex-a57.toml"),
    ),
    (
        "cores/neoverse-n1.toml",
        include_str!("../cores/neoverse-n1.toml"),
    ),
    (
        "cores/thunderx2.toml",
        include_str!("../cores/thunderx2.toml"),
    ),
    ("cores/x86-64.toml", include_str!("../cores/x86-64.toml")),
];

/// LKDTM's loop bound: INT_MAX.
pub const LKDTM_BOUND: u64 = 2_147_483_647;

/// Tolerance of the reproduction rows (issue 5: within 10% for cycles and instructions).
pub const TOLERANCE_PCT: f64 = 10.0;

/// How the model charges an instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    ExclusiveLoad,
    ExclusiveStore,
    LseAtomic,
    LockedRmw,
    Barrier,
    Load,
    Store,
    Prefetch,
    Branch,
    Alu,
}

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::ExclusiveLoad => "ldxr",
            Class::ExclusiveStore => "stxr",
            Class::LseAtomic => "lse",
            Class::LockedRmw => "lock",
            Class::Barrier => "barrier",
            Class::Load => "load",
            Class::Store => "store",
            Class::Prefetch => "prfm",
            Class::Branch => "branch",
            Class::Alu => "alu",
        }
    }
}

/// The class of one disassembled instruction (objdump syntax, arm64 or x86-64 AT&T).
pub fn classify(text: &str) -> Class {
    let mut words = text.split_whitespace();
    let mut m = words.next().unwrap_or("");
    if m == "lock" {
        return Class::LockedRmw;
    }
    if m.starts_with("rep") {
        m = words.next().unwrap_or("");
    }
    let operands = text[text.find(char::is_whitespace).unwrap_or(text.len())..].trim();
    match m {
        "ldxr" | "ldaxr" | "ldxrb" | "ldxrh" | "ldaxrb" | "ldaxrh" | "ldxp" | "ldaxp" => {
            return Class::ExclusiveLoad
        }
        "stxr" | "stlxr" | "stxrb" | "stxrh" | "stlxrb" | "stlxrh" | "stxp" | "stlxp" => {
            return Class::ExclusiveStore
        }
        "dmb" | "dsb" | "isb" | "mfence" | "lfence" | "sfence" => return Class::Barrier,
        "prfm" | "prefetchw" | "prefetcht0" => return Class::Prefetch,
        "b" | "bl" | "br" | "blr" | "ret" | "cbz" | "cbnz" | "tbz" | "tbnz" | "call" | "jmp"
        | "retq" | "callq" | "jmpq" => return Class::Branch,
        "xchg" if operands.contains('(') => return Class::LockedRmw,
        _ => {}
    }
    const LSE: &[&str] = &[
        "ldadd", "stadd", "cas", "swp", "ldclr", "ldset", "ldeor", "stclr", "stset", "steor",
        "ldsmax", "ldumax", "ldsmin", "ldumin",
    ];
    if LSE.iter().any(|p| m.starts_with(p)) {
        return Class::LseAtomic;
    }
    if m.starts_with("b.") || (m.starts_with('j') && m.len() <= 4) {
        return Class::Branch;
    }
    if m.starts_with("ldr") || m.starts_with("ldp") || m.starts_with("ldur") || m == "pop" {
        return Class::Load;
    }
    if m.starts_with("str") || m.starts_with("stp") || m.starts_with("stur") || m == "push" {
        return Class::Store;
    }
    // x86 memory operands: AT&T puts the destination last.
    if operands.contains('(') && !m.starts_with("lea") && !m.starts_with("nop") {
        let last = operands.rsplit(',').next().unwrap_or("");
        return if last.contains('(') {
            Class::Store
        } else {
            Class::Load
        };
    }
    Class::Alu
}

/// One instruction of a traced iteration.
#[derive(Debug, Clone)]
pub struct TracedInsn {
    /// Executions per iteration.
    pub count: f64,
    /// function+offset in the traced binary.
    pub place: String,
    pub text: String,
    pub class: Class,
}

/// One steady-state iteration of one LKDTM loop.
#[derive(Debug, Clone)]
pub struct LoopTrace {
    pub variant: Variant,
    /// None: the empty loop (loop control only).
    pub imp: Option<Impl>,
    pub op: Op,
    pub insns: Vec<TracedInsn>,
}

impl LoopTrace {
    pub fn instructions(&self) -> f64 {
        self.insns.iter().map(|i| i.count).sum()
    }
    pub fn count(&self, class: Class) -> f64 {
        self.insns
            .iter()
            .filter(|i| i.class == class)
            .map(|i| i.count)
            .sum()
    }
}

fn parse_traces(place: &str, text: &str) -> Result<Vec<LoopTrace>> {
    let mut out = vec![];
    let mut cur: Option<LoopTrace> = None;
    for (ln, line) in text.lines().enumerate() {
        let at = |msg: String| Error::at(format!("{place}:{}", ln + 1), msg);
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(rest) = line.strip_prefix("loop ") {
            let f: Vec<&str> = rest.split_whitespace().collect();
            if f.len() != 3 {
                return Err(at("expected 'loop VARIANT IMPL OP'".into()));
            }
            let variant = Variant::from_name(f[0])
                .ok_or_else(|| at(format!("unknown variant '{}'", f[0])))?;
            let imp = if f[1] == "empty" {
                None
            } else {
                Some(
                    Impl::from_name(f[1])
                        .ok_or_else(|| at(format!("unknown implementation '{}'", f[1])))?,
                )
            };
            let op = match f[2] {
                "inc" => Op::Inc,
                "dec" => Op::DecAndTest,
                o => return Err(at(format!("unknown op '{o}', expected inc or dec"))),
            };
            cur = Some(LoopTrace {
                variant,
                imp,
                op,
                insns: vec![],
            });
        } else if line == "end" {
            out.push(
                cur.take()
                    .ok_or_else(|| at("'end' without 'loop'".into()))?,
            );
        } else {
            let l = cur
                .as_mut()
                .ok_or_else(|| at("instruction outside a loop".into()))?;
            let mut it = line.splitn(3, ' ');
            let count: f64 = it
                .next()
                .unwrap_or("")
                .parse()
                .map_err(|_| at("expected an execution count".into()))?;
            let place = it.next().unwrap_or("").to_string();
            let text = it.next().unwrap_or("").to_string();
            let class = classify(&text);
            l.insns.push(TracedInsn {
                count,
                place,
                text,
                class,
            });
        }
    }
    Ok(out)
}

/// Every traced loop (arm64 LL/SC and LSE, x86-64), from the checked-in trace files;
/// parsed once per process.
pub fn traces() -> Result<&'static [LoopTrace]> {
    static TRACES: OnceLock<Result<Vec<LoopTrace>>> = OnceLock::new();
    TRACES
        .get_or_init(|| {
            let mut all = parse_traces("model/arm64.trace", ARM64_TRACE)?;
            all.extend(parse_traces("model/x86-64.trace", X86_TRACE)?);
            Ok(all)
        })
        .as_deref()
        .map_err(Clone::clone)
}

fn find(traces: &[LoopTrace], variant: Variant, imp: Option<Impl>, op: Op) -> Result<&LoopTrace> {
    traces
        .iter()
        .find(|t| t.variant == variant && t.imp == imp && t.op == op)
        .ok_or_else(|| {
            Error::new(format!(
                "model: no trace of the {} {} loop for {} (regenerate model/*.trace)",
                imp.map(Impl::name).unwrap_or("empty"),
                op.name(),
                variant.name()
            ))
        })
}

// ------------------------------------------------------------------------ core tables

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Param {
    Value(f64),
    Fit { fit: String },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct CycleTable {
    other: f64,
    barrier: f64,
    #[serde(default)]
    exclusive_pair: Option<Param>,
    #[serde(default)]
    lse_atomic: Option<f64>,
    #[serde(default)]
    locked_rmw: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct CoreFile {
    name: String,
    isa: String,
    matches: Vec<String>,
    reference_frequency_ghz: f64,
    cycles: CycleTable,
}

/// A core's instruction costs, with fitted values resolved.
#[derive(Debug, Clone)]
pub struct Core {
    pub name: String,
    pub isa: String,
    pub matches: Vec<String>,
    pub reference_frequency_ghz: f64,
    pub other: f64,
    pub barrier: f64,
    pub exclusive_pair: Option<f64>,
    pub lse_atomic: Option<f64>,
    pub locked_rmw: Option<f64>,
    /// Parameters fitted to a published figure, with the figure.
    pub fitted: Vec<String>,
    /// Where a value came from something other than the table (e.g. a host measurement).
    pub notes: Vec<String>,
}

impl Core {
    /// Cycles of one execution of an instruction of `class`.
    pub fn cost(&self, class: Class) -> Result<f64> {
        let need = |v: Option<f64>, what: &str| {
            v.ok_or_else(|| {
                Error::new(format!(
                    "cores/{}.toml: cycles.{what} is needed for this loop but not given",
                    self.name
                ))
            })
        };
        Ok(match class {
            Class::ExclusiveLoad => need(self.exclusive_pair, "exclusive_pair")?,
            Class::ExclusiveStore => 0.0,
            Class::LseAtomic => need(self.lse_atomic, "lse_atomic")?,
            Class::LockedRmw => need(self.locked_rmw, "locked_rmw")?,
            Class::Barrier => self.barrier,
            _ => self.other,
        })
    }
    /// Cycles of one iteration of a traced loop.
    pub fn cycles(&self, t: &LoopTrace) -> Result<f64> {
        t.insns
            .iter()
            .map(|i| Ok(i.count * self.cost(i.class)?))
            .sum()
    }
}

#[derive(Debug, Clone, Deserialize)]
struct PublishedRow {
    label: String,
    implementation: String,
    seconds: f64,
    cycles: f64,
    instructions: f64,
}

#[derive(Debug, Clone, Deserialize)]
struct Published {
    source: String,
    core: String,
    variant: String,
    lkdtm_bound: u64,
    row: Vec<PublishedRow>,
}

fn published() -> Result<Published> {
    toml::from_str(PUBLISHED).map_err(|e| Error::at("published/seed001.toml", e.message().trim()))
}

/// LKDTM totals (instructions, cycles) for the loop bound `bound`: bound-1 increments, then
/// bound dec_and_test.
fn lkdtm_totals(core: &Core, inc: &LoopTrace, dec: &LoopTrace, bound: u64) -> Result<(f64, f64)> {
    let (ni, nd) = ((bound - 1) as f64, bound as f64);
    Ok((
        ni * inc.instructions() + nd * dec.instructions(),
        ni * core.cycles(inc)? + nd * core.cycles(dec)?,
    ))
}

fn resolve(place: &str, file: CoreFile, traces: &[LoopTrace]) -> Result<Core> {
    let c = &file.cycles;
    let mut core = Core {
        name: file.name.clone(),
        isa: file.isa.clone(),
        matches: file.matches.clone(),
        reference_frequency_ghz: file.reference_frequency_ghz,
        other: c.other,
        barrier: c.barrier,
        exclusive_pair: None,
        lse_atomic: c.lse_atomic,
        locked_rmw: c.locked_rmw,
        fitted: vec![],
        notes: vec![],
    };
    match &c.exclusive_pair {
        None => {}
        Some(Param::Value(v)) => core.exclusive_pair = Some(*v),
        Some(Param::Fit { fit }) if fit == "seed001.ATOMIC_TIMING.cycles" => {
            // Solve published cycles = (N-1)(E x_inc + o_inc) + N (E x_dec + o_dec) for E.
            let p = published()?;
            let row = p.row.iter().find(|r| r.implementation == "atomic_t").ok_or_else(|| Error::at("published/seed001.toml", "no atomic_t row"))?;
            let variant = Variant::from_name(&p.variant).ok_or_else(|| Error::at("published/seed001.toml", "unknown variant"))?;
            let inc = find(traces, variant, Some(Impl::Atomic), Op::Inc)?;
            let dec = find(traces, variant, Some(Impl::Atomic), Op::DecAndTest)?;
            core.exclusive_pair = Some(0.0);
            let (_, rest) = lkdtm_totals(&core, inc, dec, p.lkdtm_bound)?;
            let (ni, nd) = ((p.lkdtm_bound - 1) as f64, p.lkdtm_bound as f64);
            let pairs = ni * inc.count(Class::ExclusiveLoad) + nd * dec.count(Class::ExclusiveLoad);
            let e = (row.cycles - rest) / pairs;
            core.exclusive_pair = Some(e);
            core.fitted.push(format!(
                "{}: exclusive_pair = {e:.2} cycles, fitted to seed 001's ATOMIC_TIMING cycles ({:.0})",
                core.name, row.cycles
            ));
        }
        Some(Param::Fit { fit }) => return Err(Error::at(place, format!("cycles.exclusive_pair: unknown fit target '{fit}', expected \"seed001.ATOMIC_TIMING.cycles\""))),
    }
    Ok(core)
}

/// Every core table, resolved (fits computed); once per process.
pub fn cores() -> Result<&'static [Core]> {
    static CORES: OnceLock<Result<Vec<Core>>> = OnceLock::new();
    CORES
        .get_or_init(|| {
            let traces = traces()?;
            CORE_FILES
                .iter()
                .map(|(place, text)| {
                    let f: CoreFile =
                        toml::from_str(text).map_err(|e| Error::at(place, e.message().trim()))?;
                    resolve(place, f, traces)
                })
                .collect()
        })
        .as_deref()
        .map_err(Clone::clone)
}

fn core_named(cores: &[Core], name: &str) -> Result<Core> {
    cores
        .iter()
        .find(|c| c.name == name)
        .cloned()
        .ok_or_else(|| Error::new(format!("no core table '{name}'")))
}

/// The core table serving a machine profile (by machine name or microarchitecture), with a
/// host measurement of the locked increment taking precedence on x86 when the profile has one.
pub fn core_for(machine: &MachineProfile) -> Result<Core> {
    let cores = cores()?;
    let isa = match machine.arch {
        Arch::X86_64 => "x86-64",
        Arch::Aarch64 => "arm64",
    };
    let keys = [
        machine.name.to_lowercase(),
        machine.cpu.microarchitecture.to_lowercase(),
        machine.cpu.model.to_lowercase(),
    ];
    let mut core = cores
        .iter()
        .filter(|c| c.isa == isa)
        .find(|c| c.matches.iter().any(|m| keys.iter().any(|k| k == m || k.contains(m.as_str()))))
        .cloned()
        .ok_or_else(|| {
            Error::new(format!(
                "machine '{}': no refcount core table for microarchitecture '{}' (cores/*.toml cover: {})",
                machine.name,
                machine.cpu.microarchitecture,
                cores.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
            ))
        })?;
    if machine.arch == Arch::X86_64 {
        if let Some(ns) = machine
            .measured
            .as_ref()
            .and_then(|m| m.atomic_increment_ns)
        {
            core.locked_rmw = Some(ns * machine.cpu.frequency_ghz);
            core.notes.push(format!(
                "locked_rmw from this machine's measured atomic_increment_ns ({ns} ns)"
            ));
        }
    }
    Ok(core)
}

/// The form a machine runs: LSE when the profile says the CPU has it (the kernel patches it
/// in at boot), else LL/SC; x86-64 on x86.
pub fn variant_for(machine: &MachineProfile) -> Variant {
    match machine.arch {
        Arch::X86_64 => Variant::X86_64,
        Arch::Aarch64 if machine.cpu.features.lse_atomics => Variant::Arm64Lse,
        Arch::Aarch64 => Variant::Arm64Llsc,
    }
}

/// Cycles of one refcount operation of `imp` on `machine`: the modelled cycles of one
/// iteration of LKDTM's loop for that operation minus those of the same loop with no
/// operation (loop control). arm64 and x86-64 alike come from the per-instruction model on
/// the traced instruction sequences (x86: LOCK'd instruction cost from the machine's measured
/// atomic_increment_ns when present, else cores/x86-64.toml). Contention is not modelled: one
/// CPU, the line in its L1.
pub fn op_cycles(machine: &MachineProfile, imp: Impl, op: Op) -> Result<f64> {
    let core = core_for(machine)?;
    let traces = traces()?;
    let variant = variant_for(machine);
    let with = core.cycles(find(traces, variant, Some(imp), op)?)?;
    let without = core.cycles(find(traces, variant, None, op)?)?;
    Ok((with - without).max(0.0))
}

/// Modelled figures of LKDTM's loop for one implementation on one core.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Modelled {
    pub core: String,
    pub variant: &'static str,
    pub implementation: &'static str,
    pub frequency_ghz: f64,
    pub instructions: f64,
    pub cycles: f64,
    pub seconds: f64,
    /// Per inc+dec pair.
    pub instructions_per_pair: f64,
    pub cycles_per_pair: f64,
    /// Instruction counts per inc+dec pair by class.
    pub by_class: BTreeMap<&'static str, f64>,
}

pub fn lkdtm(
    core: &Core,
    variant: Variant,
    imp: Impl,
    frequency_ghz: f64,
    bound: u64,
) -> Result<Modelled> {
    let traces = traces()?;
    let inc = find(traces, variant, Some(imp), Op::Inc)?;
    let dec = find(traces, variant, Some(imp), Op::DecAndTest)?;
    let (instructions, cycles) = lkdtm_totals(core, inc, dec, bound)?;
    let mut by_class = BTreeMap::new();
    for i in inc.insns.iter().chain(&dec.insns) {
        *by_class.entry(i.class.name()).or_insert(0.0) += i.count;
    }
    Ok(Modelled {
        core: core.name.clone(),
        variant: variant.name(),
        implementation: imp.name(),
        frequency_ghz,
        instructions,
        cycles,
        seconds: cycles / (frequency_ghz * 1e9),
        instructions_per_pair: inc.instructions() + dec.instructions(),
        cycles_per_pair: core.cycles(inc)? + core.cycles(dec)?,
        by_class,
    })
}

/// The clock of the first library machine this core table serves, else the table's own.
fn frequency_of(core: &Core, notes: &mut Vec<String>) -> f64 {
    for name in kharden::machine::names() {
        let Ok(m) = kharden::machine::load(name) else {
            continue;
        };
        if core_for(&m).is_ok_and(|c| c.name == core.name) {
            notes.push(format!(
                "{}: frequency {} GHz from machines/{name}.toml",
                core.name, m.cpu.frequency_ghz
            ));
            return m.cpu.frequency_ghz;
        }
    }
    notes.push(format!(
        "{}: no machine profile in the library; frequency {} GHz from cores/{}.toml",
        core.name, core.reference_frequency_ghz, core.name
    ));
    core.reference_frequency_ghz
}

/// Why the fast checks' cycles (and the seconds made of them) miss, and the band of their
/// added cost's error (percent of the published -0.2%, so wide) the tests hold it to.
const FAST_CHECKS_MISS: &str = "the fast checks add {added} to atomic_t's loop where {published_added} was published: the model adds every instruction's latency in series (one cycle per ALU or branch instruction), so the checks' three more instructions per pair cost three more cycles, where the out-of-order A57 runs them in the shadow of the exclusive pair's latency; the model has no overlap of independent instructions with a long-latency one";
const FAST_CHECKS_BAND: [f64; 2] = [1500.0, 5000.0];

/// Seed 001's table, published vs modelled, plus predictions for the LSE cores.
pub fn reproduce() -> Result<Reproduction> {
    let p = published()?;
    let cores = cores()?;
    let core = core_named(cores, &p.core)?;
    let variant = Variant::from_name(&p.variant)
        .ok_or_else(|| Error::at("published/seed001.toml", "unknown variant"))?;
    let mut notes = vec![];
    let freq = frequency_of(&core, &mut notes);
    let mut rows = vec![];
    let mut breakdown = Table::new(
        format!(
            "Per increment + decrement pair on {} ({}), modelled",
            core.name,
            variant.name()
        ),
        &[
            "row",
            "instructions",
            "ldxr/stxr pairs",
            "barriers",
            "other",
            "cycles",
            "published cycles",
        ],
    );
    for r in &p.row {
        let imp = Impl::from_name(&r.implementation).ok_or_else(|| {
            Error::at(
                "published/seed001.toml",
                format!("unknown implementation '{}'", r.implementation),
            )
        })?;
        let m = lkdtm(&core, variant, imp, freq, p.lkdtm_bound)?;
        for (quantity, unit, published, simulated) in [
            ("cycles", "cycles", r.cycles, m.cycles),
            (
                "instructions",
                "instructions",
                r.instructions,
                m.instructions,
            ),
            ("seconds", "s", r.seconds, m.seconds),
        ] {
            let mut row = Row::compared(
                &format!("{}: {quantity}", r.label),
                unit,
                published,
                simulated,
                TOLERANCE_PCT,
            );
            let atomic = r.implementation == "atomic_t";
            // The exclusive pair's cost, when fitted, is fitted to atomic_t's cycles; the
            // loops' code generation was chosen for atomic_t's instruction count.
            row.fitted = atomic
                && ((!core.fitted.is_empty() && quantity == "cycles")
                    || quantity == "instructions");
            if !atomic {
                // Each implementation is judged by what it adds to atomic_t's loop.
                let base = p.row.iter().find(|b| b.implementation == "atomic_t");
                row.baseline = base.map(|b| format!("{}: {quantity}", b.label));
            }
            if r.implementation == "fast" && quantity != "instructions" {
                // Held to its band by tests/model.rs; the text quotes the run.
                row.known_miss = Some(FAST_CHECKS_MISS.into());
                row.known_miss_band = Some(FAST_CHECKS_BAND);
            }
            if quantity == "seconds" {
                row.derived = Some(if atomic {
                    "the fitted cycles over the clock".into()
                } else {
                    "the model's seconds are its cycles over the clock, so what they add is what the cycles add".into()
                });
            }
            rows.push(row);
        }
        let excl = m.by_class.get("ldxr").copied().unwrap_or(0.0);
        let barriers = m.by_class.get("barrier").copied().unwrap_or(0.0);
        breakdown.push(vec![
            r.label.clone(),
            format!("{:.1}", m.instructions_per_pair),
            format!("{excl:.1}"),
            format!("{barriers:.1}"),
            format!("{:.1}", m.instructions_per_pair - 2.0 * excl - barriers),
            format!("{:.1}", m.cycles_per_pair),
            format!("{:.1}", r.cycles / p.lkdtm_bound as f64),
        ]);
    }
    // Predictions nobody published: the later fetch_add version on the A57, and every
    // implementation in its LSE form on the LSE cores.
    let mut predictions = vec![];
    let m = lkdtm(&core, variant, Impl::FetchAdd, freq, p.lkdtm_bound)?;
    predictions.push(Row::predicted(
        &format!("{} {} fetch_add: cycles", core.name, variant.name()),
        "cycles",
        m.cycles,
    ));
    predictions.push(Row::predicted(
        &format!("{} {} fetch_add: seconds", core.name, variant.name()),
        "s",
        m.seconds,
    ));
    let mut lse = Table::new(
        "LKDTM loops on the LSE cores (predicted, no published figures)",
        &[
            "core",
            "variant",
            "implementation",
            "instructions",
            "cycles",
            "seconds",
            "vs atomic_t",
        ],
    );
    for name in ["neoverse-n1", "thunderx2"] {
        let c = core_named(cores, name)?;
        let f = frequency_of(&c, &mut notes);
        for v in [Variant::Arm64Lse, Variant::Arm64Llsc] {
            let base = lkdtm(&c, v, Impl::Atomic, f, p.lkdtm_bound)?.cycles;
            for imp in Impl::ALL {
                let m = lkdtm(&c, v, imp, f, p.lkdtm_bound)?;
                if v == Variant::Arm64Lse {
                    predictions.push(Row::predicted(
                        &format!("{name} {} {}: cycles", v.name(), imp.name()),
                        "cycles",
                        m.cycles,
                    ));
                }
                lse.push(vec![
                    name.into(),
                    v.name().into(),
                    imp.name().into(),
                    format!("{:.3e}", m.instructions),
                    format!("{:.3e}", m.cycles),
                    format!("{:.2}", m.seconds),
                    format!("{:.2}x", m.cycles / base),
                ]);
            }
        }
    }
    let fitted: Vec<String> = core
        .fitted
        .iter()
        .cloned()
        .chain(std::iter::once(
            "code generation: LKDTM's on-stack counter address held in a register in the loops (GCC 12 would rematerialise it each iteration; \
             chosen because the ATOMIC_TIMING instruction count, 17 per pair = the kernel's two LL/SC sequences + loop control, leaves no room for it), \
             fitted to \"ATOMIC_TIMING (atomic_t): instructions\""
                .to_string(),
        ))
        .collect();
    notes.push(
        "instructions: executed instruction sequences of our C implementations (kernel semantics and arm64 sequences of v4.13-v4.15), \
         compiled by aarch64-linux-gnu-gcc 12 with the kernel's -O2 -fno-omit-frame-pointer -fno-optimize-sibling-calls and traced under qemu-aarch64 \
         (model/arm64.trace); the published counts also hold ~0.2e9 instructions of timer interrupts and of the shell (about 3e6 per second), not modelled"
            .into(),
    );
    notes.push(
        "cycles: exclusive pair (fitted once, to the atomic_t row) + 1 cycle per other instruction (latency of a dependent ALU/branch instruction, \
         Cortex-A57 Software Optimization Guide) + 1 per dmb; the fast and REFCOUNT_FULL rows are predictions of that one fit"
            .into(),
    );
    let mut rep = Reproduction {
        experiment: "refcount".into(),
        source: p.source.clone(),
        rows,
        fitted_parameters: fitted.len() as u32,
        fitted,
        predictions,
        breakdowns: vec![breakdown, lse],
        figures: vec![],
        notes,
        values: Default::default(),
        params: None,
    };
    rep.judge("crates/kharden-refcount/published/seed001.toml")?;
    Ok(rep)
}

/// Every fitted core parameter, with the figure it was fitted to.
pub fn fitted_parameters() -> Result<Vec<String>> {
    Ok(cores()?
        .iter()
        .flat_map(|c| c.fitted.iter().cloned())
        .collect())
}

/// `kharden refcount model`: LKDTM loops and per-operation cycles on one machine, or on every
/// core table when none is given.
pub fn model_report(machine: Option<&MachineProfile>) -> Result<Table> {
    let cores = cores()?;
    let mut t = Table::new(
        "LKDTM loops (n = INT_MAX), modelled",
        &[
            "core",
            "variant",
            "implementation",
            "insns/pair",
            "cycles/pair",
            "inc cycles",
            "dec cycles",
            "seconds",
            "vs atomic_t",
        ],
    );
    let targets: Vec<(Core, Vec<Variant>, f64)> = match machine {
        Some(m) => vec![(core_for(m)?, vec![variant_for(m)], m.cpu.frequency_ghz)],
        None => cores
            .iter()
            .map(|c| {
                let v = if c.isa == "x86-64" {
                    vec![Variant::X86_64]
                } else if c.lse_atomic.is_some() {
                    vec![Variant::Arm64Lse, Variant::Arm64Llsc]
                } else {
                    vec![Variant::Arm64Llsc]
                };
                (c.clone(), v, c.reference_frequency_ghz)
            })
            .collect(),
    };
    let traces = traces()?;
    for (core, variants, freq) in targets {
        for v in variants {
            let base = lkdtm(&core, v, Impl::Atomic, freq, LKDTM_BOUND)?.cycles;
            for imp in Impl::ALL {
                let m = lkdtm(&core, v, imp, freq, LKDTM_BOUND)?;
                let op = |op| -> Result<f64> {
                    Ok(core.cycles(find(traces, v, Some(imp), op)?)?
                        - core.cycles(find(traces, v, None, op)?)?)
                };
                t.push(vec![
                    core.name.clone(),
                    v.name().into(),
                    imp.name().into(),
                    format!("{:.1}", m.instructions_per_pair),
                    format!("{:.1}", m.cycles_per_pair),
                    format!("{:.1}", op(Op::Inc)?),
                    format!("{:.1}", op(Op::DecAndTest)?),
                    format!("{:.2}", m.seconds),
                    format!("{:.2}x", m.cycles / base),
                ]);
            }
        }
    }
    Ok(t)
}
