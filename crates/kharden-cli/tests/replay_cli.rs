//! `kharden replay`: a real recorded build replayed on a profile of this host comes close to
//! what was recorded; --scale-jobs multiplies the work of make's jobs; bad traces fail cleanly.

use std::path::PathBuf;
use std::process::{Command, Output};

fn kharden(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kharden"))
        .args(args)
        .output()
        .expect("run kharden")
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kharden-replay-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn bad_traces_are_one_line_errors() {
    let d = scratch("bad");
    let garbage = d.join("garbage.trace");
    std::fs::write(&garbage, b"not a trace at all").unwrap();
    for (file, needle) in [
        (garbage.to_str().unwrap(), "garbage.trace"),
        ("/nonexistent/x.trace", "/nonexistent/x.trace"),
    ] {
        let o = kharden(&[
            "replay",
            file,
            "--machine",
            "haswell-i7-4770",
            "--host-ghz",
            "3",
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(needle), "{err}");
    }
    // An empty defense list is an error, not "no defense" (issue 18).
    let o = kharden(&[
        "replay",
        garbage.to_str().unwrap(),
        "--machine",
        "haswell-i7-4770",
        "--defense",
        "",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("--defense: empty defense name"),
        "{err}"
    );
    // A machine file that never ends is refused, not read forever.
    let o = kharden(&[
        "replay",
        garbage.to_str().unwrap(),
        "--machine",
        "/dev/zero",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("/dev/zero: machine file larger than"),
        "{err}"
    );
    let o = kharden(&[
        "replay",
        garbage.to_str().unwrap(),
        "--machine",
        "haswell-i7-4770",
        "--scale-jobs",
        "0",
    ]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("--scale-jobs"));
}

/// Run by scripts/test.sh (`--ignored perf_`) where perf records system-wide tracepoints.
#[test]
#[ignore = "needs perf (system-wide tracepoints, as root), gcc and make"]
fn perf_replays_a_recorded_make() {
    let perf_ok = Command::new("perf")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let gcc_ok = Command::new("gcc").arg("--version").output().is_ok();
    let make_ok = Command::new("make").arg("--version").output().is_ok();
    assert!(
        perf_ok && gcc_ok && make_ok,
        "perf_replays_a_recorded_make cannot run here: needs perf, gcc and make"
    );
    let d = scratch("make");
    for i in 0..4 {
        std::fs::write(
            d.join(format!("f{i}.c")),
            format!("int f{i}(int x) {{ return x * {i} + 1; }}\n"),
        )
        .unwrap();
    }
    std::fs::write(
        d.join("Makefile"),
        "all: f0.o f1.o f2.o f3.o\n%.o: %.c\n\tgcc -O2 -c $< -o $@\n",
    )
    .unwrap();
    let trace = d.join("make.trace");
    let o = Command::new(env!("CARGO_BIN_EXE_kharden"))
        .args([
            "record",
            "-o",
            trace.to_str().unwrap(),
            "--",
            "make",
            "-j2",
            "-C",
            d.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "record failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let host = d.join("host.toml");
    let o = kharden(&["machines", "detect"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::write(&host, &o.stdout).unwrap();
    let t = trace.to_str().unwrap();
    let once = json(&kharden(&[
        "replay",
        t,
        "--machine",
        host.to_str().unwrap(),
        "--json",
    ]));
    let rec = &once["recorded"];
    let sim = &once["simulated"];
    let (ru, su) = (
        rec["user_ns"].as_f64().unwrap() / 1e9,
        sim["user_s"].as_f64().unwrap(),
    );
    // make, four shells or compilers and what they run: every recorded fork is replayed.
    assert!(rec["forks"].as_u64().unwrap() >= 8, "{rec}");
    assert_eq!(
        once["stats"]["counters.forks"].as_u64(),
        rec["forks"].as_u64(),
        "every recorded fork is replayed"
    );
    assert!(
        (su - ru).abs() / ru < 0.15,
        "user time: recorded {ru} s, replayed {su} s"
    );
    let tripled = json(&kharden(&[
        "replay",
        t,
        "--machine",
        host.to_str().unwrap(),
        "--scale-jobs",
        "3",
        "--json",
    ]));
    let su3 = tripled["simulated"]["user_s"].as_f64().unwrap();
    assert!(
        su3 > 2.4 * su && su3 < 3.3 * su,
        "three copies of each job: {su} s -> {su3} s"
    );
    std::fs::remove_dir_all(&d).ok();
}

/// Ctrl-C (SIGINT) stops a long replay promptly and leaves no scratch files (issue 18: a
/// killed replay used to leave its scratch directory behind).
#[test]
fn interrupted_replay_leaves_nothing_behind() {
    use kharden_trace::format::{Event, Meta, Op, TraceWriter};
    use std::sync::Arc;
    let d = scratch("sigint");
    let tmp = d.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let trace = d.join("long.trace");
    let f = std::io::BufWriter::new(std::fs::File::create(&trace).unwrap());
    let mut w = TraceWriter::new(f, &Meta::default()).unwrap();
    let comm: Arc<str> = Arc::from("sh");
    let mut put = |time_ns, tid, op| w.write(&Event { time_ns, tid, op }).unwrap();
    put(
        0,
        1,
        Op::TaskNew {
            pid: 1,
            parent: None,
            comm: comm.clone(),
        },
    );
    let mut t = 0;
    for i in 0..200_000u32 {
        let tid = 2 + i % 1000;
        t += 10_000;
        put(
            t,
            tid,
            Op::TaskNew {
                pid: tid,
                parent: Some(1),
                comm: comm.clone(),
            },
        );
        put(t, tid, Op::SwitchIn { cpu: 1 });
        put(t + 5_000, tid, Op::SwitchOut { state: 0x10 });
        put(t + 5_000, tid, Op::Exit);
    }
    put(t + 10_000, 1, Op::Exit);
    w.finish().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kharden"))
        .args([
            "replay",
            trace.to_str().unwrap(),
            "--machine",
            "haswell-i7-4770",
            "--host-ghz",
            "3",
        ])
        .env("TMPDIR", &tmp)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the scratch directory exists (the split has started), then interrupt.
    let start = std::time::Instant::now();
    while std::fs::read_dir(&tmp).unwrap().count() == 0 && start.elapsed().as_secs() < 20 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    let sent = std::time::Instant::now();
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert!(
        sent.elapsed().as_secs() < 5,
        "took {:?} to stop",
        sent.elapsed()
    );
    assert_eq!(status.code(), Some(130), "exit status after SIGINT");
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    let _ = std::fs::remove_dir_all(&d);
}
