//! `kharden validate -- CMD`: a command that fails or runs past the bound is refused with a
//! one-line error before anything is recorded (that part needs no perf); bad flags too.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn kharden(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kharden"))
        .args(args)
        .output()
        .expect("run kharden")
}

fn refused(o: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "accepted: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(needle), "wanted '{needle}' in: {err}");
}

#[test]
fn a_failing_command_is_refused() {
    let o = kharden(&["validate", "--runs", "1", "--", "sh", "-c", "exit 3"]);
    refused(
        &o,
        "'sh -c exit 3' failed (exit status: 3) in untraced run 0",
    );
    let o = kharden(&["validate", "--runs", "1", "--", "/nonexistent/cmd"]);
    refused(&o, "cannot run '/nonexistent/cmd'");
}

#[test]
fn a_command_past_the_bound_is_refused_and_killed() {
    let start = Instant::now();
    let o = kharden(&[
        "validate",
        "--runs",
        "1",
        "--timeout",
        "0.5",
        "--",
        "sleep",
        "30",
    ]);
    refused(
        &o,
        "'sleep 30' ran past 0.5 s (--timeout) in untraced run 0: refused",
    );
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "the command was not killed at the bound: {:?}",
        start.elapsed()
    );
}

#[test]
fn bad_flags_are_one_line_errors() {
    for (args, needle) in [
        (
            &["validate", "--timeout", "0", "--", "true"][..],
            "--timeout: expected seconds in (0, 86400], got 0",
        ),
        (
            &["validate", "--timeout", "nan", "--", "true"][..],
            "--timeout",
        ),
        (&["validate", "--runs", "0", "--", "true"][..], "--runs"),
    ] {
        let o = kharden(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} accepted");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// Why perf cannot record here, or None if it can.
fn perf_unusable() -> Option<String> {
    match Command::new("perf").arg("--version").output() {
        Err(_) => Some("perf is not installed (apt-get install linux-perf)".into()),
        Ok(o) if !o.status.success() => Some(format!(
            "perf does not run: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Ok(_) => None,
    }
}

/// Run by scripts/test.sh (`--ignored perf_`) where perf records system-wide tracepoints:
/// validate of a short dd prints the untraced run, the recording and the replay side by
/// side; the replay ran dd's reads and writes as calls on /dev/zero and /dev/null; and every
/// figure outside the bound has a reason.
#[test]
#[ignore = "needs perf (system-wide tracepoints, as root)"]
fn perf_validate_sets_the_replay_beside_the_untraced_run() {
    if let Some(why) = perf_unusable() {
        panic!("perf_validate_sets_the_replay_beside_the_untraced_run cannot run here: {why}");
    }
    let o = kharden(&[
        "validate",
        "--runs",
        "2",
        "--sampled-runs",
        "1",
        "--",
        "dd",
        "if=/dev/zero",
        "of=/dev/null",
        "bs=4k",
        "count=20000",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for row in [
        "untraced ",
        "as traced ",
        "recording, its cost removed ",
        "replay against untraced ",
    ] {
        assert!(
            out.lines().any(|l| l.starts_with(row)),
            "no '{row}' row: {out}"
        );
    }
    // The recording holds dd's 20000 reads and writes ("recorded: ..., N syscalls (...").
    let syscalls: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("recorded: "))
        .and_then(|l| l.split(", ").find(|f| f.contains(" syscalls (")))
        .and_then(|f| f.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(syscalls >= 40000, "{out}");
    let verdict = out
        .lines()
        .find(|l| l.starts_with("verdict: "))
        .expect("a verdict");
    if let Some(list) = verdict
        .strip_prefix("verdict: outside 25% on ")
        .and_then(|r| r.strip_suffix("; why:"))
    {
        for figure in list.split(", ") {
            assert!(
                out.lines()
                    .any(|l| l.starts_with(&format!("  - {figure}: "))),
                "{figure} is outside the bound and no line says why: {out}"
            );
        }
    } else {
        assert!(verdict.starts_with("verdict: within 25%"), "{verdict}");
    }
}
