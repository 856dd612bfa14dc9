//! The executed instruction sequence of one steady-state iteration of each LKDTM loop,
//! parsed from the checked-in traces (`model/*.trace`), each instruction decoded.

use super::isa::{decode, Effect, Isa, Kind};
use crate::{Impl, Op, Variant};
use kharden::{Error, Result};
use std::sync::OnceLock;

const ARM64_TRACE: &str = include_str!("../../model/arm64.trace");
const X86_TRACE: &str = include_str!("../../model/x86-64.trace");

/// One instruction of a traced iteration.
#[derive(Debug, Clone)]
pub struct TracedInsn {
    /// function+offset in the traced binary.
    pub place: String,
    pub text: String,
    pub effect: Effect,
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
        self.insns.len() as f64
    }
    pub fn count(&self, kind: Kind) -> f64 {
        self.insns.iter().filter(|i| i.effect.kind == kind).count() as f64
    }
}

impl AsRef<Effect> for TracedInsn {
    fn as_ref(&self) -> &Effect {
        &self.effect
    }
}

fn isa(v: Variant) -> Isa {
    match v {
        Variant::X86_64 => Isa::X86_64,
        Variant::Arm64Llsc | Variant::Arm64Lse => Isa::Arm64,
    }
}

/// A loop body from assembly lines (objdump syntax of `variant`'s instruction set), in
/// executed order: what the tests and what-ifs give the model directly.
pub fn loop_from_asm(variant: Variant, lines: &[&str]) -> Result<LoopTrace> {
    let insns = lines
        .iter()
        .enumerate()
        .map(|(n, text)| {
            Ok(TracedInsn {
                place: format!("line {}", n + 1),
                text: text.to_string(),
                effect: decode(isa(variant), text).map_err(Error::new)?,
            })
        })
        .collect::<Result<_>>()?;
    Ok(LoopTrace {
        variant,
        imp: None,
        op: Op::Inc,
        insns,
    })
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
            // The overlap model runs the executed sequence: each instruction once.
            if count != 1.0 {
                return Err(at(format!("execution count {count}: the model needs every traced instruction to run once per iteration (a loop that retries has no single executed sequence)")));
            }
            let place = it.next().unwrap_or("").to_string();
            let text = it.next().unwrap_or("").to_string();
            let effect = decode(isa(l.variant), &text).map_err(at)?;
            l.insns.push(TracedInsn {
                place,
                text,
                effect,
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
