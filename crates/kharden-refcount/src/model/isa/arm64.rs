//! arm64 (objdump syntax): x0-x30 are registers 0-30 (w-forms alias them), sp is 31, NZCV 32;
//! xzr/wzr read as nothing and discard writes.

use super::{immediate, split_operands, Addr, Effect, Kind, Lat, Port, Reg, Value};

const SP: Reg = 31;
const FLAGS: Reg = 32;

/// A register operand: Some(Some(n)), the zero register Some(None), not a register None.
fn register(s: &str) -> Option<Option<Reg>> {
    match s {
        "sp" | "wsp" => return Some(Some(SP)),
        "xzr" | "wzr" => return Some(None),
        "lr" => return Some(Some(30)),
        "fp" => return Some(Some(29)),
        _ => {}
    }
    let n: Reg = s.strip_prefix(['x', 'w'])?.parse().ok()?;
    (n <= 30).then_some(Some(n))
}

fn is_x(s: &str) -> bool {
    s.starts_with('x') || s == "sp"
}

/// Every register named in an operand (a shifted or extended register names one).
fn registers_in(op: &str) -> impl Iterator<Item = Option<Reg>> + '_ {
    op.split([' ', ',', '[', ']', '!']).filter_map(register)
}

/// A memory operand: its address, the base's writeback (pre- or post-index), the registers
/// it reads.
struct Operand {
    addr: Addr,
    writeback: Option<(Reg, i64)>,
    reads: Vec<Reg>,
}

/// A memory operand `[xN]`, `[xN, #imm]`, `[xN, #imm]!` (pre-index) or `[xN, xM...]`
/// (register offset: no followable address), with the post-index immediate that may follow
/// it. Returns the address and the base's writeback, if any.
fn memory(op: &str, post: Option<&str>) -> Result<Operand, String> {
    let pre = op.ends_with('!');
    let inner = op
        .trim_end_matches('!')
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .ok_or_else(|| format!("expected a memory operand, got '{op}'"))?;
    let parts = split_operands(inner);
    let base = match parts.first().copied().and_then(register) {
        Some(Some(b)) => b,
        _ => return Err(format!("no base register in '{op}'")),
    };
    let mut reads = vec![base];
    let (mut disp, mut followable) = (0, true);
    if let Some(off) = parts.get(1) {
        if let Some(imm) = off.strip_prefix('#').and_then(immediate) {
            disp = imm;
        } else {
            followable = false;
            reads.extend(registers_in(off).flatten());
        }
    }
    let post_imm = match post {
        Some(p) => Some(
            p.strip_prefix('#')
                .and_then(immediate)
                .ok_or_else(|| format!("expected a post-index immediate, got '{p}'"))?,
        ),
        None => None,
    };
    let writeback = match (pre, post_imm) {
        (true, _) => Some((base, disp)),
        (false, Some(imm)) => Some((base, imm)),
        (false, None) => None,
    };
    let addr = Addr {
        base: followable.then_some(base),
        disp,
    };
    Ok(Operand {
        addr,
        writeback,
        reads,
    })
}

/// Loads, stores, exclusives, LSE atomics: `data` are the register operands before the
/// memory operand.
fn memory_op(kind: Kind, m: &str, ops: &[&str]) -> Result<Effect, String> {
    let at = ops
        .iter()
        .position(|o| o.starts_with('['))
        .ok_or("no memory operand")?;
    let Operand {
        addr,
        writeback,
        reads: base_reads,
    } = memory(ops[at], ops.get(at + 1).copied())?;
    // A prefetch's first operand is its hint (pldl1keep, pstl1strm, ...), not a register.
    let data_ops = if kind == Kind::Prefetch {
        &[][..]
    } else {
        &ops[..at]
    };
    let data: Vec<Option<Reg>> = data_ops
        .iter()
        .map(|o| register(o).ok_or_else(|| format!("expected a register, got '{o}'")))
        .collect::<Result<_, _>>()?;
    let uops: &[Port] = match kind {
        Kind::Load | Kind::ExclusiveLoad | Kind::Prefetch => &[Port::Load],
        Kind::Store | Kind::ExclusiveStore => &[Port::Store],
        _ => &[Port::Load, Port::Store],
    };
    let mut e = Effect::new(kind, uops);
    for r in base_reads {
        e.read(Some(r));
    }
    // Acquire / release forms: ld{a}xr, st{l}xr, ldar, stlr, and the a/l/al suffixes of LSE.
    let order = match kind {
        Kind::Atomic => lse_order(m),
        _ => (
            m.starts_with("lda") || m.starts_with("ldapr"),
            m.starts_with("stl"),
        ),
    };
    (e.acquire, e.release) = order;
    match kind {
        Kind::Load | Kind::ExclusiveLoad => {
            for d in data {
                e.write(d, Value::Fresh, Lat::Load);
            }
            e.load = Some(addr);
        }
        Kind::Prefetch => {}
        Kind::Store => {
            for d in data {
                e.read(d);
            }
            e.store = Some(addr);
        }
        Kind::ExclusiveStore => {
            // stxr ws, wt[, wt2], [xn]: ws is the status.
            let (status, values) = data.split_first().ok_or("no status register")?;
            for v in values {
                e.read(*v);
            }
            e.write(*status, Value::Fresh, Lat::ExclusiveStore);
            e.store = Some(addr);
        }
        _ => {
            // ld<op> ws, wt, [xn]; st<op> ws, [xn]; cas ws, wt, [xn] (ws compared and
            // returned); swp ws, wt, [xn].
            for d in &data {
                e.read(*d);
            }
            if m.starts_with("cas") {
                e.write(data[0], Value::Fresh, Lat::Atomic);
            } else if data.len() == 2 {
                e.write(data[1], Value::Fresh, Lat::Atomic);
            }
            e.load = Some(addr);
            e.store = Some(addr);
        }
    }
    if let Some((base, imm)) = writeback {
        e.write(Some(base), Value::Offset(base, imm), Lat::Alu);
        e.uops.push(Port::Alu);
    }
    Ok(e)
}

/// LSE read-modify-writes: ld<op>, st<op>, cas, swp, with a/l/al and b/h suffixes.
fn lse(m: &str) -> bool {
    const OPS: &[&str] = &["add", "clr", "eor", "set", "smax", "smin", "umax", "umin"];
    let rest = |s: &str| {
        matches!(
            s,
            "" | "a" | "l" | "al" | "b" | "h" | "ab" | "ah" | "lb" | "lh" | "alb" | "alh"
        )
    };
    if let Some(r) = m.strip_prefix("cas").or_else(|| m.strip_prefix("swp")) {
        return rest(r) || r.strip_prefix('p').is_some_and(rest);
    }
    let Some(r) = m.strip_prefix("ld").or_else(|| m.strip_prefix("st")) else {
        return false;
    };
    OPS.iter().any(|op| r.strip_prefix(op).is_some_and(rest))
}

/// (acquire, release) of an LSE mnemonic: the suffix after the operation, before b/h.
fn lse_order(m: &str) -> (bool, bool) {
    let s = m.trim_end_matches(['b', 'h']);
    let stored = m.starts_with("st");
    if s.ends_with("al") {
        (true, true)
    } else if s.ends_with('l') {
        (false, true)
    } else if s.ends_with('a') && !stored {
        (true, false)
    } else {
        (false, false)
    }
}

pub(super) fn decode(m: &str, operands: &str) -> Result<Effect, String> {
    let ops = split_operands(operands);
    let reg = |i: usize| -> Result<Option<Reg>, String> {
        let o = ops
            .get(i)
            .ok_or_else(|| format!("operand {} missing", i + 1))?;
        register(o).ok_or_else(|| format!("expected a register, got '{o}'"))
    };
    let rest_reads = |e: &mut Effect, from: usize| {
        for o in ops.iter().skip(from) {
            for r in registers_in(o) {
                e.read(r);
            }
        }
    };
    match m {
        // Branches: conditional ones read the flags or a register, bl/blr write the link.
        "b" => return Ok(Effect::new(Kind::Branch, &[Port::Branch])),
        "bl" | "blr" | "br" | "ret" => {
            let mut e = Effect::new(Kind::Branch, &[Port::Branch]);
            if m == "ret" {
                e.read(if ops.is_empty() { Some(30) } else { reg(0)? });
            } else if m != "bl" {
                e.read(reg(0)?);
            }
            if m.starts_with("bl") {
                e.write(Some(30), Value::Fresh, Lat::Alu);
                e.uops.push(Port::Alu);
            }
            return Ok(e);
        }
        "cbz" | "cbnz" | "tbz" | "tbnz" => {
            let mut e = Effect::new(Kind::Branch, &[Port::Branch]);
            e.read(reg(0)?);
            return Ok(e);
        }
        _ if m.starts_with("b.") => {
            let mut e = Effect::new(Kind::Branch, &[Port::Branch]);
            e.read(Some(FLAGS));
            return Ok(e);
        }
        "dmb" => return Ok(Effect::new(Kind::Barrier, &[])),
        "dsb" | "isb" => return Ok(Effect::new(Kind::Serialising, &[])),
        "nop" => return Ok(Effect::new(Kind::Alu, &[])),
        "prfm" | "prfum" => return memory_op(Kind::Prefetch, m, &ops),
        "ldxr" | "ldaxr" | "ldxrb" | "ldxrh" | "ldaxrb" | "ldaxrh" | "ldxp" | "ldaxp" => {
            return memory_op(Kind::ExclusiveLoad, m, &ops)
        }
        "stxr" | "stlxr" | "stxrb" | "stxrh" | "stlxrb" | "stlxrh" | "stxp" | "stlxp" => {
            return memory_op(Kind::ExclusiveStore, m, &ops)
        }
        _ if lse(m) => return memory_op(Kind::Atomic, m, &ops),
        _ if m.starts_with("ldr")
            || m.starts_with("ldur")
            || m.starts_with("ldp")
            || m.starts_with("ldar")
            || m.starts_with("ldapr") =>
        {
            if ops.get(1).is_some_and(|o| o.starts_with('<')) {
                // PC-relative literal load: no base to follow.
                let mut e = Effect::new(Kind::Load, &[Port::Load]);
                e.write(reg(0)?, Value::Fresh, Lat::Load);
                e.load = Some(Addr {
                    base: None,
                    disp: 0,
                });
                return Ok(e);
            }
            return memory_op(Kind::Load, m, &ops);
        }
        _ if m.starts_with("str")
            || m.starts_with("stur")
            || m.starts_with("stp")
            || m.starts_with("stlr") =>
        {
            return memory_op(Kind::Store, m, &ops)
        }
        _ => {}
    }
    // Data processing, one cycle on these cores (longer ones, e.g. mul or div, are refused
    // until a core table prices them).
    let mut e = Effect::new(Kind::Alu, &[Port::Alu]);
    match m {
        "cmp" | "cmn" | "tst" => {
            rest_reads(&mut e, 0);
            e.write(Some(FLAGS), Value::Fresh, Lat::Alu);
        }
        "ccmp" | "ccmn" => {
            rest_reads(&mut e, 0);
            e.read(Some(FLAGS));
            e.write(Some(FLAGS), Value::Fresh, Lat::Alu);
        }
        "cset" | "csetm" | "csel" | "csinc" | "csinv" | "csneg" | "cinc" | "cinv" | "cneg"
        | "adc" | "sbc" | "adcs" | "sbcs" | "ngc" | "ngcs" => {
            rest_reads(&mut e, 1);
            e.read(Some(FLAGS));
            e.write(reg(0)?, Value::Fresh, Lat::Alu);
            if m.ends_with('s') {
                e.write(Some(FLAGS), Value::Fresh, Lat::Alu);
            }
        }
        "mov" | "add" | "sub" | "adds" | "subs" | "and" | "ands" | "orr" | "eor" | "bic"
        | "bics" | "orn" | "eon" | "neg" | "negs" | "mvn" | "movz" | "movn" | "movk" | "lsl"
        | "lsr" | "asr" | "ror" | "sxtw" | "sxtb" | "sxth" | "uxtw" | "uxtb" | "uxth"
        | "ubfx" | "sbfx" | "ubfm" | "sbfm" | "ubfiz" | "sbfiz" | "bfi" | "bfxil" | "adr"
        | "adrp" => {
            let dest = reg(0)?;
            rest_reads(&mut e, 1);
            if m == "movk" || m == "bfi" || m == "bfxil" {
                e.read(dest);
            }
            let src = ops.get(1).copied().unwrap_or("");
            let imm = ops.get(2).and_then(|o| o.strip_prefix('#')).and_then(immediate);
            // Values an address can be made of: a register copy, or plus/minus a constant.
            let value = match (m, register(src), imm) {
                ("mov", Some(Some(s)), _) if is_x(src) && is_x(ops[0]) => Value::Offset(s, 0),
                ("add", Some(Some(s)), Some(k)) if is_x(src) && ops.len() == 3 => {
                    Value::Offset(s, k)
                }
                ("sub", Some(Some(s)), Some(k)) if is_x(src) && ops.len() == 3 => {
                    Value::Offset(s, -k)
                }
                _ => Value::Fresh,
            };
            e.write(dest, value, Lat::Alu);
            if matches!(m, "adds" | "subs" | "ands" | "bics" | "negs") {
                e.write(Some(FLAGS), Value::Fresh, Lat::Alu);
            }
        }
        _ => {
            return Err(format!(
                "the model does not know '{m}' (add its semantics, and its latency to the core tables if it is not a one-cycle ALU operation)"
            ))
        }
    }
    Ok(e)
}
