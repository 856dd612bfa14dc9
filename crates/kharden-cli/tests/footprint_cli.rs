//! `kharden kernel`: the footprint recorder on this host (where perf can sample the kernel;
//! ignored with the reason elsewhere), and `kernel footprint` on the committed file.

use kharden::kernel::footprints::footprint::Footprints;
use std::path::PathBuf;
use std::process::{Command, Output};

fn kharden(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kharden"))
        .args(args)
        .output()
        .expect("run kharden")
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "kharden-footprint-cli-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Records one scenario at `scale` into a scratch directory (perf, as root), parsed.
/// One recording at a time: a system-wide recording (the process scenario's) samples every
/// process on the machine, another test's driver too, whose exits it would then count.
static RECORDING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn record_scenario(scenario: &str, scale: &str) -> (PathBuf, Footprints) {
    let _one_at_a_time = RECORDING.lock().unwrap_or_else(|e| e.into_inner());
    let d = scratch(&format!("record-{scenario}"));
    let out = d.join("k.toml");
    let o = kharden(&[
        "kernel",
        "record-footprint",
        "--scenario",
        scenario,
        "--scale",
        scale,
        "--latency-repeats",
        "2",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Shown with a failing test's output: the recorder's warnings (perf lost records).
    eprint!("{}", String::from_utf8_lossy(&o.stderr));
    // This host's detected profile lies beside the file, which names it.
    let f = Footprints::load(Some(out.to_str().unwrap())).unwrap();
    assert!(d.join("k-host.toml").exists());
    assert!(f.host_profile().is_ok());
    (d, f)
}

#[test]
#[ignore = "needs perf sampling kernel IPs as root: scripts/test.sh runs it where perf records"]
fn perf_records_the_syscall_paths_of_this_kernel() {
    let (d, f) = record_scenario("syscalls", "0.05");
    let getppid = f.path("getppid").unwrap();
    assert!(getppid.samples > 100, "only {} samples", getppid.samples);
    assert!(
        getppid
            .functions
            .iter()
            .any(|u| u.name().contains("getppid") && u.samples() > 0),
        "no sampled getppid handler"
    );
    let entry = f.path("syscall-entry-exit").unwrap();
    assert!(entry
        .functions
        .iter()
        .any(|u| u.name() == "entry_SYSCALL_64" && u.samples() == 0));
    assert!(getppid.latency_ns.unwrap()[0] > 0.0);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn summary_lists_every_path_of_the_committed_file() {
    let o = kharden(&["kernel", "footprint"]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    for name in Footprints::builtin().names() {
        assert!(
            text.lines().any(|l| l.starts_with(&format!("{name} "))),
            "{name} missing:\n{text}"
        );
    }
}

#[test]
fn show_lists_a_paths_functions_and_pages() {
    let o = kharden(&["kernel", "footprint", "show", "getppid", "--lines"]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("entry_SYSCALL_64"), "{text}");
    assert!(text.contains("pages (estimated): "), "{text}");
    assert!(text.contains("lines (estimated): "), "{text}");
}

/// exit and fork take their work from latencies timed apart from the recording: both views
/// say which, and a recorded path's view does not.
#[test]
fn footprint_views_name_the_latencies_timed_apart() {
    let text = |args: &[&str]| String::from_utf8_lossy(&kharden(args).stdout).into_owned();
    let exit = text(&["kernel", "footprint", "show", "exit"]);
    assert!(exit.contains("from kernel.exit_latency_ns ="), "{exit}");
    let summary = text(&["kernel", "footprint"]);
    assert!(
        summary.contains("from kernel.fork_latency_ns ="),
        "{summary}"
    );
    let getppid = text(&["kernel", "footprint", "show", "getppid"]);
    assert!(!getppid.contains("timed apart"), "{getppid}");
}

#[test]
fn show_gives_the_recording_hosts_instrumentation_share() {
    let committed = kharden::kernel::footprints::footprint::BUILTIN;
    let f = Footprints::builtin();
    let path = f.path("open-close").unwrap();
    let o = kharden(&["kernel", "footprint", "show", "open-close"]);
    let says = |share: f64| {
        format!("the recording host's BPF programs: {share:.1}% of the path's samples")
    };
    let measured = 100.0 * path.instrumentation_share();
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(&says(measured)),
        "{measured}"
    );
    // open-close with as many samples in the host's BPF programs as in its own work.
    let own = path.samples;
    let block = committed.find("name = \"open-close\"").unwrap();
    let at = block + committed[block..].find("instrumentation = ").unwrap();
    let end = at + committed[at..].find(',').unwrap();
    let text = format!(
        "{}instrumentation = {own}{}",
        &committed[..at],
        &committed[end..]
    );
    let d = scratch("instrumentation");
    let file = d.join("k.toml");
    std::fs::write(&file, text).unwrap();
    let o = kharden(&[
        "kernel",
        "footprint",
        "--file",
        file.to_str().unwrap(),
        "show",
        "open-close",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains(&says(50.0)), "{out}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn bad_paths_and_files_are_one_line_errors() {
    let o = kharden(&["kernel", "footprint", "show", "no-such-path"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("unknown path 'no-such-path'"), "{err}");

    let d = scratch("bad");
    let bad = d.join("bad.toml");
    let text = kharden::kernel::footprints::footprint::BUILTIN.replacen(
        "text_bytes = ",
        "text_bytes = \"x\" # ",
        1,
    );
    std::fs::write(&bad, text).unwrap();
    let o = kharden(&["kernel", "footprint", "--file", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("bad.toml") && err.contains("text_bytes"),
        "{err}"
    );

    // The recorder needs its host's profile before it records anything (no perf needed to
    // get these): one it is given must load, and a detected one needs a file to sit beside.
    let out = d.join("k.toml");
    for (args, says) in [
        (
            vec![
                "--host-machine",
                "no-such-machine",
                "-o",
                out.to_str().unwrap(),
            ],
            "--host-machine: unknown machine 'no-such-machine'",
        ),
        (vec![], "--host-machine: expected with no -o"),
    ] {
        let o = kharden(&[&["kernel", "record-footprint"][..], &args].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(says), "{err}");
    }
    assert!(!out.exists());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn compare_sorts_what_the_recording_lacks_by_cause() {
    let o = kharden(&["kernel", "footprint", "compare"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("functions traced on every operation"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("fault-anon ")), "{out}");
    let o = kharden(&["kernel", "footprint", "compare", "getppid"]);
    let out = String::from_utf8_lossy(&o.stdout);
    // Inlined into syscall_exit_to_user_mode by 6.18: a version difference, not a miss.
    assert!(
        out.contains("not in the recording's kernel: exit_to_user_mode_prepare"),
        "{out}"
    );
    let o = kharden(&["kernel", "footprint", "compare", "nonesuch"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("path 'nonesuch' is not in both files"),
        "{err}"
    );
    let o = kharden(&[
        "kernel",
        "footprint",
        "compare",
        "--traced",
        "/nonexistent.toml",
    ]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("/nonexistent.toml: cannot read trace file")
    );
}

/// The process scenario is recorded on every CPU: a child's own perf events close in
/// do_exit() before exit_mm(), so only a system-wide recording sees its exit tear down the
/// address space.
#[test]
#[ignore = "needs perf sampling kernel IPs as root: scripts/test.sh runs it where perf records"]
fn perf_records_the_whole_exit_system_wide() {
    let (d, f) = record_scenario("process", "0.25");
    let exit = f.path("exit").unwrap();
    let sampled = |name: &str| {
        exit.functions
            .iter()
            .any(|u| u.name() == name && u.samples() > 0)
    };
    assert!(
        sampled("exit_mmap") && sampled("unmap_page_range"),
        "exit's {} samples miss exit_mmap's teardown",
        exit.samples
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// The scheduler's core runs with interrupts off, where no cpu-clock sample lands: the
/// recorder lists it from the source (irqs_off.rs), as the ftrace trace of 6.1 showed it
/// missing, so a context switch's recording holds the pick of the next task.
#[test]
#[ignore = "needs perf sampling kernel IPs as root: scripts/test.sh runs it where perf records"]
fn perf_the_switch_recording_lists_the_interrupts_off_scheduler() {
    let (d, f) = record_scenario("switch", "0.05");
    let switch = f.path("context-switch").unwrap();
    for name in ["pick_next_task_fair", "update_curr", "__switch_to"] {
        assert!(
            switch.functions.iter().any(|u| u.name() == name)
                || switch.missing_source.iter().any(|m| m == name),
            "{name} neither listed nor reported missing"
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}
