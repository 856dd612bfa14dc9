//! Tests that need the cross tools: the functional tests on arm64 under qemu-user, and the
//! check that the checked-in instruction traces (model/*.trace) are what the current C code
//! compiles to. They are ignored with their reason and named cross_*: scripts/test.sh installs
//! the tools (gcc-aarch64-linux-gnu, binutils-aarch64-linux-gnu, qemu-user) and runs them
//! with `--ignored cross_` where they are present.

use kharden_refcount::gen::{self, Isa};
use std::process::Command;

fn skip(test: &str, why: &str) {
    println!("SKIPPED {test}: {why}");
    eprintln!("SKIPPED {test}: {why}");
}

/// An ignored test asked to run without its tools fails, naming what is missing.
fn require_tools(isa: Isa, test: &str) {
    if let Some(why) = gen::missing_tools(isa) {
        panic!("{test} cannot run here: {why}");
    }
}

#[test]
#[ignore = "needs qemu-user and the aarch64 cross tools: scripts/test.sh runs it where they are installed"]
fn cross_arm64_functional_tests_under_qemu() {
    require_tools(Isa::Arm64, "cross_arm64_functional_tests_under_qemu");
    let dir =
        std::env::temp_dir().join(format!("kharden-refcount-selftest-{}", std::process::id()));
    let exe = gen::build_static(Isa::Arm64, &dir, true).expect("cross build");
    // -cpu max: an ARMv8.x CPU model with LSE, so both the LL/SC and the LSE forms run.
    let out = Command::new("qemu-aarch64")
        .args(["-cpu", "max"])
        .arg(&exe)
        .args(["4", "20000"])
        .output()
        .expect("qemu-aarch64");
    let stdout = String::from_utf8_lossy(&out.stdout);
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "arm64 functional tests failed under qemu"
    );
    for v in ["arm64-llsc", "arm64-lse"] {
        for i in ["atomic_t", "fast", "full", "fetch_add"] {
            assert!(
                stdout
                    .lines()
                    .any(|l| l.starts_with(i) && l.contains(v) && l.ends_with("ok")),
                "{i} {v} did not pass"
            );
        }
    }
}

fn check_trace(isa: Isa, name: &str) {
    require_tools(isa, name);
    let fresh = gen::generate(isa).expect("trace generation");
    let path = gen::checked_in_path(isa);
    if std::env::var_os("KHARDEN_REGENERATE").is_some() {
        std::fs::write(&path, &fresh).expect("write trace");
        println!("wrote {}", path.display());
        return;
    }
    let old = std::fs::read_to_string(&path).unwrap_or_default();
    // A different compiler legitimately produces different code: the checked-in traces
    // stay what they say they are (their header names the compiler); only the same
    // compiler producing different code means the C changed without regenerating.
    let compiler = |t: &str| {
        t.lines()
            .find(|l| l.starts_with("# compiler:"))
            .map(str::to_string)
    };
    if compiler(&old) != compiler(&fresh) {
        return skip(
            name,
            &format!(
                "traces were made by {:?}, this host has {:?}",
                compiler(&old),
                compiler(&fresh)
            ),
        );
    }
    assert!(
        old == fresh,
        "{} is stale: the C code or the compiler changed. Regenerate with KHARDEN_REGENERATE=1 cargo test -p kharden-refcount --test cross -- --ignored cross_",
        path.display()
    );
}

#[test]
#[ignore = "needs qemu-user and the aarch64 cross tools: scripts/test.sh runs it where they are installed"]
fn cross_arm64_trace_is_current() {
    check_trace(Isa::Arm64, "cross_arm64_trace_is_current");
}

#[test]
#[ignore = "needs qemu-user and the aarch64 cross tools: scripts/test.sh runs it where they are installed"]
fn cross_x86_64_trace_is_current() {
    check_trace(Isa::X86_64, "cross_x86_64_trace_is_current");
}
