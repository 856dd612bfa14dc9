//! What an out-of-order core runs in the shadow of a long-latency chain, and what it cannot.
//!
//! An abstract core runs one traced loop iteration over and over. Instructions dispatch in
//! program order, `width` per cycle, at most `window` ahead of the oldest one not yet
//! retired; each issues once its operands are ready (registers, flags, and memory: a load
//! reads what the last older store to its address wrote) and completes after its latency;
//! they retire in order, `width` per cycle. Four orderings are kept:
//!
//! - a store-exclusive, an LSE atomic or a LOCK'd instruction writes memory for good, so it
//!   performs only once every older instruction has completed (no speculative store);
//! - a memory barrier (dmb, mfence) waits for every older memory access, and younger ones
//!   wait for it; acquire and release forms order one side each; a LOCK'd instruction waits
//!   for every older access, and younger loads wait for it or run past it (checked, taking
//!   its store by forwarding) as the core table says;
//! - a serialising instruction (isb, dsb, lfence, cpuid) waits for everything older, and
//!   nothing younger issues before it completes: the stretches on either side add;
//! - a store-exclusive waits for its load-exclusive.
//!
//! Cycles per iteration are the steady-state period of that schedule, and no less than the
//! busiest port group's uops over its pipes. The period is then
//! `max(loop-carried critical path, instructions / width, per-port limits)` wherever nothing
//! serialises, and the stretches' sum where something does: the rule of the research note
//! (issue 53 item 7), computed rather than assumed. Work off the chain costs nothing until
//! the dispatch or a port runs out; work on it costs its latency.

use super::isa::{Effect, Kind, Lat, Port, REGISTERS};
use std::collections::{HashMap, VecDeque};

/// One group of issue pipes: the port classes that can only issue to these `count` pipes.
#[derive(Debug, Clone, PartialEq)]
pub struct PortGroup {
    pub serves: Vec<Port>,
    pub count: f64,
}

/// A core's latencies in cycles. Those no trace of the core's form needs may be absent.
#[derive(Debug, Clone, PartialEq)]
pub struct Latencies {
    pub alu: f64,
    pub load: f64,
    pub store: f64,
    pub branch: f64,
    pub barrier: f64,
    /// A store-exclusive's status and its write, seen by the next load of the line: the
    /// exclusive pair's loop period less the load and the dependent ALU operation.
    pub exclusive_store: Option<f64>,
    pub atomic: Option<f64>,
    pub locked_rmw: Option<f64>,
    pub stack_engine: Option<f64>,
    pub serialise: Option<f64>,
}

/// The core the schedule runs on.
#[derive(Debug, Clone, PartialEq)]
pub struct Pipeline {
    /// Instructions dispatched (and retired) per cycle.
    pub width: f64,
    /// Reorder-buffer entries.
    pub window: usize,
    /// Whether younger loads wait for a LOCK'd instruction to complete (x86 cores only;
    /// otherwise they run past it and take its store by forwarding).
    pub loads_wait_for_locked: Option<bool>,
    pub latency: Latencies,
    pub ports: Vec<PortGroup>,
}

/// Cycles per iteration and the bounds they come from.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Timing {
    pub cycles: f64,
    /// Period with unlimited dispatch and window: the loop-carried critical path (and the
    /// serialised stretches).
    pub chain: f64,
    /// Instructions over the dispatch width.
    pub dispatch: f64,
    /// The busiest port group's uops over its pipes.
    pub ports: f64,
}

impl Timing {
    /// Which bound sets the cycles.
    pub fn bound(&self) -> &'static str {
        let tie = |x: f64| (self.cycles - x).abs() < 1e-6;
        if tie(self.chain) {
            "chain"
        } else if tie(self.ports) {
            "ports"
        } else if tie(self.dispatch) {
            "dispatch"
        } else {
            "dispatch and chain"
        }
    }
}

/// Iterations run; the period is taken over the second half (a multiple of 2..6, so a
/// periodic schedule of any of those cycle lengths is averaged exactly).
const ITERATIONS: usize = 120;

/// Cycles per iteration of a loop whose body is `body`, on `core`, with its bounds.
pub fn timing<E: AsRef<Effect>>(core: &Pipeline, body: &[E]) -> Result<Timing, String> {
    let ports = port_bound(core, body);
    Ok(Timing {
        cycles: period(core, body, true)?.max(ports),
        chain: period(core, body, false)?,
        dispatch: body.len() as f64 / core.width,
        ports,
    })
}

/// Cycles per iteration alone.
pub fn cycles<E: AsRef<Effect>>(core: &Pipeline, body: &[E]) -> Result<f64, String> {
    Ok(period(core, body, true)?.max(port_bound(core, body)))
}

/// The busiest port group: its uops per iteration over its pipes.
fn port_bound<E: AsRef<Effect>>(core: &Pipeline, body: &[E]) -> f64 {
    let mut uops: HashMap<Port, f64> = HashMap::new();
    for e in body {
        for u in &e.as_ref().uops {
            *uops.entry(*u).or_insert(0.0) += 1.0;
        }
    }
    core.ports
        .iter()
        .map(|g| {
            g.serves
                .iter()
                .map(|p| uops.get(p).copied().unwrap_or(0.0))
                .sum::<f64>()
                / g.count
        })
        .fold(0.0, f64::max)
}

/// Each register's symbolic value: a root and a constant offset from it.
type Sym = (u32, i64);

struct Schedule<'a> {
    core: &'a Pipeline,
    limited: bool,
    ready: [f64; REGISTERS],
    value: [Sym; REGISTERS],
    fresh: u32,
    /// Earliest issue of a later access to an address (what the last write there allows);
    /// a loop touches few addresses, so a list.
    written: Vec<(Sym, f64)>,
    older_done: f64,
    older_memory: f64,
    memory_floor: f64,
    serial_floor: f64,
    exclusive_load: f64,
    retired: VecDeque<f64>,
    last_retired: f64,
    count: usize,
}

fn need(v: Option<f64>, what: &str) -> Result<f64, String> {
    v.ok_or_else(|| format!("latency.{what} is needed for this loop but not given"))
}

impl Schedule<'_> {
    fn latency(&self, lat: Lat) -> Result<f64, String> {
        let l = &self.core.latency;
        Ok(match lat {
            Lat::Alu => l.alu,
            Lat::Load => l.load,
            Lat::ExclusiveStore => need(l.exclusive_store, "exclusive_pair")?,
            Lat::Atomic => need(l.atomic, "lse_atomic")?,
            Lat::StackEngine => need(l.stack_engine, "stack_engine")?,
        })
    }

    fn loads_wait_for_locked(&self) -> Result<bool, String> {
        self.core.loads_wait_for_locked.ok_or_else(|| {
            "pipeline.loads_wait_for_locked is needed for this loop but not given".into()
        })
    }

    fn address(&self, a: Option<super::isa::Addr>) -> Option<Sym> {
        let a = a?;
        let (root, off) = self.value[a.base? as usize];
        Some((root, off + a.disp))
    }

    /// Schedules one instruction; returns its (issue, completion, retirement) times.
    fn step(&mut self, e: &Effect) -> Result<(f64, f64, f64), String> {
        let l = &self.core.latency;
        let width = self.core.width;
        let mut issue = self.serial_floor;
        if self.limited {
            issue = issue.max(self.count as f64 / width);
            if self.retired.len() == self.core.window {
                issue = issue.max(self.retired[0]);
            }
        }
        for r in &e.reads {
            issue = issue.max(self.ready[*r as usize]);
        }
        let (load_at, store_at) = (self.address(e.load), self.address(e.store));
        if e.load.is_some() || e.store.is_some() {
            issue = issue.max(self.memory_floor);
        }
        if let Some(t) = load_at.and_then(|a| self.written.iter().find(|w| w.0 == a)) {
            issue = issue.max(t.1);
        }
        if e.kind == Kind::ExclusiveStore {
            issue = issue.max(self.exclusive_load);
        }
        if e.release || matches!(e.kind, Kind::Barrier | Kind::Locked) {
            issue = issue.max(self.older_memory);
        }
        if e.kind.non_speculative() || e.kind == Kind::Serialising {
            issue = issue.max(self.older_done);
        }
        // How long it takes, and when its memory effect is visible.
        let returns = !e.writes.is_empty();
        let (own, memory) = match e.kind {
            Kind::Alu => (l.alu, None),
            Kind::Branch => {
                let target = if e.load.is_some() { l.load } else { 0.0 };
                (
                    target + l.branch,
                    e.store.map(|_| l.store).or(e.load.map(|_| target)),
                )
            }
            Kind::Load | Kind::ExclusiveLoad => (l.load, Some(l.load)),
            Kind::Store => (l.store, Some(l.store)),
            Kind::Prefetch => (0.0, None),
            Kind::ExclusiveStore => {
                let s = need(l.exclusive_store, "exclusive_pair")?;
                (s, Some(s))
            }
            Kind::Atomic => {
                let a = need(l.atomic, "lse_atomic")?;
                // A non-returning atomic (stadd) is posted: it retires once issued.
                (if returns { a } else { l.store }, Some(a))
            }
            Kind::Locked => (l.load, Some(need(l.locked_rmw, "locked_rmw")?)),
            Kind::Barrier => (l.barrier, Some(l.barrier)),
            Kind::Serialising => (need(l.serialise, "serialise")?, None),
        };
        let mut done = issue + own;
        // Every written value is computed from the registers before the instruction.
        let mut values = [(0u32, 0i64); 8];
        if e.writes.len() > values.len() {
            return Err(format!(
                "an instruction writing {} registers",
                e.writes.len()
            ));
        }
        for (w, v) in e.writes.iter().zip(values.iter_mut()) {
            *v = match w.value {
                super::isa::Value::Fresh => {
                    self.fresh += 1;
                    (self.fresh, 0)
                }
                super::isa::Value::Offset(r, k) => {
                    let (root, off) = self.value[r as usize];
                    (root, off + k)
                }
            };
        }
        for (w, v) in e.writes.iter().zip(values) {
            let t = issue + self.latency(w.lat)?;
            done = done.max(t);
            self.ready[w.reg as usize] = t;
            self.value[w.reg as usize] = v;
        }
        let memory_done = memory.map(|m| issue + m);
        if let Some(a) = store_at {
            // A plain store's data forwards to later loads once it has issued; a write that
            // returns a status or an old value is seen only once it has performed.
            let visible = match e.kind {
                Kind::ExclusiveStore | Kind::Atomic => memory_done.unwrap_or(done),
                // Its new value is in the store buffer once its load part has returned.
                Kind::Locked if !self.loads_wait_for_locked()? => issue + l.load,
                Kind::Locked => memory_done.unwrap_or(done),
                _ => issue,
            };
            match self.written.iter_mut().find(|w| w.0 == a) {
                Some(w) => w.1 = visible,
                None => self.written.push((a, visible)),
            }
        }
        if let Some(m) = memory_done {
            self.older_memory = self.older_memory.max(m);
            if e.acquire
                || e.kind == Kind::Barrier
                || (e.kind == Kind::Locked && self.loads_wait_for_locked()?)
            {
                self.memory_floor = self.memory_floor.max(m);
            }
        }
        if e.kind == Kind::ExclusiveLoad {
            self.exclusive_load = done;
        }
        if e.kind == Kind::Serialising {
            self.serial_floor = done;
        }
        self.older_done = self.older_done.max(done);
        // In-order retirement, `width` per cycle.
        let mut retire = done.max(self.last_retired);
        let w = width.ceil() as usize;
        if self.limited && self.retired.len() >= w {
            retire = retire.max(self.retired[self.retired.len() - w] + 1.0);
        }
        self.last_retired = retire;
        self.retired.push_back(retire);
        if self.retired.len() > self.core.window.max(w) {
            self.retired.pop_front();
        }
        self.count += 1;
        Ok((issue, done, retire))
    }
}

/// Issue and completion of each instruction of a steady-state iteration: where the time
/// goes. Times count from the first issue within the iteration's last period; work that ran
/// ahead of the chain (loop control, up to the window) shows as negative.
pub fn schedule<E: AsRef<Effect>>(core: &Pipeline, body: &[E]) -> Result<Vec<(f64, f64)>, String> {
    let period = period(core, body, true)?;
    let mut s = Schedule::new(core, true);
    let mut last = vec![];
    for _ in 0..ITERATIONS {
        last.clear();
        for e in body {
            let (issue, done, _) = s.step(e.as_ref())?;
            last.push((issue, done));
        }
    }
    let latest = last.iter().map(|t| t.0).fold(f64::NEG_INFINITY, f64::max);
    let start = last
        .iter()
        .map(|t| t.0)
        .filter(|i| *i >= latest - period)
        .fold(f64::INFINITY, f64::min);
    Ok(last.iter().map(|(i, d)| (i - start, d - start)).collect())
}

/// The steady-state cycles per iteration of the schedule (`limited`: with the dispatch
/// width, window and retirement; otherwise dependences and orderings alone).
fn period<E: AsRef<Effect>>(core: &Pipeline, body: &[E], limited: bool) -> Result<f64, String> {
    if body.is_empty() {
        return Ok(0.0);
    }
    let mut s = Schedule::new(core, limited);
    let mut ends = Vec::with_capacity(ITERATIONS);
    for _ in 0..ITERATIONS {
        let mut end = 0.0;
        for e in body {
            end = s.step(e.as_ref())?.2;
        }
        ends.push(end);
    }
    let half = ITERATIONS / 2;
    Ok((ends[ITERATIONS - 1] - ends[half - 1]) / half as f64)
}

impl<'a> Schedule<'a> {
    fn new(core: &'a Pipeline, limited: bool) -> Schedule<'a> {
        Schedule {
            core,
            limited,
            ready: [0.0; REGISTERS],
            value: std::array::from_fn(|r| (r as u32, 0)),
            fresh: REGISTERS as u32,
            written: vec![],
            older_done: 0.0,
            older_memory: 0.0,
            memory_floor: 0.0,
            serial_floor: 0.0,
            exclusive_load: 0.0,
            retired: VecDeque::new(),
            last_retired: 0.0,
            count: 0,
        }
    }
}
