//! The recorder's own cost, measured on the host at record time (FORMAT.md, "The recorder's
//! cost"): one loop, run untraced and under the recording's perf, whose difference is what
//! the recording adds to the intervals it attributes to user and kernel.
//!
//! The loop (`run_loop`, run by `kharden trace calibrate-loop`): batches of an empty syscall
//! (number 1000: do_syscall_64 finds no handler and returns -ENOSYS, but both raw_syscalls
//! tracepoints fire), the same loop calling a function instead (its user work), batches of
//! 4 KiB reads of /dev/zero (a call that moves data: how the tracer's cost divides between
//! the two sides of its timestamps moves with what the call does to the caches, so the two
//! kinds of call are averaged and half their difference is part of the figure's error),
//! rounds of first writes to fresh anonymous pages (a page fault and a page allocation
//! each), and batches of posix_spawn of /bin/true and its wait (what a process's life costs
//! beyond its syscalls and events). Marker syscalls (1001-1006) delimit the phases.
//! Untraced, the loop times itself; traced, the trace's own on-CPU intervals are used
//! (`analyse`), so time the loop spent preempted counts in neither.

use crate::format::{self, Op, TracerCost};
use kharden::{Error, Result};
use serde::{Deserialize, Serialize};
use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

/// The empty syscall, and the markers around the fault rounds.
pub const EMPTY_NR: u32 = 1000;
const FAULTS_BEGIN: u32 = 1001;
const FAULTS_END: u32 = 1002;
const READS_BEGIN: u32 = 1003;
const READS_END: u32 = 1004;
const PROCS_BEGIN: u32 = 1005;
const PROCS_END: u32 = 1006;
const READ_NR: u32 = 0;
/// The program each process of the process phase runs; the phase is left out without it.
const TRUE: &str = "/bin/true";
const PROC_BATCHES: usize = 8;
const PER_PROC_BATCH: usize = 16;
const BATCHES: usize = 20;
const PER_BATCH: usize = 5000;
const ROUNDS: usize = 16;
const PAGES: usize = 1024;

/// What the loop measured of itself (per batch or round, ns per operation).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LoopTimes {
    pub empty_syscall_ns: Vec<f64>,
    pub user_ns: Vec<f64>,
    /// A 4 KiB read of /dev/zero, per call.
    pub read_ns: Vec<f64>,
    pub fault_ns: Vec<f64>,
    /// A posix_spawn (glibc: a vfork-like clone and exec) of /bin/true and its wait, per
    /// batch (empty: no /bin/true).
    #[serde(default)]
    pub process_ns: Vec<f64>,
}

#[inline(never)]
fn not_a_syscall(nr: i64) -> i64 {
    black_box(nr)
}

fn marker(nr: u32) {
    // SAFETY: a syscall number with no handler: the kernel returns -ENOSYS.
    unsafe { libc::syscall(nr as libc::c_long) };
}

/// The calibration loop; writes its own timings to `out` as JSON.
pub fn run_loop(out: &Path) -> Result<()> {
    let mut t = LoopTimes::default();
    for _ in 0..BATCHES {
        let start = Instant::now();
        for _ in 0..PER_BATCH {
            // SAFETY: as `marker`.
            black_box(unsafe { libc::syscall(EMPTY_NR as libc::c_long) });
        }
        t.empty_syscall_ns
            .push(start.elapsed().as_nanos() as f64 / PER_BATCH as f64);
        let start = Instant::now();
        for _ in 0..PER_BATCH {
            not_a_syscall(EMPTY_NR as i64);
        }
        t.user_ns
            .push(start.elapsed().as_nanos() as f64 / PER_BATCH as f64);
    }
    let zero = std::fs::File::open("/dev/zero").map_err(|e| Error::at("/dev/zero", e))?;
    let mut buf = vec![0u8; 4096];
    marker(READS_BEGIN);
    for _ in 0..BATCHES {
        let start = Instant::now();
        for _ in 0..PER_BATCH {
            use std::os::fd::AsRawFd;
            // SAFETY: a read into our buffer from our descriptor.
            black_box(unsafe {
                libc::read(
                    zero.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    4096,
                )
            });
        }
        t.read_ns
            .push(start.elapsed().as_nanos() as f64 / PER_BATCH as f64);
    }
    marker(READS_END);
    for _ in 0..ROUNDS {
        // SAFETY: a fresh private anonymous mapping, written page by page, then unmapped.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                PAGES * 4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                return Err(Error::new("calibration loop: mmap failed"));
            }
            libc::madvise(p, PAGES * 4096, libc::MADV_NOHUGEPAGE);
            marker(FAULTS_BEGIN);
            let start = Instant::now();
            for i in 0..PAGES {
                (p as *mut u8).add(i * 4096).write_volatile(1);
            }
            t.fault_ns
                .push(start.elapsed().as_nanos() as f64 / PAGES as f64);
            marker(FAULTS_END);
            libc::munmap(p, PAGES * 4096);
        }
    }
    t.process_ns = process_batches()?;
    let json = serde_json::to_vec(&t).map_err(|e| Error::new(e.to_string()))?;
    std::fs::write(out, json).map_err(|e| Error::at(out.display(), e))
}

/// Batches of posix_spawn of /bin/true and wait, pinned to this CPU so that the parent and
/// each child share it and the elapsed time is their CPU time; none without /bin/true.
fn process_batches() -> Result<Vec<f64>> {
    if !Path::new(TRUE).exists() {
        return Ok(Vec::new());
    }
    let prog = std::ffi::CString::new(TRUE).expect("no NUL");
    let argv = [prog.as_ptr(), std::ptr::null()];
    let envp: [*const libc::c_char; 1] = [std::ptr::null()];
    // SAFETY: a zeroed cpu_set_t with one CPU set, passed with its size.
    unsafe {
        let cpu = libc::sched_getcpu();
        if cpu >= 0 {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu as usize, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
    let mut batches = Vec::with_capacity(PROC_BATCHES);
    marker(PROCS_BEGIN);
    for _ in 0..PROC_BATCHES {
        let start = Instant::now();
        for _ in 0..PER_PROC_BATCH {
            let mut pid = 0;
            // SAFETY: argv and envp are NULL-terminated arrays of NUL-terminated strings
            // that outlive the call; no file actions or attributes.
            let err = unsafe {
                libc::posix_spawn(
                    &mut pid,
                    prog.as_ptr(),
                    std::ptr::null(),
                    std::ptr::null(),
                    argv.as_ptr() as *const *mut libc::c_char,
                    envp.as_ptr() as *const *mut libc::c_char,
                )
            };
            if err != 0 {
                return Err(Error::new(format!(
                    "calibration loop: posix_spawn {TRUE} failed (error {err})"
                )));
            }
            let mut status = 0;
            // SAFETY: reaping our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
        }
        batches.push(start.elapsed().as_nanos() as f64 / PER_PROC_BATCH as f64);
    }
    marker(PROCS_END);
    Ok(batches)
}

/// Reads the loop's own timings.
pub fn read_times(path: &Path) -> Result<LoopTimes> {
    let text = std::fs::read(path).map_err(|e| Error::at(path.display(), e))?;
    serde_json::from_slice(&text).map_err(|e| Error::at(path.display(), e))
}

/// Mean and standard error of the mean of `v` (0 for fewer than two values).
pub fn mean_se(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, (var / n).sqrt())
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(0.0)
}

/// Median of `v` and its standard error (from the interquartile range, as for a normal
/// spread: robust to the few rounds another tenant or the hypervisor slowed).
fn median_se(v: &[f64]) -> (f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let q = |f: f64| {
        s.get(((s.len() - 1) as f64 * f) as usize)
            .copied()
            .unwrap_or(0.0)
    };
    if s.len() < 2 {
        return (q(0.5), 0.0);
    }
    let sd = (q(0.75) - q(0.25)) / 1.349;
    (q(0.5), 1.2533 * sd / (s.len() as f64).sqrt())
}

/// What the traced loop's trace shows of its root task, on-CPU time only.
#[derive(Debug, Default)]
struct Traced {
    /// Kernel and user interval of each empty syscall (user: from the previous one's exit).
    kernel_ns: Vec<f64>,
    user_ns: Vec<f64>,
    /// The same of each read between the read markers.
    read_kernel_ns: Vec<f64>,
    read_user_ns: Vec<f64>,
    /// Each fault round: on-CPU ns between the markers, faults, other events.
    rounds: Vec<(f64, u64, u64)>,
    /// The process phase: on-CPU ns of the root and its children, processes, syscalls
    /// and other events (as a replay counts them).
    processes: Option<ProcessPhase>,
}

#[derive(Debug, Default)]
struct ProcessPhase {
    on_cpu_ns: u64,
    processes: u64,
    syscalls: u64,
    events: u64,
}

fn read_traced(trace: &Path) -> Result<Traced> {
    let reader = format::open(trace)?;
    let mut out = Traced::default();
    let mut root = None;
    // On-CPU time of the root since its last boundary, and whether it is on a CPU.
    let mut since: Option<u64> = None;
    let mut acc = 0u64;
    let mut last_exit_empty = false;
    let mut reading = false;
    let mut last_exit_read = false;
    let mut round: Option<(u64, u64)> = None;
    // The process phase: its children, each with the time it came on the CPU.
    let mut phase: Option<ProcessPhase> = None;
    let mut children: std::collections::HashMap<u32, Option<u64>> = Default::default();
    for ev in reader {
        let ev = ev?;
        if root.is_none() {
            if let Op::TaskNew { parent: None, .. } = ev.op {
                root = Some(ev.tid);
            }
        }
        if let Some(p) = phase.as_mut() {
            count_process_event(p, &mut children, root, &ev);
        }
        if Some(ev.tid) != root {
            continue;
        }
        let t = ev.time_ns;
        if let Some(s) = since {
            acc += t.saturating_sub(s);
            since = Some(t);
        }
        match ev.op {
            Op::SwitchIn { .. } => since = Some(t),
            Op::SwitchOut { .. } => since = None,
            Op::SysEnter { nr, .. } => {
                if nr == EMPTY_NR && last_exit_empty {
                    out.user_ns.push(acc as f64);
                }
                if nr == READ_NR && reading && last_exit_read {
                    out.read_user_ns.push(acc as f64);
                }
                match nr {
                    READS_BEGIN => reading = true,
                    READS_END => reading = false,
                    _ => {}
                }
                if nr == FAULTS_END {
                    if let Some((faults, events)) = round.take() {
                        out.rounds.push((acc as f64, faults, events));
                    }
                }
                if nr == PROCS_END {
                    if let Some(mut p) = phase.take() {
                        p.on_cpu_ns += acc;
                        out.processes = Some(p);
                    }
                }
                if let Some(p) = phase.as_mut() {
                    p.on_cpu_ns += acc;
                }
                acc = 0;
            }
            Op::SysExit { nr, .. } => {
                if nr == EMPTY_NR {
                    out.kernel_ns.push(acc as f64);
                }
                last_exit_read = nr == READ_NR && reading;
                if last_exit_read {
                    out.read_kernel_ns.push(acc as f64);
                }
                if nr == FAULTS_BEGIN {
                    round = Some((0, 0));
                }
                if nr == PROCS_BEGIN {
                    phase = Some(ProcessPhase::default());
                } else if let Some(p) = phase.as_mut() {
                    p.on_cpu_ns += acc;
                }
                last_exit_empty = nr == EMPTY_NR;
                acc = 0;
            }
            Op::PageFault { user: true, .. } => {
                if let Some((f, e)) = round.as_mut() {
                    *f += 1;
                    *e += 1;
                }
            }
            Op::PageAlloc { .. }
            | Op::PageFree { .. }
            | Op::TlbFlush { .. }
            | Op::Migrate { .. } => {
                if let Some((_, e)) = round.as_mut() {
                    *e += 1;
                }
            }
            _ => {}
        }
    }
    if out.kernel_ns.len() < BATCHES * PER_BATCH / 2
        || out.read_kernel_ns.len() < BATCHES * PER_BATCH / 2
        || out.rounds.is_empty()
    {
        return Err(Error::at(
            trace.display(),
            format!(
                "calibration trace holds {} empty syscalls and {} fault rounds (expected {} and {}): perf lost them?",
                out.kernel_ns.len(),
                out.rounds.len(),
                BATCHES * PER_BATCH,
                ROUNDS
            ),
        ));
    }
    Ok(out)
}

/// Counts `ev` into the process phase: a child's time on the CPU, and the syscalls and
/// other events of the root and its children that a replay charges the recorder's
/// per-call and per-event figures for (as replay/split.rs does).
fn count_process_event(
    p: &mut ProcessPhase,
    children: &mut std::collections::HashMap<u32, Option<u64>>,
    root: Option<u32>,
    ev: &format::Event,
) {
    let t = ev.time_ns;
    if let Op::TaskNew { parent, .. } = &ev.op {
        if parent.is_some() && *parent == root {
            children.insert(ev.tid, None);
            p.processes += 1;
            // The parent's event.
            p.events += 1;
        }
        return;
    }
    let child = children.get_mut(&ev.tid);
    if Some(ev.tid) != root && child.is_none() {
        return;
    }
    if let Some(since) = child {
        match ev.op {
            Op::SwitchIn { .. } => *since = Some(t),
            Op::SwitchOut { .. } | Op::Exit => {
                if let Some(s) = since.take() {
                    p.on_cpu_ns += t.saturating_sub(s);
                }
            }
            _ => {}
        }
    }
    match ev.op {
        Op::SysEnter { nr, .. } if nr < EMPTY_NR => p.syscalls += 1,
        Op::SwitchOut { .. }
        | Op::TlbFlush { .. }
        | Op::Exec { .. }
        | Op::PageFault { .. }
        | Op::PageAlloc { .. }
        | Op::PageFree { .. }
        | Op::Migrate { .. } => p.events += 1,
        _ => {}
    }
}

/// Batch means of `v` (`BATCHES` batches): their spread is the figure's standard error.
fn batch_means(v: &[f64]) -> Vec<f64> {
    let per = v.len().div_ceil(BATCHES).max(1);
    v.chunks(per)
        .map(|c| c.iter().sum::<f64>() / c.len() as f64)
        .collect()
}

/// The mean of two estimates, with the error of each and half their difference combined.
fn mean_of_two((a, ea): (f64, f64), (b, eb): (f64, f64)) -> (f64, f64) {
    let half = (a - b) / 2.0;
    (
        (a + b) / 2.0,
        ((ea * ea + eb * eb) / 4.0 + half * half).sqrt(),
    )
}

/// The recorder's cost from the loop's untraced timings and its traced run's trace.
pub fn analyse(untraced: &LoopTimes, trace: &Path) -> Result<TracerCost> {
    let traced = read_traced(trace)?;
    let user_loop = median(&untraced.user_ns);
    let empty = median(&untraced.empty_syscall_ns);
    let entry_exit = empty - user_loop;
    let fault_untraced = median(&untraced.fault_ns);
    // The empty call: its kernel interval holds nothing untraced; its user interval the
    // loop's work. The read: its kernel interval holds its own work untraced (the read's
    // round trip less the entry and exit code and the loop's work), its user interval the
    // loop's work.
    let empty_kernel = mean_se(&batch_means(&traced.kernel_ns));
    let empty_user = mean_se(&batch_means(&traced.user_ns));
    let read_body = median(&untraced.read_ns) - entry_exit - user_loop;
    let (rk, rk_se) = mean_se(&batch_means(&traced.read_kernel_ns));
    let read_user = mean_se(&batch_means(&traced.read_user_ns));
    let (kernel, kernel_se) = mean_of_two(empty_kernel, (rk - read_body, rk_se));
    let (user, user_se) = mean_of_two(empty_user, read_user);
    // Each round: (traced on-CPU ns per fault - untraced ns per fault) / events per fault.
    // First touches of memory the hypervisor has not backed yet make some rounds several
    // times slower, traced or not: medians on both sides.
    let per_event: Vec<f64> = traced
        .rounds
        .iter()
        .filter(|&&(_, faults, events)| faults > 0 && events > 0)
        .map(|&(ns, faults, events)| {
            (ns / faults as f64 - fault_untraced) / (events as f64 / faults as f64)
        })
        .collect();
    let (event, event_se) = median_se(&per_event);
    // A process: its traced time on the CPU (parent and child) less the untraced time and
    // less what the figures above already charge for its syscalls and events. A syscall's
    // figures hold its entry and exit code, which the untraced run spends too.
    let call = kernel + (user - user_loop) - entry_exit;
    let process = traced
        .processes
        .as_ref()
        .filter(|p| p.processes > 0 && !untraced.process_ns.is_empty())
        .map(|p| {
            let n = p.processes as f64;
            let (alone, alone_se) = median_se(&untraced.process_ns);
            let (calls, events) = (p.syscalls as f64 / n, p.events as f64 / n);
            let figures = calls * call + events * event;
            let se = (alone_se.powi(2)
                + (calls * kernel_se).powi(2)
                + (calls * user_se).powi(2)
                + (events * event_se).powi(2))
            .sqrt();
            (
                p.on_cpu_ns as f64 / n - alone - figures,
                se,
                p,
                calls,
                events,
            )
        });
    let process_method = match &process {
        Some((ns, _, p, calls, events)) => format!(
            "; {} processes (posix_spawn of {TRUE} and wait, pinned to one CPU): {:.0} ns each on the CPU traced, {:.0} untraced, {calls:.1} syscalls and {events:.1} other events each charged by the figures above, {ns:.0} ns left per process",
            p.processes,
            p.on_cpu_ns as f64 / p.processes as f64,
            median(&untraced.process_ns)
        ),
        None => format!("; no process phase ({TRUE} missing, or none traced): no cost per process"),
    };
    Ok(TracerCost {
        syscall_kernel_ns: kernel,
        syscall_kernel_se_ns: kernel_se,
        syscall_user_ns: user - user_loop,
        syscall_user_se_ns: user_se,
        event_ns: event,
        event_se_ns: event_se,
        process_ns: process.as_ref().map_or(0.0, |p| p.0),
        process_se_ns: process.as_ref().map_or(0.0, |p| p.1),
        entry_exit_ns: entry_exit,
        user_loop_ns: user_loop,
        method: format!(
            "kharden trace calibrate-loop, untraced and under the recording's perf: {} empty syscalls (number {EMPTY_NR}) and {} 4 KiB reads of /dev/zero in {BATCHES} batches each (kernel: each call's interval less its untraced work, none for the empty call; user: the interval from one call's exit to the next's entry less the loop's own work, timed untraced by the same loop without the syscall; the two kinds averaged: empty {:.0} and {:.0} ns, read {:.0} and {:.0} ns, kernel and user side), {} rounds of {PAGES} first writes to anonymous pages (per event: the median over rounds of the traced on-CPU time per fault less the untraced median, over the events per fault); errors: over batches and from the rounds' interquartile range, with half the two kinds' difference",
            traced.kernel_ns.len(),
            traced.read_kernel_ns.len(),
            empty_kernel.0,
            empty_user.0 - user_loop,
            rk - read_body,
            read_user.0 - user_loop,
            traced.rounds.len()
        ) + &process_method,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_standard_error() {
        assert_eq!(mean_se(&[]), (0.0, 0.0));
        assert_eq!(mean_se(&[4.0]), (4.0, 0.0));
        let (m, se) = mean_se(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(m, 2.5);
        // Sample variance 5/3, over 4 values.
        assert!((se - (5.0f64 / 12.0).sqrt()).abs() < 1e-12, "{se}");
        assert_eq!(batch_means(&[1.0; 40]).len(), BATCHES);
    }
}
