//! Issue 57: a recording's overhead correction. A synthetic trace whose every interval holds
//! a known recorder cost (so much per syscall on each side, so much per other event) must
//! split into the untraced intervals it was made from.

use super::{root_program, split, Recorded, UserTotal};
use crate::format::{
    CpuSamples, Event, Meta, Op as T, TraceWriter, TracerCost, Untraced, UntracedRun,
};
use kharden::sim::Pcg32;
use kharden::workload::program::Op;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The untraced program: `CALLS` getpid calls, each after `USER_NS` of user work and taking
/// `KERNEL_NS` in the kernel; every `PREEMPT_EVERY`th user interval is also cut by a switch
/// out and back in (one more recorded event).
const CALLS: u64 = 200;
const USER_NS: u64 = 1500;
const KERNEL_NS: u64 = 300;
const PREEMPT_EVERY: u64 = 10;
/// The recorder's cost per call on the user and the kernel side, and per other event.
const TRACER_USER_NS: u64 = 500;
const TRACER_KERNEL_NS: u64 = 400;
const TRACER_EVENT_NS: u64 = 200;

fn tracer() -> TracerCost {
    TracerCost {
        syscall_kernel_ns: TRACER_KERNEL_NS as f64,
        syscall_kernel_se_ns: 0.0,
        syscall_user_ns: TRACER_USER_NS as f64,
        syscall_user_se_ns: 0.0,
        event_ns: TRACER_EVENT_NS as f64,
        event_se_ns: 0.0,
        process_ns: 0.0,
        process_se_ns: 0.0,
        entry_exit_ns: 0.0,
        user_loop_ns: 0.0,
        method: "synthetic".into(),
    }
}

/// The program as a recording sees it: every interval stretched by the recorder's cost.
fn write_traced(path: &Path, meta: &Meta) {
    let mut events = Vec::new();
    let mut put = |time_ns, op| events.push((time_ns, op));
    put(
        0,
        T::TaskNew {
            pid: 10,
            parent: None,
            comm: Arc::from("loop"),
        },
    );
    put(0, T::SwitchIn { cpu: 0 });
    let mut t = 0;
    for i in 0..CALLS {
        t += USER_NS + TRACER_USER_NS;
        if i % PREEMPT_EVERY == 0 {
            // Off the CPU for 5 µs in the middle of the user work.
            put(t - USER_NS / 2, T::SwitchOut { state: 0 });
            t += 5000;
            put(t - USER_NS / 2, T::SwitchIn { cpu: 0 });
            t += TRACER_EVENT_NS;
        }
        put(t, T::sys_enter(39));
        t += KERNEL_NS + TRACER_KERNEL_NS;
        put(t, T::sys_exit(39, 10));
    }
    put(t, T::Exit);
    write_task(path, meta, (39, "getpid"), events);
}

/// A trace of one task (tid 10) whose syscall `nr` is named `name`: `events` in order.
fn write_task(path: &Path, meta: &Meta, (nr, name): (u32, &str), events: Vec<(u64, T)>) {
    let f = std::io::BufWriter::new(File::create(path).unwrap());
    let mut w = TraceWriter::new(f, meta).unwrap();
    w.set_syscall_name(nr, name);
    for (time_ns, op) in events {
        w.write(&Event {
            time_ns,
            tid: 10,
            op,
        })
        .unwrap();
    }
    w.finish().unwrap();
}

fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("kharden-correction-{}-{name}", std::process::id()));
    std::fs::create_dir_all(dir.join("ops")).unwrap();
    dir
}

/// The split's figures and the user cycles its operations replay (at 1 cycle per ns).
fn split_and_read(name: &str, meta: &Meta) -> (Recorded, f64) {
    let dir = scratch(name);
    let trace = dir.join("t.trace");
    write_traced(&trace, meta);
    let paths = &kharden::kernel::paths::recording::Recording::committed().paths;
    let s = split(&trace, &dir.join("ops"), paths).unwrap();
    let mut program = root_program(&s, paths.clone(), 1.0, 1);
    let mut rng = Pcg32::new(1, 1);
    let mut user_cycles = 0.0;
    loop {
        match program.next(&mut rng) {
            Op::User { cycles, .. } => user_cycles += cycles,
            Op::Exit => break,
            _ => {}
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    (s.recorded, user_cycles)
}

fn close(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= 1e-6 * want.max(1.0),
        "{what}: got {got}, want {want}"
    );
}

#[test]
fn a_known_per_event_cost_gives_back_the_untraced_intervals() {
    let meta = Meta {
        tracer: Some(tracer()),
        ..Meta::default()
    };
    let (rec, user_cycles) = split_and_read("measured", &meta);
    let events = CALLS / PREEMPT_EVERY;
    close(
        rec.traced_user_ns,
        (CALLS * (USER_NS + TRACER_USER_NS) + events * TRACER_EVENT_NS) as f64,
        "user time as traced",
    );
    close(
        rec.user_ns,
        (CALLS * USER_NS) as f64,
        "user time, corrected",
    );
    close(
        user_cycles,
        (CALLS * USER_NS) as f64,
        "user cycles replayed",
    );
    close(
        rec.traced_system_ns,
        (CALLS * (KERNEL_NS + TRACER_KERNEL_NS)) as f64,
        "system time as traced",
    );
    close(
        rec.system_ns,
        (CALLS * KERNEL_NS) as f64,
        "system time, corrected",
    );
    assert_eq!(rec.syscalls, CALLS);
}

/// With the recording's cpu-clock samples, the user side's costs are scaled so that what is
/// left is the sampled user time (the recorder works in the kernel only): here the samples
/// say the user work was 20% more than the loop's per-event costs leave.
#[test]
fn sampled_user_time_scales_the_user_side_costs() {
    let want = (CALLS * USER_NS) as f64 * 1.2;
    let period = 100;
    let meta = Meta {
        tracer: Some(tracer()),
        cpu_samples: Some(CpuSamples {
            period_ns: period,
            user: (want / period as f64) as u64,
            kernel: 0,
        }),
        ..Meta::default()
    };
    let (rec, user_cycles) = split_and_read("sampled", &meta);
    close(rec.user_ns, want, "user time, corrected to the samples");
    close(user_cycles, want, "user cycles replayed");
    assert!(
        rec.user_scale < 1.0,
        "less of the costs came out: {}",
        rec.user_scale
    );
    close(
        rec.system_ns,
        (CALLS * KERNEL_NS) as f64,
        "system time untouched",
    );
}

/// With untraced runs beside the recording, the user side is what they spent, over what
/// the samples say and beyond the loop's per-event costs: here the traced run's samples say
/// its user work was 30% slower than the program's, and the untraced runs that the
/// program's own work is 5% less than the per-event costs leave. Their rusage puts all of
/// their CPU time in user mode (no kernel-mode tick), their sampled run splits it.
#[test]
fn untraced_runs_set_the_user_time_over_the_samples() {
    let want = (CALLS * USER_NS) as f64 * 0.95;
    let kernel = (CALLS * KERNEL_NS) as f64;
    let period = 100;
    let run = |cpu: f64| UntracedRun {
        elapsed_ns: 1_000_000,
        user_ns: cpu as u64,
        system_ns: 0,
        cpu_wait_ns: None,
    };
    let cpu = want + kernel;
    let meta = Meta {
        tracer: Some(tracer()),
        cpu_samples: Some(CpuSamples {
            period_ns: period,
            user: (want * 1.3 / period as f64) as u64,
            kernel: 0,
        }),
        untraced: Some(Untraced {
            runs: vec![run(cpu * 1.1), run(cpu), run(cpu * 0.9)],
            sampled: Some(CpuSamples {
                period_ns: period,
                user: (want / period as f64) as u64,
                kernel: (kernel / period as f64) as u64,
            }),
        }),
        ..Meta::default()
    };
    let (rec, user_cycles) = split_and_read("untraced-runs", &meta);
    assert_eq!(rec.user_total, UserTotal::UntracedRuns);
    close(rec.user_ns, want, "user time, the untraced runs' share");
    close(user_cycles, want, "user cycles replayed");
    assert!(rec.user_scale > 1.0, "more than the loop's costs came out");
    close(
        rec.sampled_user_ns.unwrap().0,
        want * 1.3,
        "the samples, kept for the report",
    );
    close(rec.system_ns, kernel, "system time untouched");
}

/// Without a measured recorder cost nothing is taken out.
#[test]
fn an_unmeasured_recorder_cost_leaves_the_intervals_as_traced() {
    let (rec, user_cycles) = split_and_read("unmeasured", &Meta::default());
    close(rec.user_ns, rec.traced_user_ns, "user time");
    close(user_cycles, rec.traced_user_ns, "user cycles replayed");
    close(rec.system_ns, rec.traced_system_ns, "system time");
}

/// A process's own recorder cost (the sampling event's side-band records of its fork,
/// comm, mappings and exit) is charged to its exec: an execve whose recorded interval holds
/// it and the exec event's cost gives back the untraced call.
#[test]
fn a_known_per_process_cost_comes_out_of_the_exec() {
    const EXECVE_NS: u64 = 50_000;
    const TRACER_PROCESS_NS: u64 = 30_000;
    let mut t = tracer();
    t.process_ns = TRACER_PROCESS_NS as f64;
    let meta = Meta {
        tracer: Some(t),
        ..Meta::default()
    };
    let dir = scratch("process");
    let trace = dir.join("t.trace");
    let end = 1000 + EXECVE_NS + TRACER_KERNEL_NS + TRACER_EVENT_NS + TRACER_PROCESS_NS;
    let comm = Arc::from("sh");
    let events = vec![
        (
            0,
            T::TaskNew {
                pid: 10,
                parent: None,
                comm,
            },
        ),
        (0, T::SwitchIn { cpu: 0 }),
        (1000, T::sys_enter(59)),
        (
            2000,
            T::Exec {
                filename: Arc::from("/bin/true"),
            },
        ),
        (end, T::sys_exit(59, 0)),
        (end, T::Exit),
    ];
    write_task(&trace, &meta, (59, "execve"), events);
    let paths = &kharden::kernel::paths::recording::Recording::committed().paths;
    let s = split(&trace, &dir.join("ops"), paths).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    close(
        s.recorded.traced_system_ns,
        (EXECVE_NS + TRACER_KERNEL_NS + TRACER_EVENT_NS + TRACER_PROCESS_NS) as f64,
        "execve as traced",
    );
    close(s.recorded.system_ns, EXECVE_NS as f64, "execve, corrected");
}
