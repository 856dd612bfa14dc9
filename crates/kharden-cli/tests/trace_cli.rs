//! `kharden record` and `kharden trace` through the binary: a real recorded compile (an
//! ignored test, with its reason, run by scripts/test.sh where perf can record), bad traces
//! and bad flags.

use kharden_trace::format::{Event, Meta, Op, TraceWriter};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

fn kharden(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kharden"))
        .args(args)
        .output()
        .expect("run kharden")
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kharden-trace-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Asserts a failure: non-zero exit, no panic, exactly one line on stderr containing `want`.
fn fails_with(args: &[&str], want: &str) {
    let o = kharden(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{args:?} succeeded; stderr: {err}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{args:?} printed more than one line: {err}"
    );
    assert!(err.contains(want), "{args:?}: expected '{want}' in: {err}");
}

fn valid_trace(path: &Path) -> Vec<u8> {
    let meta = Meta {
        command: vec!["true".into()],
        nr_cpus: 1,
        ..Meta::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &meta).unwrap();
    w.set_syscall_name(60, "exit");
    let c: Arc<str> = Arc::from("true");
    for (t, op) in [
        (
            0,
            Op::TaskNew {
                pid: 7,
                parent: None,
                comm: c,
            },
        ),
        (1, Op::SwitchIn { cpu: 0 }),
        (2, Op::sys_enter(60)),
        (3, Op::SwitchOut { state: 0x10 }),
        (3, Op::Exit),
    ] {
        w.write(&Event {
            time_ns: t,
            tid: 7,
            op,
        })
        .unwrap();
    }
    let bytes = w.finish().unwrap().0;
    std::fs::write(path, &bytes).unwrap();
    bytes
}

#[test]
fn bad_traces_give_one_line_errors() {
    let d = scratch("bad");
    let good = d.join("good.trace");
    let bytes = valid_trace(&good);
    let o = kharden(&["trace", "stats", good.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("exit"));
    let o = kharden(&["trace", "stats", good.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("--json prints JSON");
    assert_eq!(v["syscalls_by_name"]["exit"], 1);

    let p = |n: &str| d.join(n).to_str().unwrap().to_string();
    std::fs::write(p("magic.trace"), b"#!/bin/sh\necho this is not a trace\n").unwrap();
    fails_with(
        &["trace", "stats", &p("magic.trace")],
        "not a kharden trace (bad magic",
    );

    let mut v = bytes.clone();
    v[8] = 4;
    std::fs::write(p("version.trace"), &v).unwrap();
    fails_with(
        &["trace", "stats", &p("version.trace")],
        "trace format version 4 is not supported",
    );
    // Version 1 (no checksums) is no longer read, and says what to do.
    v[8] = 1;
    std::fs::write(p("v1.trace"), &v).unwrap();
    fails_with(
        &["trace", "stats", &p("v1.trace")],
        "trace format version 1 is no longer read",
    );
    // A flipped bit is corruption, not a different trace.
    let mut flipped = bytes.clone();
    let at = flipped.len() - 4;
    flipped[at] ^= 0x10;
    std::fs::write(p("flipped.trace"), &flipped).unwrap();
    fails_with(
        &["trace", "stats", &p("flipped.trace")],
        "checksum mismatch",
    );

    std::fs::write(p("short.trace"), &bytes[..bytes.len() - 3]).unwrap();
    fails_with(&["trace", "stats", &p("short.trace")], "truncated at byte");

    let header = 18 + u32::from_le_bytes(bytes[10..14].try_into().unwrap()) as usize;
    let mut m = bytes[..header].to_vec();
    kharden_trace::format::write_raw_block(&mut m, &[0xee]);
    let first_record = header + 8;
    std::fs::write(p("malformed.trace"), &m).unwrap();
    fails_with(
        &["trace", "stats", &p("malformed.trace")],
        &format!("malformed record at byte {first_record}: unknown record type 0xee"),
    );

    fails_with(&["trace", "stats", &p("missing.trace")], "cannot read");
    fails_with(&["trace", "dump", &p("short.trace")], "truncated at byte");
    fails_with(
        &["trace", "profile", good.to_str().unwrap()],
        "no make jobs",
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn bad_flags_give_one_line_errors() {
    let help = kharden(&["trace", "--help"]);
    assert!(
        help.status.success()
            && String::from_utf8_lossy(&help.stdout).contains("Usage: kharden trace <COMMAND>")
    );
    fails_with(
        &["record", "-o", "/nonexistent/x.trace", "--", "true"],
        "/nonexistent/x.trace: cannot write here",
    );
    fails_with(
        &["record", "--", "no-such-command-kharden"],
        "command 'no-such-command-kharden' not found in PATH",
    );
    let d = scratch("exists");
    let existing = d.join("old.trace");
    std::fs::write(&existing, "precious").unwrap();
    fails_with(
        &["record", "-o", existing.to_str().unwrap(), "--", "true"],
        "already exists (use --force to overwrite it)",
    );
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "precious");
    let _ = std::fs::remove_dir_all(&d);
    fails_with(
        &["trace", "frobnicate"],
        "unrecognized subcommand 'frobnicate'",
    );
    fails_with(&["trace", "stats"], "not provided: <FILE>");
    fails_with(&["trace", "stats", "a", "b"], "unexpected argument 'b'");
    fails_with(
        &["trace", "stats", "--jsn", "x"],
        "unexpected argument '--jsn' found; a similar argument exists: '--json'",
    );
    fails_with(
        &["trace", "dump", "x", "--limit", "many"],
        "invalid value 'many' for '--limit <N>'",
    );
    fails_with(&["trace", "convert"], "not provided: <PERF_DATA>");
    fails_with(
        &["trace", "convert", "/nonexistent/perf.data"],
        "cannot open",
    );
    fails_with(&["record"], "not provided: <COMMAND>...");
    fails_with(
        &["record", "-o"],
        "a value is required for '--output <FILE>'",
    );
    fails_with(
        &["record", "--frob", "--", "true"],
        "unexpected argument '--frob'",
    );
    fails_with(
        &["record", "--mmap-pages", "3", "--", "true"],
        "invalid value '3' for '--mmap-pages <N>': expected a power of two",
    );
}

/// Everything after `--` (or from the first word that is not one of record's flags) is the
/// command, dashes and all: record's own `-o` and `--force` here belong to the command, so
/// the error is the missing command's, not the existing output's.
#[test]
fn record_takes_the_command_line_after_its_flags() {
    let d = scratch("cmdline");
    let existing = d.join("old.trace");
    std::fs::write(&existing, "precious").unwrap();
    let fresh = d.join("new.trace");
    let (fresh, existing) = (fresh.to_str().unwrap(), existing.to_str().unwrap());
    let missing = "command 'no-such-command-kharden' not found in PATH";
    fails_with(
        &[
            "record",
            "-o",
            fresh,
            "--",
            "no-such-command-kharden",
            "-o",
            existing,
            "--force",
        ],
        missing,
    );
    fails_with(
        &[
            "record",
            "-o",
            fresh,
            "no-such-command-kharden",
            "-j2",
            "--mmap-pages",
            "3",
        ],
        missing,
    );
    assert_eq!(
        std::fs::read_to_string(d.join("old.trace")).unwrap(),
        "precious"
    );
    assert!(!d.join("new.trace").exists());
    let _ = std::fs::remove_dir_all(&d);
}

/// Why perf cannot record here, or None if it can.
fn perf_unusable() -> Option<String> {
    match Command::new("perf").arg("--version").output() {
        Err(_) => return Some("perf is not installed (apt-get install linux-perf)".into()),
        Ok(o) if !o.status.success() => {
            return Some(format!(
                "perf does not run: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ))
        }
        Ok(_) => {}
    }
    None
}

/// Fails `test` with the reason where perf, or `more` (another tool it needs, if missing),
/// cannot run: scripts/test.sh runs the perf_ tests only where perf records.
fn need_perf(test: &str, more: Option<String>) {
    if let Some(why) = perf_unusable().or(more) {
        panic!("{test} cannot run here: {why}");
    }
}

/// Run by scripts/test.sh (`--ignored perf_`) where perf records system-wide tracepoints.
#[test]
#[ignore = "needs perf (system-wide tracepoints, as root) and gcc"]
fn perf_records_a_real_compile() {
    let no_gcc = Command::new("gcc").arg("--version").output().is_err();
    need_perf(
        "perf_records_a_real_compile",
        no_gcc.then(|| "gcc is not installed".into()),
    );
    let d = scratch("compile");
    let src = d.join("prog.c");
    std::fs::write(&src, "#include <stdio.h>\nint square(int x) { return x * x; }\nint main(void) { printf(\"%d\\n\", square(7)); return 0; }\n").unwrap();
    let trace = d.join("prog.trace");
    let exe = d.join("prog");
    // perf's ring buffer is shared with everything else the machine does; a run under heavy
    // load can lose events, and then the counts cannot be exact: such a run is retried.
    let mut stats = None;
    for attempt in 1..=3 {
        let o = kharden(&[
            "record",
            "--mmap-pages",
            "4096",
            "-o",
            trace.to_str().unwrap(),
            "--",
            "gcc",
            "-O2",
            "-o",
            exe.to_str().unwrap(),
            src.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "record failed: {err}");
        assert!(
            exe.exists(),
            "the compile ran under perf and produced its executable"
        );
        let o = kharden(&["trace", "stats", trace.to_str().unwrap(), "--json"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        if s["lost_events"].as_u64() == Some(0) {
            stats = Some(s);
            break;
        }
        eprintln!(
            "attempt {attempt}: perf lost {} events; recording again",
            s["lost_events"]
        );
    }
    let Some(s) = stats else {
        panic!(
            "perf lost events in every attempt (machine too busy): the counts cannot be checked"
        );
    };
    let n = |k: &str| {
        s[k].as_u64()
            .unwrap_or_else(|| panic!("{k} missing in {s}"))
    };
    let sys = |k: &str| s["syscalls_by_name"][k].as_u64().unwrap_or(0);

    // gcc runs cc1, as and collect2, which runs ld: five processes, nothing else recorded.
    let comms: Vec<&str> = s["cpu_by_comm"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c[0].as_str().unwrap())
        .collect();
    for c in ["gcc", "cc1", "as", "collect2", "ld"] {
        assert!(comms.contains(&c), "{c} missing from {comms:?}");
    }
    assert_eq!(n("processes"), 5, "{comms:?}");
    assert_eq!(n("forks"), 4);
    assert_eq!(n("execs"), 5);
    assert_eq!(n("exits"), 5);
    // Each process creation is a vfork/fork/clone syscall of its parent; each exec an execve
    // (PATH search makes failing ones too); each process ends with exit_group.
    assert_eq!(sys("vfork") + sys("fork") + sys("clone") + sys("clone3"), 4);
    assert!(sys("execve") >= 5, "execve {}", sys("execve"));
    assert_eq!(sys("exit_group"), 5);
    assert!(
        sys("write") >= 1 && sys("openat") >= 5 && sys("mmap") >= 10,
        "{}",
        s["syscalls_by_name"]
    );
    assert!(
        n("syscalls") >= 500,
        "a gcc compile and link makes hundreds of syscalls"
    );
    // Memory: cc1 and ld touch megabytes of anonymous memory; page tables, slab and the output
    // file make kernel and page-cache allocations.
    let pages = &s["pages_allocated"];
    assert!(pages["user-anon"].as_u64().unwrap_or(0) >= 256, "{pages}");
    assert!(pages["kernel"].as_u64().unwrap_or(0) >= 10, "{pages}");
    assert!(pages["page-cache"].as_u64().unwrap_or(0) >= 1, "{pages}");
    assert!(n("page_faults_user") >= 256);
    assert!(n("context_switches") >= 5 && n("cpu_ns_total") > 0);
    let _ = std::fs::remove_dir_all(&d);
}

/// Run by scripts/test.sh (`--ignored perf_`). A task's own events (its syscalls, faults,
/// page allocations and frees) happen while it runs, so a trace never shows one
/// between the task's switch-out and its next switch-in. The recording host's kernel leaves
/// most switches out of the idle task untraced (a command woken from sleep onto an idle CPU
/// comes back with no switch-in): the conversion switches such a task in at its first event
/// back, and this checks it did, on a command that sleeps twenty times.
#[test]
#[ignore = "needs perf (system-wide tracepoints, as root)"]
fn perf_a_task_runs_whenever_its_own_events_happen() {
    need_perf("perf_a_task_runs_whenever_its_own_events_happen", None);
    let d = scratch("sleeper");
    let trace = d.join("sleeper.trace");
    let script = "for i in $(seq 20); do sleep 0.005; cat /proc/self/stat > /dev/null; done";
    let o = kharden(&[
        "record",
        "--no-calibrate",
        "-o",
        trace.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        script,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = kharden(&["trace", "dump", trace.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dump = String::from_utf8_lossy(&o.stdout);
    let mut running = std::collections::HashMap::new();
    let mut own_events = 0;
    for line in dump.lines().skip(1) {
        let mut f = line.split_whitespace();
        let (Some(_t), Some(tid), Some(op)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        match op {
            "SwitchIn" => {
                running.insert(tid.to_string(), true);
            }
            "SwitchOut" => {
                running.insert(tid.to_string(), false);
            }
            // (Not TlbFlush: the flush on a task switch comes after the switch-out, in the
            // previous task's context.)
            "SysEnter" | "SysExit" | "PageFault" | "PageAlloc" | "PageFree" => {
                own_events += 1;
                assert_eq!(
                    running.get(tid),
                    Some(&true),
                    "task {tid} has an event while switched out: {line}"
                );
            }
            _ => {}
        }
    }
    assert!(own_events > 100, "{own_events} events: {dump:.2000}");
    let _ = std::fs::remove_dir_all(&d);
}

/// A perf.data with zstd-compressed records (`perf record -z`) is refused in one line that
/// says what to do, unless kharden was built with the zstd feature, which reads it.
#[test]
#[ignore = "needs perf (system-wide tracepoints, as root)"]
fn perf_a_compressed_perf_data_is_refused_or_read() {
    need_perf("perf_a_compressed_perf_data_is_refused_or_read", None);
    let d = scratch("compressed");
    let data = d.join("perf.data");
    let recorded = Command::new("perf")
        .args(["record", "-z", "-q", "-a", "-o", data.to_str().unwrap()])
        .args(["-e", "sched:sched_switch", "-e", "sched:sched_process_fork"])
        .args(["--", "sleep", "0.05"])
        .status()
        .expect("perf runs");
    assert!(recorded.success(), "perf record -z failed");
    let out = d.join("out.trace");
    let args = [
        "trace",
        "convert",
        data.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    if cfg!(feature = "zstd") {
        // Read: whatever else it says of a recording this bare, not that it cannot parse it.
        let o = kharden(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !err.contains("perf record -z") && !err.contains("cannot parse"),
            "{err}"
        );
    } else {
        fails_with(&args, "written with `perf record -z`");
    }
    let _ = std::fs::remove_dir_all(&d);
}
