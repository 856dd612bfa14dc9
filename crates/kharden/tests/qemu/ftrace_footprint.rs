//! The traced footprint (scripts/kernel_ftrace/): Debian's 6.1 kernel under qemu runs the
//! syscall scenario of the footprint driver with ftrace's function tracer on, and the
//! summary it gives parses and lists each syscall's handler once per call. Needs
//! qemu-system-x86_64, Debian's linux-image-6.1.0-*-amd64 in /boot, busybox-static and a
//! release build of kharden (the guest runs it); scripts/test.sh runs it where they are.

use kharden::kernel::footprints::traced::TracedFootprints;
use std::path::Path;
use std::process::Command;

#[test]
#[ignore = "needs qemu-system-x86_64, Debian's linux-image-6.1.0-*-amd64 in /boot, busybox-static and target/release/kharden (about 3 min)"]
fn qemu_ftrace_lists_each_syscall_handler_once_per_call() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = std::env::temp_dir().join(format!("kharden-ftrace-{}", std::process::id()));
    let file = out.join("traced.toml");
    // The run takes 2-5 minutes; a guest that has not finished in 15 has stopped making
    // progress (TCG hangs were seen with a host thread per vCPU, before run.sh ran both
    // vCPUs in one: no console output after boot, or a soft lockup run.sh ends).
    let run = Command::new("bash")
        .arg(root.join("scripts/kernel_ftrace/run.sh"))
        .arg(&out)
        .arg("0.001")
        .env("SCENARIOS", "syscalls")
        .env("GUEST_TIMEOUT", "900")
        .status()
        .expect("bash runs");
    assert!(
        run.code() != Some(124),
        "the guest did not finish in 900 s (see {}/console.txt)",
        out.display()
    );
    assert!(run.success(), "run.sh failed");
    let summary = Command::new("python3")
        .arg(root.join("scripts/kernel_ftrace/summarize.py"))
        .arg(&out)
        .arg(&file)
        .status()
        .expect("python3 runs");
    assert!(summary.success(), "summarize.py failed");
    let text = std::fs::read_to_string(&file).unwrap();
    let _ = std::fs::remove_dir_all(&out);
    let t = TracedFootprints::parse("traced.toml", &text).unwrap();
    for (path, handler) in [
        ("getppid", "__do_sys_getppid"),
        ("lseek", "ksys_lseek"),
        ("getrusage", "getrusage"),
    ] {
        let p = t.path(path).unwrap_or_else(|| panic!("{path} not traced"));
        assert!(p.ops > 0, "{path}: no operations");
        let calls = p
            .functions
            .iter()
            .find(|f| f.name() == handler)
            .unwrap_or_else(|| panic!("{path}: {handler} not traced"))
            .3;
        assert_eq!(calls, p.ops, "{path}: {handler} once per call");
    }
}
