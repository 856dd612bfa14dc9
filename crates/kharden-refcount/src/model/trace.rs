//! The executed instruction sequence of one steady-state iteration of each LKDTM loop,
//! parsed from the checked-in traces (`model/*.trace`), each instruction with its class.

use crate::{Impl, Op, Variant};
use kharden::{Error, Result};
use std::sync::OnceLock;

const ARM64_TRACE: &str = include_str!("../../model/arm64.trace");
const X86_TRACE: &str = include_str!("../../model/x86-64.trace");

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

pub(super) fn find(
    traces: &[LoopTrace],
    variant: Variant,
    imp: Option<Impl>,
    op: Op,
) -> Result<&LoopTrace> {
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
