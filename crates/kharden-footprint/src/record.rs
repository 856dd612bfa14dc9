//! The recorder: runs a scenario under `perf record -e cpu-clock:k`, attributes each sampled
//! kernel instruction pointer to a path through the driver's windows, and derives each
//! path's functions, lines and how complete the set is.

use crate::driver::Scenario;
use crate::kallsyms::Kallsyms;
use crate::window::Window;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};

/// cpu-clock's sampling period: one sample per 10 us of CPU time, the highest rate the
/// default kernel.perf_event_max_sample_rate (100000/s) allows.
pub const PERIOD_NS: u64 = 10_000;

/// One kernel sample: who, when, where, and what its call chain says it was doing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub tid: i32,
    pub time_ns: u64,
    pub ip: u64,
    /// `context::*` flags of the functions on its call chain.
    pub context: u8,
}

/// What a sample's call chain shows beyond the path it was taken in.
pub mod context {
    /// Under a call-function IPI (sysvec_call_function{,_single}).
    pub const CALL_FUNCTION: u8 = 1;
    /// Under the local APIC timer interrupt.
    pub const TIMER: u8 = 2;
    /// Under another interrupt (device, reschedule, other IPIs).
    pub const OTHER_IRQ: u8 = 4;
    /// In softirq processing (handle_softirqs), whichever interrupt's exit ran it.
    pub const SOFTIRQ: u8 = 8;
    /// In the scheduler (__schedule): a block, a yield or a preemption.
    pub const SCHEDULE: u8 = 16;
    /// In the return-to-user work loop (exit_to_user_mode_loop): rescheduling, rseq and
    /// task work that a tick or a preemption left, not the path's own work.
    pub const EXIT_WORK: u8 = 32;
    /// Delivering a signal on the return to user mode (arch_do_signal_or_restart).
    pub const SIGNAL: u8 = 64;
    /// In a BPF program the recording host attached (an LSM hook's trampoline, a traced
    /// function's fentry, a tracepoint): the host's own monitoring, not the kernel under
    /// test. The JITed program body lies outside the core text and is not resolved, but
    /// every program runs between __bpf_prog_enter* and __bpf_prog_exit* and calls its
    /// helpers (bpf_*, its maps' lookups), which are.
    pub const INSTRUMENTATION: u8 = 128;

    /// The flag a kernel function on a call chain raises.
    pub fn of(name: &str) -> u8 {
        match name {
            "asm_sysvec_call_function" | "asm_sysvec_call_function_single" => CALL_FUNCTION,
            "asm_sysvec_apic_timer_interrupt" => TIMER,
            "handle_softirqs" => SOFTIRQ,
            "__schedule" => SCHEDULE,
            "exit_to_user_mode_loop" => EXIT_WORK,
            "arch_do_signal_or_restart" => SIGNAL,
            n if n.starts_with("asm_sysvec_") || n == "asm_common_interrupt" => OTHER_IRQ,
            n if is_bpf_runtime(n) => INSTRUMENTATION,
            _ => 0,
        }
    }

    /// The BPF runtime: program entry and exit, trampolines, helpers, the LSM hooks' attach
    /// points and the map code programs call.
    fn is_bpf_runtime(name: &str) -> bool {
        [
            "bpf_",
            "__bpf_",
            "___bpf_",
            "htab_map_",
            "__htab_map_",
            "queue_stack_map_",
        ]
        .iter()
        .any(|p| name.starts_with(p))
            || matches!(name, "lookup_nulls_elem_raw" | "trace_call_bpf")
    }
}

/// Why a sample in a path's window is not the path's: what each path keeps is its own
/// work; interrupts, softirqs and preemption by other tasks that land in its window are
/// counted and left out.
pub fn excluded(path: &str, ctx: u8) -> Option<&'static str> {
    use context::*;
    let (irqs, softirq, schedule, exit_work) = match path {
        // The tick leaves the return-to-user work it queued.
        "timer-tick" => (TIMER, true, false, true),
        "ipi-tlb-flush" | "ipi-membarrier" => (CALL_FUNCTION, false, false, false),
        // They block or yield by nature.
        "context-switch" | "wait4" | "exit" => (0, false, true, true),
        // The tracer sleeps in waitpid; the tracee stops in ptrace_stop from the signal
        // work of its return to user mode.
        "ptrace-singlestep" | "ptrace-stop" => (0, false, true, true),
        // Delivery is return-to-user work by nature.
        "signal-deliver" => (0, false, false, true),
        // It waits for an RCU grace period; its teardown is task work on the return.
        "umount" => (0, false, true, true),
        _ => (0, false, false, false),
    };
    let irq = ctx & (CALL_FUNCTION | TIMER | OTHER_IRQ);
    if irqs != 0 && irq & irqs == 0 {
        return Some("interrupt");
    }
    if irq & !irqs != 0 {
        return Some("interrupt");
    }
    if ctx & INSTRUMENTATION != 0 {
        return Some(kharden::kernel::footprints::path_footprint::INSTRUMENTATION);
    }
    // Delivery rides on the return of the syscall that unblocked the signal: only the
    // samples under arch_do_signal_or_restart are its own.
    if path == "signal-deliver" && ctx & SIGNAL == 0 {
        return Some("trigger");
    }
    if ctx & SOFTIRQ != 0 && !softirq {
        return Some("softirq");
    }
    if ctx & SCHEDULE != 0 && !schedule {
        return Some("preempted");
    }
    if ctx & EXIT_WORK != 0 && !exit_work {
        return Some("exit-work");
    }
    None
}

/// A function a path ran.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionUse {
    /// Index into `Kallsyms::functions`.
    pub index: usize,
    /// Samples in it (0: listed from the source as running with interrupts off).
    pub samples: u64,
    /// Bytes from the function's start to its furthest sampled instruction.
    pub reach: u64,
}

#[derive(Debug, Clone, Default)]
pub struct PathRecord {
    pub name: String,
    pub scenario: String,
    pub samples: u64,
    pub ops: u64,
    pub window_ns: u64,
    pub functions: Vec<FunctionUse>,
    /// Line indices (offset / 64 from `_text`) holding a sampled instruction.
    pub sampled_lines: BTreeSet<u64>,
    /// Lines first seen in the last tenth of the path's samples (in time order).
    pub new_lines_last_tenth: u64,
    pub new_functions_last_tenth: u64,
    /// Source-listed names the running kernel does not have.
    pub missing_source: Vec<String>,
    /// Samples in the path's windows left out, by reason (interrupt, softirq, preempted).
    pub excluded: BTreeMap<&'static str, u64>,
}

/// The perf command that records `scenario` (driven by `exe`) into `data`, on every CPU
/// with `system_wide` (Scenario::system_wide).
pub fn perf_record_command(
    exe: &Path,
    scenario: &str,
    system_wide: bool,
    scale: f64,
    data: &Path,
    windows: &Path,
) -> Command {
    let mut c = Command::new("perf");
    c.args(["record", "-q", "-g", "-e", "cpu-clock:k", "-c"])
        .arg(PERIOD_NS.to_string());
    if system_wide {
        c.arg("-a");
    }
    c.args(["-k", "mono", "-o"])
        .arg(data)
        .arg("--")
        .arg(exe)
        .args(["kernel", "drive", scenario, "--scale"])
        .arg(scale.to_string())
        .arg("--windows")
        .arg(windows);
    c
}

/// Parses a `perf script -F comm,pid,tid,time,ip --ns` sample header, `comm pid/tid
/// secs.nanos:`, into (comm, tid, ns). The command name may hold spaces, so the fields are
/// taken from the right; a header without one gives an empty comm.
pub fn parse_header(line: &str) -> Option<(&str, i32, u64)> {
    let mut f = line.split_whitespace().rev();
    let time = f.next()?.strip_suffix(':')?;
    let ids = f.next()?;
    // Everything before the ids, borrowed from the line (a header per sample).
    let comm = line[..ids.as_ptr() as usize - line.as_ptr() as usize].trim();
    let tid = ids.rsplit('/').next()?.parse().ok()?;
    let (s, ns) = time.split_once('.')?;
    Some((
        comm,
        tid,
        s.parse::<u64>().ok()? * 1_000_000_000 + ns.parse::<u64>().ok()?,
    ))
}

/// Parses `perf script` output of call-chain samples: a header line, then one indented
/// address per frame (the sampled IP first), then a blank line. `flag` gives each kernel
/// address's context flag; samples of a command `keep` refuses are dropped.
pub fn parse_script(
    lines: impl Iterator<Item = String>,
    flag: impl Fn(u64) -> u8,
    keep: impl Fn(&str) -> bool,
) -> Vec<Sample> {
    let mut out = Vec::new();
    let mut cur: Option<Sample> = None;
    let mut frames = 0;
    for line in lines {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        if !line.starts_with(char::is_whitespace) || trimmed.contains(':') {
            if let Some(s) = cur.take().filter(|_| frames > 0) {
                out.push(s);
            }
            cur = parse_header(&line)
                .filter(|(comm, _, _)| keep(comm))
                .map(|(_, tid, time_ns)| Sample {
                    tid,
                    time_ns,
                    ip: 0,
                    context: 0,
                });
            frames = 0;
            continue;
        }
        let (Some(s), Ok(addr)) = (
            cur.as_mut(),
            u64::from_str_radix(trimmed.split_whitespace().next().unwrap_or(""), 16),
        ) else {
            continue;
        };
        if frames == 0 {
            s.ip = addr;
        }
        s.context |= flag(addr);
        frames += 1;
    }
    out.extend(cur.filter(|_| frames > 0));
    out
}

/// Reads the samples of a perf.data file through `perf script`, only those of command `comm`
/// when given (a system-wide recording's: the driver and its children, not perf, idle or
/// other tasks).
pub fn read_samples(data: &Path, k: &Kallsyms, comm: Option<&str>) -> kharden::Result<Vec<Sample>> {
    let mut child = Command::new("perf")
        .args(["script", "-F", "comm,pid,tid,time,ip", "--ns", "-i"])
        .arg(data)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| kharden::Error::new(format!("perf script: {e}")))?;
    let out = child.stdout.take().expect("piped stdout");
    // Read beside stdout, so that a perf writing much to stderr never blocks on a full pipe.
    let err = child.stderr.take().expect("piped stderr");
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut { err }, &mut text);
        text
    });
    let flags: Vec<u8> = k.functions.iter().map(|f| context::of(&f.name)).collect();
    let flag = |ip: u64| k.lookup(ip).map_or(0, |i| flags[i]);
    let samples = parse_script(
        std::io::BufReader::new(out).lines().map_while(|l| l.ok()),
        flag,
        |c| comm.map_or(true, |want| c == want),
    );
    let stderr = stderr.join().unwrap_or_default();
    child
        .wait()
        .map_err(|e| kharden::Error::new(format!("perf script: {e}")))?;
    // perf's "Processed N events and lost M chunks!": a busy host starved its writer.
    if let Some(lost) = stderr.lines().find(|l| l.contains(" lost ")) {
        eprintln!(
            "kharden: warning: {}: {}; the paths' sample counts are short, and forks whose records were lost leave their children's samples unnamed (record on a quiet host)",
            data.display(),
            lost.trim()
        );
    }
    Ok(samples)
}

/// The windows that name a declared path, in time order: the driver's windows come from one
/// thread and do not overlap, so a sample's window is found by binary search.
pub struct WindowIndex<'a> {
    windows: Vec<&'a Window>,
    paths: &'a [&'a str],
}

impl<'a> WindowIndex<'a> {
    pub fn new(windows: &'a [Window], paths: &'a [&'a str]) -> Self {
        let declared = |p: &Option<String>| p.as_deref().is_some_and(|p| paths.contains(&p));
        let mut windows: Vec<&Window> = windows
            .iter()
            .filter(|w| declared(&w.own) || declared(&w.others))
            .collect();
        windows.sort_by_key(|w| w.start_ns);
        WindowIndex { windows, paths }
    }

    /// Which path a sample belongs to: the window's own path if the sample is the window
    /// thread's, else what the window says the other threads and children run.
    pub fn attribute(&self, s: &Sample) -> Option<&'a str> {
        let i = self.windows.partition_point(|w| w.start_ns <= s.time_ns);
        let w = self.windows.get(i.checked_sub(1)?)?;
        if s.time_ns > w.end_ns {
            return None;
        }
        let path = if w.tid == s.tid { &w.own } else { &w.others };
        path.as_deref().filter(|p| self.paths.contains(p))
    }
}

/// Builds each path's record from the samples (in time order) and the windows.
pub fn build(
    scenario: &Scenario,
    k: &Kallsyms,
    windows: &[Window],
    samples: &[Sample],
) -> Vec<PathRecord> {
    let mut per_path: BTreeMap<&str, Vec<&Sample>> = BTreeMap::new();
    let mut sorted: Vec<&Sample> = samples.iter().collect();
    sorted.sort_by_key(|s| s.time_ns);
    let index = WindowIndex::new(windows, scenario.paths);
    for s in sorted {
        if let Some(p) = index.attribute(s) {
            per_path.entry(p).or_default().push(s);
        }
    }
    scenario
        .paths
        .iter()
        .map(|&name| {
            let samples = per_path.get(name).map(Vec::as_slice).unwrap_or(&[]);
            let mut r = path_record(name, k, samples);
            r.scenario = scenario.name.to_string();
            for w in windows {
                if w.own.as_deref() == Some(name)
                    || (w.own.is_none() && w.others.as_deref() == Some(name))
                {
                    r.ops += w.ops;
                    r.window_ns += w.end_ns - w.start_ns;
                }
            }
            r
        })
        .collect()
}

fn path_record(name: &str, k: &Kallsyms, samples: &[&Sample]) -> PathRecord {
    let mut r = PathRecord {
        name: name.to_string(),
        ..PathRecord::default()
    };
    let tail_from = samples.len() - samples.len() / 10;
    let mut uses: HashMap<usize, FunctionUse> = HashMap::new();
    for (i, s) in samples.iter().enumerate() {
        if let Some(why) = excluded(name, s.context) {
            *r.excluded.entry(why).or_default() += 1;
            continue;
        }
        let Some(index) = k.lookup(s.ip) else {
            continue;
        };
        r.samples += 1;
        let offset = s.ip - k.text_start;
        let f = &k.functions[index];
        let new_line = r.sampled_lines.insert(offset / 64);
        let u = uses.entry(index).or_insert(FunctionUse {
            index,
            samples: 0,
            reach: 0,
        });
        let new_function = u.samples == 0;
        u.samples += 1;
        u.reach = u.reach.max(offset - f.offset);
        if i >= tail_from {
            r.new_lines_last_tenth += new_line as u64;
            r.new_functions_last_tenth += new_function as u64;
        }
    }
    for src in crate::irqs_off::functions(name) {
        match k.by_name(src) {
            Some(index) => {
                uses.entry(index).or_insert(FunctionUse {
                    index,
                    samples: 0,
                    reach: 0,
                });
            }
            None => r.missing_source.push(src.to_string()),
        }
    }
    r.functions = uses.into_values().collect();
    r.functions.sort_by_key(|u| k.functions[u.index].offset);
    r
}

/// Records one scenario: perf record of the driver, then attribution.
pub fn record(
    scenario: &Scenario,
    k: &Kallsyms,
    scale: f64,
    work: &Path,
) -> kharden::Result<Vec<PathRecord>> {
    let exe =
        std::env::current_exe().map_err(|e| kharden::Error::new(format!("own executable: {e}")))?;
    let data = work.join(format!("{}.data", scenario.name));
    let windows_file = work.join(format!("{}.windows", scenario.name));
    let system_wide = scenario.system_wide();
    let status = perf_record_command(
        &exe,
        scenario.name,
        system_wide,
        scale,
        &data,
        &windows_file,
    )
    .stdout(Stdio::null())
    .status()
    .map_err(|e| kharden::Error::new(format!("perf record (is perf installed?): {e}")))?;
    if !status.success() {
        return Err(kharden::Error::new(format!(
            "perf record of scenario {} failed ({status}); it needs root and perf",
            scenario.name
        )));
    }
    let place = windows_file.display().to_string();
    let text = std::fs::read_to_string(&windows_file)
        .map_err(|e| kharden::Error::at(&place, format!("cannot read: {e}")))?;
    let windows = crate::window::read_all(&place, &text)?;
    // The kernel truncates a command name to 15 bytes (TASK_COMM_LEN); children keep it.
    let comm: Option<String> = system_wide.then(|| {
        let name = exe
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned());
        name.chars().take(15).collect()
    });
    let samples = read_samples(&data, k, comm.as_deref())?;
    let _ = std::fs::remove_file(&data);
    Ok(build(scenario, k, &windows, &samples))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A system-wide recording keeps the samples of the driver's command name (its
    /// children's too), whatever spaces other command names hold, and only its scenarios
    /// record every CPU.
    #[test]
    fn system_wide_samples_are_kept_by_command_name() {
        let text = "kharden 100/100 1.000000001: \n\tffffffff81000010\n\n\
                    Web Content 200/201 1.000000002: \n\tffffffff81000020\n\n\
                    kharden 101/101 1.000000003: \n\tffffffff81000030\n\n\
                    swapper 0/0 1.000000004: \n\tffffffff81000040\n";
        let s = parse_script(text.lines().map(String::from), |_| 0, |c| c == "kharden");
        let kept: Vec<(i32, u64)> = s.iter().map(|s| (s.tid, s.ip)).collect();
        assert_eq!(kept, [(100, 0xffffffff81000010), (101, 0xffffffff81000030)]);
        assert_eq!(
            parse_header("Web Content 200/201 1.000000002:"),
            Some(("Web Content", 201, 1_000_000_002))
        );
        let args = |wide| {
            let c = perf_record_command(
                Path::new("kharden"),
                "process",
                wide,
                1.0,
                Path::new("d"),
                Path::new("w"),
            );
            c.get_args().any(|a| a == "-a")
        };
        assert!(args(true) && !args(false));
        let wide: Vec<&str> = crate::driver::SCENARIOS
            .iter()
            .filter(|s| s.system_wide())
            .map(|s| s.name)
            .collect();
        assert_eq!(wide, ["process"], "the scenario whose children exit");
    }

    #[test]
    fn call_chain_samples_parse_with_their_context() {
        let text = " 8589/8590    369.256973582: \n\tffffffff8157a3c1\n\tffffffff81000e90\n\t    7f0e2daf2ad7\n\n\
                    8589/8589    369.256973999: \n\tffffffff81000010\n\ngarbage\n";
        let flag = |ip: u64| {
            if ip == 0xffffffff81000e90 {
                context::CALL_FUNCTION
            } else {
                0
            }
        };
        let s = parse_script(text.lines().map(String::from), flag, |_| true);
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].tid, s[0].time_ns, s[0].ip),
            (8590, 369_256_973_582, 0xffffffff8157a3c1)
        );
        assert_eq!(s[0].context, context::CALL_FUNCTION);
        assert_eq!(
            (s[1].tid, s[1].ip, s[1].context),
            (8589, 0xffffffff81000010, 0)
        );
    }

    #[test]
    fn the_bpf_runtime_on_a_chain_marks_the_hosts_instrumentation() {
        for bpf in [
            "__bpf_prog_enter_recur",
            "__bpf_tramp_exit",
            "bpf_probe_read_kernel",
            "bpf_lsm_file_open",
            "__htab_map_lookup_elem",
            "lookup_nulls_elem_raw",
            "queue_stack_map_push_elem",
        ] {
            assert_eq!(context::of(bpf), context::INSTRUMENTATION, "{bpf}");
        }
        for kernel in [
            "chrdev_open",
            "security_file_open",
            "do_sys_openat2",
            "sbpf_x",
        ] {
            assert_eq!(context::of(kernel), 0, "{kernel}");
        }
    }

    #[test]
    fn paths_keep_their_own_work_and_leave_out_the_rest() {
        use context::*;
        assert_eq!(excluded("getppid", 0), None);
        assert_eq!(excluded("getppid", TIMER), Some("interrupt"));
        assert_eq!(excluded("getppid", SCHEDULE), Some("preempted"));
        assert_eq!(excluded("getppid", EXIT_WORK), Some("exit-work"));
        assert_eq!(excluded("timer-tick", TIMER | EXIT_WORK), None);
        assert_eq!(excluded("wait4", SCHEDULE), None);
        assert_eq!(excluded("signal-deliver", EXIT_WORK | SIGNAL), None);
        assert_eq!(excluded("signal-deliver", 0), Some("trigger"));
        assert_eq!(excluded("signal-deliver", EXIT_WORK), Some("trigger"));
        assert_eq!(excluded("umount", SCHEDULE | EXIT_WORK), None);
        assert_eq!(excluded("kill", EXIT_WORK), Some("exit-work"));
        assert_eq!(
            excluded("open-close", INSTRUMENTATION),
            Some("instrumentation")
        );
        assert_eq!(
            excluded("umount", SCHEDULE | INSTRUMENTATION),
            Some("instrumentation")
        );
        assert_eq!(
            excluded("getppid", TIMER | INSTRUMENTATION),
            Some("interrupt")
        );
        assert_eq!(excluded("timer-tick", TIMER | SOFTIRQ), None);
        assert_eq!(excluded("timer-tick", 0), Some("interrupt"));
        assert_eq!(
            excluded("ipi-tlb-flush", CALL_FUNCTION | SOFTIRQ),
            Some("softirq")
        );
        assert_eq!(
            excluded("ipi-tlb-flush", CALL_FUNCTION | TIMER),
            Some("interrupt")
        );
    }

    fn w(own: Option<&str>, others: Option<&str>, tid: i32, start: u64, end: u64) -> Window {
        Window {
            repeat: 0,
            own: own.map(String::from),
            others: others.map(String::from),
            tid,
            start_ns: start,
            end_ns: end,
            ops: 1,
        }
    }

    #[test]
    fn samples_go_to_their_own_window_then_to_others() {
        let ws = [
            w(Some("fork"), Some("exit"), 1, 10, 20),
            w(None, Some("execve"), 1, 30, 40),
        ];
        let paths = ["fork", "exit", "execve"];
        let index = WindowIndex::new(&ws, &paths);
        let at = |tid, t| {
            index.attribute(&Sample {
                tid,
                time_ns: t,
                ip: 0,
                context: 0,
            })
        };
        assert_eq!(at(1, 15), Some("fork"));
        assert_eq!(at(2, 15), Some("exit"));
        assert_eq!(at(1, 35), None);
        assert_eq!(at(3, 35), Some("execve"));
        assert_eq!(at(1, 25), None);
    }
}
