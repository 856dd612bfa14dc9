//! Builds the instruction traces the cost model reads (`model/<isa>.trace`): the C
//! implementations are compiled with the kernel's code-generation flags (arm64: with
//! Debian's aarch64-linux-gnu-gcc, -march=armv8-a for LL/SC and -march=armv8.1-a for LSE),
//! linked statically with a small driver, and each LKDTM loop is run under qemu-user in
//! single-step mode with `-d exec`, which logs every executed instruction. Running each loop
//! at two bounds and subtracting leaves exactly one steady-state iteration of each loop, per
//! executed instruction, which is matched against `objdump -d` of the same binary.
//!
//! Nothing here is typed by hand: the trace files are the output of [`generate`], checked in
//! so the model works without the cross tools; a test regenerates them and fails if the
//! checked-in ones are stale.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Code-generation flags of a kernel build with CONFIG_FRAME_POINTER (arm64 always has it).
pub const KERNEL_FLAGS: &[&str] = &[
    "-O2",
    "-fno-omit-frame-pointer",
    "-fno-optimize-sibling-calls",
    "-fno-strict-aliasing",
    "-fno-common",
];

/// The two loop bounds whose traces are subtracted.
const N1: u32 = 64;
const N2: u32 = 192;

/// The instruction set a trace file describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    Arm64,
    X86_64,
}

impl Isa {
    pub fn file_name(self) -> &'static str {
        match self {
            Isa::Arm64 => "arm64.trace",
            Isa::X86_64 => "x86-64.trace",
        }
    }
    fn tools(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Isa::Arm64 => (
                "aarch64-linux-gnu-gcc",
                "aarch64-linux-gnu-objdump",
                "qemu-aarch64",
            ),
            Isa::X86_64 => ("gcc", "objdump", "qemu-x86_64"),
        }
    }
}

fn c_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("c")
}

/// The checked-in trace of an ISA.
pub fn checked_in_path(isa: Isa) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("model")
        .join(isa.file_name())
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{:?}: {e}", cmd.get_program()))?;
    if !out.status.success() {
        return Err(format!(
            "{:?} failed: {}",
            cmd.get_program(),
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .take(5)
                .collect::<Vec<_>>()
                .join(" | ")
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Why the tools for `isa` are unusable here, if they are.
pub fn missing_tools(isa: Isa) -> Option<String> {
    if isa == Isa::X86_64 && !cfg!(target_arch = "x86_64") {
        return Some("x86-64 traces are generated on x86-64 hosts only".into());
    }
    let (gcc, objdump, qemu) = isa.tools();
    let mut missing = vec![];
    for (tool, arg) in [
        (gcc, "--version"),
        (objdump, "--version"),
        (qemu, "--version"),
    ] {
        if Command::new(tool)
            .arg(arg)
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
        {
            missing.push(tool);
        }
    }
    (!missing.is_empty()).then(|| {
        format!("{} not found (Debian: apt-get install gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu qemu-user)", missing.join(", "))
    })
}

/// Compiles the implementations and the trace driver into a static executable.
pub fn build_static(isa: Isa, dir: &Path, with_selftest: bool) -> Result<PathBuf, String> {
    let (gcc, _, _) = isa.tools();
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let c = c_dir();
    let mut objects = vec![];
    let forms: &[(&str, &[&str])] = match isa {
        Isa::Arm64 => &[
            (
                "llsc",
                &[
                    "-march=armv8-a",
                    "-mno-outline-atomics",
                    "-mgeneral-regs-only",
                ],
            ),
            ("lse", &["-march=armv8.1-a", "-mgeneral-regs-only"]),
        ],
        Isa::X86_64 => &[("x86", &[])],
    };
    for (name, flags) in forms {
        let obj = dir.join(format!("{name}.o"));
        run(Command::new(gcc)
            .args(KERNEL_FLAGS)
            .args(*flags)
            .arg("-c")
            .arg(c.join("impl.c"))
            .arg("-o")
            .arg(&obj))?;
        objects.push(obj);
    }
    let exe = dir.join(if with_selftest { "selftest" } else { "trace" });
    let mut link = Command::new(gcc);
    link.args(["-O2", "-static", "-no-pie", "-pthread"]);
    if isa == Isa::Arm64 {
        link.arg("-mno-outline-atomics");
    }
    link.arg(c.join("registry.c"));
    if with_selftest {
        link.arg(c.join("selftest.c"))
            .arg(c.join("selftest_main.c"));
    } else {
        link.arg(c.join("trace_main.c"));
    }
    link.args(&objects).arg("-o").arg(&exe);
    run(&mut link)?;
    Ok(exe)
}

struct Insn {
    func: String,
    offset: u64,
    text: String,
    /// Branch target inside the binary, when the instruction is a direct branch.
    target: Option<u64>,
}

/// objdump -d of the whole executable: address -> instruction, and function start addresses.
/// Instructions by address, and (function name, start address) sorted by address.
type Disassembly = (HashMap<u64, Insn>, Vec<(String, u64)>);
/// Per-PC execution counts of the increment loop and of the decrement loop.
type LoopCounts = (HashMap<u64, f64>, HashMap<u64, f64>);

fn disassemble(objdump: &str, exe: &Path) -> Result<Disassembly, String> {
    let text = run(Command::new(objdump)
        .args(["-d", "--no-show-raw-insn"])
        .arg(exe))?;
    let mut insns = HashMap::new();
    let mut funcs = vec![];
    let mut cur: Option<(String, u64)> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_suffix(">:") {
            if let Some((addr, name)) = rest.split_once(" <") {
                if let Ok(a) = u64::from_str_radix(addr.trim(), 16) {
                    cur = Some((name.to_string(), a));
                    funcs.push((name.to_string(), a));
                }
            }
            continue;
        }
        let Some((addr, body)) = line.split_once(":\t") else {
            continue;
        };
        let Ok(a) = u64::from_str_radix(addr.trim(), 16) else {
            continue;
        };
        let Some((fname, fstart)) = &cur else {
            continue;
        };
        // drop comments ("// ..." on arm64, "# ..." on x86) and symbolic targets
        let mut t = body.split("//").next().unwrap_or("").to_string();
        if let Some(i) = t.find("# ") {
            t.truncate(i); // x86 comment; arm64 immediates are "#0x.." with no space
        }
        let target = t
            .split(" <")
            .next()
            .and_then(|s| s.split([' ', ',', '\t']).next_back())
            .and_then(|h| u64::from_str_radix(h, 16).ok());
        let is_branch = {
            let m = t.split_whitespace().next().unwrap_or("");
            m.starts_with('b')
                || m.starts_with("cb")
                || m.starts_with("tb")
                || m.starts_with('j')
                || m == "call"
        };
        if let Some(i) = t.find(" <") {
            t.truncate(i);
        }
        let t = t.split_whitespace().collect::<Vec<_>>().join(" ");
        insns.insert(
            a,
            Insn {
                func: fname.clone(),
                offset: a - fstart,
                text: t,
                target: if is_branch { target } else { None },
            },
        );
    }
    funcs.sort_by_key(|f| f.1);
    // Branch targets as function+offset, so traces do not change with the libc linked in.
    for insn in insns.values_mut() {
        if let Some(t) = insn.target {
            let i = funcs.partition_point(|f| f.1 <= t);
            if i > 0 {
                let (name, start) = &funcs[i - 1];
                let hex = format!("{t:x}");
                if let Some(pos) = insn.text.rfind(&hex) {
                    insn.text
                        .replace_range(pos..pos + hex.len(), &format!("<{name}+{:#x}>", t - start));
                }
            }
        }
    }
    Ok((insns, funcs))
}

fn exec_trace(qemu: &str, exe: &Path, log: &Path, k: i32, n: u32) -> Result<Vec<u64>, String> {
    // QEMU 8.1 renamed -singlestep to -one-insn-per-tb (the old spelling is deprecated).
    let help = run(Command::new(qemu).arg("-h")).unwrap_or_default();
    let one_insn = if help.contains("-one-insn-per-tb") {
        "-one-insn-per-tb"
    } else {
        "-singlestep"
    };
    run(Command::new(qemu)
        .args([one_insn, "-d", "exec,nochain", "-D"])
        .arg(log)
        .arg(exe)
        .arg(k.to_string())
        .arg(n.to_string()))?;
    let text = std::fs::read_to_string(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut pcs = Vec::with_capacity(text.len() / 80);
    for line in text.lines() {
        // "Trace 0: 0x7f.. [00000000/0000000000400abc/00000001/00000201] sym"
        if let Some(rest) = line.split_once('[').map(|x| x.1) {
            if let Some(pc) = rest.split('/').nth(1) {
                if let Ok(v) = u64::from_str_radix(pc, 16) {
                    pcs.push(v);
                }
            }
        }
    }
    Ok(pcs)
}

fn is_exclusive_load(text: &str) -> bool {
    let m = text.split_whitespace().next().unwrap_or("");
    m == "ldxr" || m == "ldaxr"
}

/// Per-PC execution counts of the increment loop and of the decrement loop of one run.
fn split_counts(pcs: &[u64], range: (u64, u64), back_edge: u64) -> Result<LoopCounts, String> {
    let inside = |pc: &u64| *pc >= range.0 && *pc < range.1;
    let first = pcs
        .iter()
        .position(inside)
        .ok_or("timing function never ran")?;
    let last = pcs
        .iter()
        .rposition(inside)
        .ok_or("timing function never ran")?;
    let seg = &pcs[first..=last];
    let split = seg
        .iter()
        .rposition(|pc| *pc == back_edge)
        .ok_or("increment loop back edge never ran")?;
    let mut inc = HashMap::new();
    let mut dec = HashMap::new();
    for (i, pc) in seg.iter().enumerate() {
        *(if i <= split { &mut inc } else { &mut dec })
            .entry(*pc)
            .or_insert(0.0) += 1.0;
    }
    Ok((inc, dec))
}

/// Generates the trace file text for `isa`. Needs the cross compiler, objdump and qemu-user.
pub fn generate(isa: Isa) -> Result<String, String> {
    if let Some(why) = missing_tools(isa) {
        return Err(why);
    }
    let (gcc, objdump, qemu) = isa.tools();
    let dir = std::env::temp_dir().join(format!(
        "kharden-refcount-gen-{}-{:?}",
        std::process::id(),
        isa
    ));
    let exe = build_static(isa, &dir, false)?;
    let (insns, funcs) = disassemble(objdump, &exe)?;
    let version = run(Command::new(gcc).arg("--version"))?
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    let prefixes: &[(&str, &str, i32)] = match isa {
        Isa::Arm64 => &[("arm64-llsc", "rc_llsc_", 0), ("arm64-lse", "rc_lse_", 4)],
        Isa::X86_64 => &[("x86-64", "rc_x86_", 0)],
    };
    let mut out = String::new();
    out += &format!(
        "# kharden-refcount {} instruction traces: one steady-state iteration of each LKDTM loop, as\n\
         # executed under {qemu} -singlestep -d exec (run at n = {N2} minus run at n = {N1}, divided by {}).\n\
         # Generated by kharden_refcount::gen::generate (KHARDEN_REGENERATE=1 cargo test -p kharden-refcount\n\
         # --test cross); do not edit by hand.\n\
         # compiler: {version}\n\
         # flags: {} (+ -march=armv8-a -mno-outline-atomics for LL/SC, -march=armv8.1-a for LSE)\n\
         # columns: executions per iteration, function+offset, instruction\n",
        isa.file_name().trim_end_matches(".trace"),
        N2 - N1,
        KERNEL_FLAGS.join(" ")
    );
    let impls = ["atomic_t", "fast", "full", "fetch_add"];
    for (variant, prefix, base) in prefixes {
        let mut jobs: Vec<(String, i32)> = impls
            .iter()
            .enumerate()
            .map(|(i, name)| (name.to_string(), base + i as i32))
            .collect();
        jobs.push(("empty".into(), if *prefix == "rc_lse_" { -2 } else { -1 }));
        for (name, k) in jobs {
            let sym_name = if name == "atomic_t" {
                "atomic".to_string()
            } else {
                name.clone()
            };
            let sym = format!("{prefix}timing_{sym_name}");
            let idx = funcs
                .iter()
                .position(|f| f.0 == sym)
                .ok_or(format!("{sym} not in the binary"))?;
            let range = (
                funcs[idx].1,
                funcs.get(idx + 1).map(|f| f.1).unwrap_or(u64::MAX),
            );
            let mut addrs: Vec<&u64> = insns
                .keys()
                .filter(|a| **a >= range.0 && **a < range.1)
                .collect();
            addrs.sort();
            let back_edge = addrs
                .iter()
                .find(|a| {
                    let i = &insns[a];
                    matches!(i.target, Some(t) if t < ***a && t >= range.0 && !insns.get(&t).is_some_and(|ti| is_exclusive_load(&ti.text)))
                })
                .map(|a| **a)
                .ok_or(format!("{sym}: no loop back edge found"))?;
            let log = dir.join("exec.log");
            let a = exec_trace(qemu, &exe, &log, k, N1)?;
            let b = exec_trace(qemu, &exe, &log, k, N2)?;
            let (inc_a, dec_a) = split_counts(&a, range, back_edge)?;
            let (inc_b, dec_b) = split_counts(&b, range, back_edge)?;
            for (op, ca, cb, order) in [("inc", &inc_a, &inc_b, &b), ("dec", &dec_a, &dec_b, &b)] {
                out += &format!("loop {variant} {name} {op}\n");
                // program order of first execution in the longer run
                let mut seen = std::collections::HashSet::new();
                let mut listed = vec![];
                for pc in order.iter() {
                    let d = cb.get(pc).copied().unwrap_or(0.0) - ca.get(pc).copied().unwrap_or(0.0);
                    if d > 0.0 && seen.insert(*pc) {
                        listed.push((*pc, d / (N2 - N1) as f64));
                    }
                }
                for (pc, per) in listed {
                    let i = insns
                        .get(&pc)
                        .ok_or(format!("pc {pc:#x} not in the disassembly"))?;
                    out += &format!("{per:.4} {}+{:#x} {}\n", i.func, i.offset, i.text);
                }
                out += "end\n";
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(out)
}
