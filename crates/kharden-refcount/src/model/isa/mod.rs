//! What each traced instruction does, as the overlap model needs it: the registers it reads
//! and writes (and, for addresses, how a written value relates to an older one), the memory
//! it reads or writes, its kind (how the core times and orders it) and the issue ports it
//! occupies. One decoder per instruction set (`arm64`, `x86`); an instruction a decoder does
//! not know is an error naming it, never a guess.

mod arm64;
mod x86;

use serde::Deserialize;

/// A register number in the decoder's own numbering (flags included).
pub type Reg = u8;

/// Registers of either decoder: arm64 x0-x30, sp, NZCV; x86-64 the 16 general registers and
/// the flags, in fewer numbers.
pub const REGISTERS: usize = 33;

/// How the core times and orders an instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Alu,
    Branch,
    Load,
    Store,
    /// A prefetch hint: occupies a load pipe, nothing waits for it.
    Prefetch,
    ExclusiveLoad,
    /// Performs its store and returns a status only when no longer speculative.
    ExclusiveStore,
    /// An ARMv8.1 LSE read-modify-write (ldadd, stadd, cas, swp, ...).
    Atomic,
    /// An x86 LOCK'd read-modify-write: waits for every older memory access.
    Locked,
    /// Orders memory (dmb, mfence): older accesses complete before it, younger ones wait.
    Barrier,
    /// Serialises execution (isb, dsb, lfence, cpuid): nothing younger issues before it
    /// completes, and it waits for everything older.
    Serialising,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Alu => "alu",
            Kind::Branch => "branch",
            Kind::Load => "load",
            Kind::Store => "store",
            Kind::Prefetch => "prefetch",
            Kind::ExclusiveLoad => "ldxr",
            Kind::ExclusiveStore => "stxr",
            Kind::Atomic => "lse",
            Kind::Locked => "lock",
            Kind::Barrier => "barrier",
            Kind::Serialising => "serialising",
        }
    }
    /// Performs a memory write that cannot be undone, so only once every older instruction
    /// has completed (no speculative store, status or atomic result).
    pub fn non_speculative(self) -> bool {
        matches!(self, Kind::ExclusiveStore | Kind::Atomic | Kind::Locked)
    }
}

/// What a register result's latency is, priced by the core table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lat {
    Alu,
    Load,
    /// The status of a store-exclusive: when the store has performed.
    ExclusiveStore,
    /// The old value an LSE atomic returns.
    Atomic,
    /// x86 push/pop/call/ret's own stack-pointer update.
    StackEngine,
}

/// A written register's value, in terms of the registers before the instruction: what lets
/// the model see that two accesses name the same address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value {
    /// Computed: equal to nothing else.
    Fresh,
    /// Another register plus a constant (a move, an add of an immediate, a writeback).
    Offset(Reg, i64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Write {
    pub reg: Reg,
    pub value: Value,
    pub lat: Lat,
}

/// A memory operand: base register plus displacement. An indexed or PC-relative operand has
/// no base the model can follow and aliases nothing (`base: None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addr {
    pub base: Option<Reg>,
    pub disp: i64,
}

/// An issue-port class; a core table says how many pipes serve each group of classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Port {
    Alu,
    Branch,
    Load,
    Store,
}

/// One instruction, decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Effect {
    pub kind: Kind,
    pub reads: Vec<Reg>,
    pub writes: Vec<Write>,
    /// Memory it reads, and memory it writes (both for a read-modify-write).
    pub load: Option<Addr>,
    pub store: Option<Addr>,
    /// Younger memory accesses wait for it (load-acquire, acquire atomics).
    pub acquire: bool,
    /// It waits for older memory accesses (store-release, release atomics).
    pub release: bool,
    pub uops: Vec<Port>,
}

impl AsRef<Effect> for Effect {
    fn as_ref(&self) -> &Effect {
        self
    }
}

impl Effect {
    fn new(kind: Kind, uops: &[Port]) -> Effect {
        Effect {
            kind,
            reads: vec![],
            writes: vec![],
            load: None,
            store: None,
            acquire: false,
            release: false,
            uops: uops.to_vec(),
        }
    }
    fn read(&mut self, r: Option<Reg>) {
        if let Some(r) = r {
            if !self.reads.contains(&r) {
                self.reads.push(r);
            }
        }
    }
    fn write(&mut self, r: Option<Reg>, value: Value, lat: Lat) {
        if let Some(reg) = r {
            self.writes.push(Write { reg, value, lat });
        }
    }
}

/// The instruction set of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    Arm64,
    X86_64,
}

/// Decodes one disassembled instruction (objdump syntax).
pub fn decode(isa: Isa, text: &str) -> Result<Effect, String> {
    let text = text.trim();
    let (mnemonic, operands) = match text.split_once(char::is_whitespace) {
        Some((m, o)) => (m, o.trim()),
        None => (text, ""),
    };
    if mnemonic.is_empty() {
        return Err("empty instruction".into());
    }
    match isa {
        Isa::Arm64 => arm64::decode(mnemonic, operands),
        Isa::X86_64 => x86::decode(mnemonic, operands),
    }
    .map_err(|e| format!("'{text}': {e}"))
}

/// Operands split at the commas outside brackets and parentheses.
fn split_operands(s: &str) -> Vec<&str> {
    let mut out = vec![];
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '[' | '(' | '<' => depth += 1,
            ']' | ')' | '>' => depth -= 1,
            ',' if depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if !s[start..].trim().is_empty() {
        out.push(s[start..].trim());
    }
    out
}

/// An immediate: decimal or 0x hex, optionally negative, with the ISA's prefix removed.
fn immediate(s: &str) -> Option<i64> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s),
    };
    let v = match digits.strip_prefix("0x") {
        Some(h) => i64::from_str_radix(h, 16).ok()?,
        None => digits.parse().ok()?,
    };
    Some(if neg { -v } else { v })
}
