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
