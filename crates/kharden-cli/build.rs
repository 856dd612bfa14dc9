//! Sets `perf_kernel_sampling` where this machine can sample kernel instruction pointers
//! (perf runs, we are root, /proc/kallsyms shows addresses), so the footprint recorder's test
//! runs there and reports itself ignored, with the reason, elsewhere.

use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(perf_kernel_sampling)");
    println!("cargo::rerun-if-changed=build.rs");
    let perf = Command::new("perf")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(2))
            == Some("0")
    });
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").is_ok_and(|s| {
        s.lines()
            .next()
            .is_some_and(|l| !l.starts_with("0000000000000000"))
    });
    if perf && root && kallsyms {
        println!("cargo::rustc-cfg=perf_kernel_sampling");
    }
}
