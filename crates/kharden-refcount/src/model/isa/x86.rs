//! x86-64 (objdump AT&T syntax: sources first, destination last): the 16 general registers
//! are 0-15 (every width of one register is one register), the flags 16.

use super::{immediate, split_operands, Addr, Effect, Kind, Lat, Port, Reg, Value};

const SP: Reg = 4;
const FLAGS: Reg = 16;

/// A register operand: its number and whether a write to it replaces the whole register
/// (64- and 32-bit forms) or merges into it (16- and 8-bit forms).
fn register(op: &str) -> Option<(Reg, bool)> {
    let name = op.strip_prefix('%')?;
    const LEGACY: [[&str; 5]; 8] = [
        ["rax", "eax", "ax", "al", "ah"],
        ["rcx", "ecx", "cx", "cl", "ch"],
        ["rdx", "edx", "dx", "dl", "dh"],
        ["rbx", "ebx", "bx", "bl", "bh"],
        ["rsp", "esp", "sp", "spl", ""],
        ["rbp", "ebp", "bp", "bpl", ""],
        ["rsi", "esi", "si", "sil", ""],
        ["rdi", "edi", "di", "dil", ""],
    ];
    for (n, forms) in LEGACY.iter().enumerate() {
        if let Some(i) = forms.iter().position(|f| !f.is_empty() && *f == name) {
            return Some((n as Reg, i < 2));
        }
    }
    let rest = name.strip_prefix('r')?;
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let n: Reg = digits.parse().ok()?;
    let suffix = &rest[digits.len()..];
    ((8..=15).contains(&n) && matches!(suffix, "" | "d" | "w" | "b"))
        .then_some((n, matches!(suffix, "" | "d")))
}

fn is_64(op: &str) -> bool {
    matches!(op.strip_prefix('%'), Some(n) if n.starts_with('r') && !n.ends_with(['d', 'w', 'b']))
}

/// A memory operand `disp(base,index,scale)`: its address and the registers it reads. An
/// indexed or RIP-relative operand aliases nothing the model can follow.
fn memory(op: &str) -> Option<(Addr, Vec<Reg>)> {
    let open = op.find('(')?;
    let inner = op[open + 1..].strip_suffix(')')?;
    let disp = if open == 0 {
        0
    } else {
        immediate(&op[..open])?
    };
    let parts: Vec<&str> = inner.split(',').map(str::trim).collect();
    if parts[0] == "%rip" {
        return Some((Addr { base: None, disp }, vec![]));
    }
    let mut reads = vec![];
    for p in parts.iter().take(2).filter(|p| !p.is_empty()) {
        reads.push(register(p)?.0);
    }
    let base = if parts[0].is_empty() {
        None
    } else {
        register(parts[0]).map(|r| r.0)
    };
    let indexed = parts.get(1).is_some_and(|p| !p.is_empty());
    Some((
        Addr {
            base: if indexed { None } else { base },
            disp,
        },
        reads,
    ))
}

/// Conditional jumps, set and cmov: the condition codes.
fn condition(cc: &str) -> bool {
    matches!(
        cc,
        "a" | "ae"
            | "b"
            | "be"
            | "c"
            | "e"
            | "g"
            | "ge"
            | "l"
            | "le"
            | "na"
            | "nae"
            | "nb"
            | "nbe"
            | "nc"
            | "ne"
            | "ng"
            | "nge"
            | "nl"
            | "nle"
            | "no"
            | "np"
            | "ns"
            | "nz"
            | "o"
            | "p"
            | "pe"
            | "po"
            | "s"
            | "z"
    )
}

/// The mnemonic without its AT&T size suffix, when the bare one is known.
fn base_mnemonic(m: &str) -> &str {
    const KNOWN: &[&str] = &[
        "mov", "lea", "add", "sub", "and", "or", "xor", "adc", "sbb", "cmp", "test", "inc", "dec",
        "neg", "not", "shl", "shr", "sar", "sal", "rol", "ror", "push", "pop", "call", "ret",
        "jmp", "nop", "xchg", "xadd", "cmpxchg", "movzb", "movzw", "movsb", "movsw", "movsl",
    ];
    if KNOWN.contains(&m) || m.starts_with('j') || m.starts_with("set") || m.starts_with("cmov") {
        return m;
    }
    match m.strip_suffix(['b', 'w', 'l', 'q']) {
        Some(s) if KNOWN.contains(&s) => s,
        _ => m,
    }
}

pub(super) fn decode(m: &str, operands: &str) -> Result<Effect, String> {
    if m == "lock" {
        let (inner, ops) = operands
            .split_once(char::is_whitespace)
            .unwrap_or((operands, ""));
        return locked(base_mnemonic(inner), &split_operands(ops.trim()));
    }
    let m = base_mnemonic(m);
    let ops = split_operands(operands);
    let reg = |i: usize| -> Result<(Reg, bool), String> {
        let o = ops
            .get(i)
            .ok_or_else(|| format!("operand {} missing", i + 1))?;
        register(o).ok_or_else(|| format!("expected a register, got '{o}'"))
    };
    let mem = |i: usize| ops.get(i).and_then(|o| memory(o));
    // push/pop/call/ret move the stack pointer themselves (the stack engine prices it).
    let stack = |e: &mut Effect, by: i64| {
        e.read(Some(SP));
        e.write(Some(SP), Value::Offset(SP, by), Lat::StackEngine);
    };
    let mut e;
    match m {
        "nop" | "fnop" | "endbr64" => return Ok(Effect::new(Kind::Alu, &[])),
        "mfence" | "sfence" => return Ok(Effect::new(Kind::Barrier, &[])),
        "lfence" => return Ok(Effect::new(Kind::Serialising, &[])),
        "cpuid" => {
            e = Effect::new(Kind::Serialising, &[]);
            e.read(Some(0));
            for r in 0..4 {
                e.write(Some(r), Value::Fresh, Lat::Alu);
            }
        }
        "push" => {
            e = Effect::new(Kind::Store, &[Port::Store]);
            if let Ok((r, _)) = reg(0) {
                e.read(Some(r));
            }
            e.store = Some(Addr { base: Some(SP), disp: -8 });
            stack(&mut e, -8);
        }
        "pop" => {
            e = Effect::new(Kind::Load, &[Port::Load]);
            e.load = Some(Addr { base: Some(SP), disp: 0 });
            let (r, _) = reg(0)?;
            stack(&mut e, 8);
            e.write(Some(r), Value::Fresh, Lat::Load);
        }
        "call" | "ret" | "jmp" => {
            e = Effect::new(Kind::Branch, &[Port::Branch]);
            if let Some(target) = ops.first().and_then(|o| o.strip_prefix('*')) {
                match (register(target), memory(target)) {
                    (Some((r, _)), _) => e.read(Some(r)),
                    (None, Some(_)) => return Err("indirect jumps through memory are not modelled".into()),
                    _ => return Err(format!("unknown target '{target}'")),
                }
            }
            if m == "call" {
                e.store = Some(Addr { base: Some(SP), disp: -8 });
                e.uops.push(Port::Store);
                stack(&mut e, -8);
            } else if m == "ret" {
                e.load = Some(Addr { base: Some(SP), disp: 0 });
                e.uops.push(Port::Load);
                stack(&mut e, 8);
            }
        }
        _ if m.starts_with('j') && condition(&m[1..]) => {
            e = Effect::new(Kind::Branch, &[Port::Branch]);
            e.read(Some(FLAGS));
        }
        _ if m.starts_with("set") && condition(&m[3..]) => {
            e = Effect::new(Kind::Alu, &[Port::Alu]);
            let (r, _) = reg(0)?;
            e.read(Some(FLAGS));
            e.read(Some(r));
            e.write(Some(r), Value::Fresh, Lat::Alu);
        }
        _ if m.starts_with("cmov") && condition(&m[4..]) => {
            e = Effect::new(Kind::Alu, &[Port::Alu]);
            let ((s, _), (d, _)) = (reg(0)?, reg(1)?);
            e.read(Some(FLAGS));
            e.read(Some(s));
            e.read(Some(d));
            e.write(Some(d), Value::Fresh, Lat::Alu);
        }
        "mov" | "movzb" | "movzw" | "movsb" | "movsw" | "movsl" | "movzx" | "movsx"
        | "movsxd" | "movabs" => {
            let (src, dst) = (ops.first().copied().unwrap_or(""), ops.get(1).copied().unwrap_or(""));
            if let Some((addr, reads)) = mem(1) {
                e = Effect::new(Kind::Store, &[Port::Store]);
                for r in reads {
                    e.read(Some(r));
                }
                if let Some((r, _)) = register(src) {
                    e.read(Some(r));
                }
                e.store = Some(addr);
            } else if let Some((addr, reads)) = mem(0) {
                e = Effect::new(Kind::Load, &[Port::Load]);
                for r in reads {
                    e.read(Some(r));
                }
                let (d, whole) = reg(1)?;
                if !whole {
                    e.read(Some(d));
                }
                e.write(Some(d), Value::Fresh, Lat::Load);
                e.load = Some(addr);
            } else {
                e = Effect::new(Kind::Alu, &[Port::Alu]);
                let (d, whole) = reg(1)?;
                if !whole {
                    e.read(Some(d));
                }
                let value = match register(src) {
                    Some((s, _)) => {
                        e.read(Some(s));
                        if m == "mov" && is_64(src) && is_64(dst) {
                            Value::Offset(s, 0)
                        } else {
                            Value::Fresh
                        }
                    }
                    None => Value::Fresh,
                };
                e.write(Some(d), value, Lat::Alu);
            }
        }
        "lea" => {
            e = Effect::new(Kind::Alu, &[Port::Alu]);
            let (addr, reads) = mem(0).ok_or("lea without a memory operand")?;
            for r in reads {
                e.read(Some(r));
            }
            let (d, _) = reg(1)?;
            let value = match addr.base {
                Some(b) if is_64(ops[1]) => Value::Offset(b, addr.disp),
                _ => Value::Fresh,
            };
            e.write(Some(d), value, Lat::Alu);
        }
        "xadd" | "cmpxchg" | "xchg" if ops.iter().any(|o| memory(o).is_some()) => {
            return locked(m, &ops)
        }
        "add" | "sub" | "and" | "or" | "xor" | "adc" | "sbb" | "cmp" | "test" | "shl" | "shr"
        | "sar" | "sal" | "rol" | "ror" | "inc" | "dec" | "neg" | "not" | "xchg" => {
            if ops.iter().any(|o| memory(o).is_some()) {
                return Err(format!("'{m}' with a memory operand is not modelled outside a LOCK'd instruction"));
            }
            e = Effect::new(Kind::Alu, &[Port::Alu]);
            for o in &ops {
                if let Some((r, _)) = register(o) {
                    e.read(Some(r));
                }
            }
            if matches!(m, "adc" | "sbb") {
                e.read(Some(FLAGS));
            }
            let dst = ops.last().copied().unwrap_or("");
            if !matches!(m, "cmp" | "test") {
                let (d, _) = reg(ops.len().max(1) - 1)?;
                let imm = ops.first().and_then(|o| o.strip_prefix('$')).and_then(immediate);
                let value = match (m, imm) {
                    ("add", Some(k)) if is_64(dst) => Value::Offset(d, k),
                    ("sub", Some(k)) if is_64(dst) => Value::Offset(d, -k),
                    _ => Value::Fresh,
                };
                e.write(Some(d), value, Lat::Alu);
                if m == "xchg" {
                    let (s, _) = reg(0)?;
                    e.write(Some(s), Value::Offset(d, 0), Lat::Alu);
                }
            }
            if !matches!(m, "not" | "xchg") {
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

/// A LOCK'd read-modify-write on memory (also xchg with memory, locked implicitly): its old
/// value and flags come back like a load's.
fn locked(m: &str, ops: &[&str]) -> Result<Effect, String> {
    let at = ops
        .iter()
        .position(|o| memory(o).is_some())
        .ok_or("a LOCK'd instruction without a memory operand")?;
    let (addr, reads) = memory(ops[at]).ok_or("bad memory operand")?;
    let mut e = Effect::new(Kind::Locked, &[Port::Load, Port::Alu, Port::Store]);
    for r in reads {
        e.read(Some(r));
    }
    let src = ops[..at].iter().find_map(|o| register(o).map(|r| r.0));
    e.read(src);
    match m {
        "inc" | "dec" | "add" | "sub" | "and" | "or" | "xor" | "not" | "neg" | "adc" | "sbb" => {}
        "xadd" | "xchg" => e.write(src, Value::Fresh, Lat::Load),
        "cmpxchg" => {
            e.read(Some(0));
            e.write(Some(0), Value::Fresh, Lat::Load);
        }
        _ => return Err(format!("the model does not know 'lock {m}'")),
    }
    if m != "xchg" && m != "not" {
        e.write(Some(FLAGS), Value::Fresh, Lat::Load);
    }
    e.load = Some(addr);
    e.store = Some(addr);
    // It waits for every older access (the store buffer drains first); whether younger loads
    // wait for it is the core's (pipeline.loads_wait_for_locked).
    e.release = true;
    Ok(e)
}
