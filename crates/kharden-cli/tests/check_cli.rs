//! `kharden check` on XPFO: the staged page hand-off between CPUs catches the broken
//! deferred-flush variants that single-task syscall loops cannot reach.

use std::process::Command;

fn check(defense: &str, machine: &str) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kharden")).args(["check", "--defense", defense, "--machine", machine]).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
}

fn handoff_line(out: &str) -> &str {
    out.lines().find(|l| l.contains("page-handoff")).unwrap_or("")
}

#[test]
fn check_runs_the_page_handoff_and_catches_broken_xpfo() {
    for machine in ["ivybridge-i5-3550", "haswell-i7-4770"] {
        for pti in ["", "pti:linux,"] {
            for good in ["xpfo:immediate", "xpfo:deferred", "xpfo:deferred-global", "xpfo:batched", "xpfo:batched-v8"] {
                let (code, out) = check(&format!("{pti}{good}"), machine);
                assert_eq!(code, Some(0), "{pti}{good} on {machine}: {out}");
                assert!(handoff_line(&out).ends_with("ok"), "{pti}{good} on {machine}: {out}");
            }
            for bad in ["xpfo:broken-deferred-no-switch-flush", "xpfo:broken-pending-cleared-early", "xpfo:noflush"] {
                let (code, out) = check(&format!("{pti}{bad}"), machine);
                assert_eq!(code, Some(2), "{pti}{bad} on {machine}: {out}");
                assert!(handoff_line(&out).contains("VIOLATION"), "{pti}{bad} on {machine}: {out}");
            }
        }
    }
}

#[test]
fn pti_without_pcid_hides_the_deferred_flush_hole() {
    // Without PCIDs, PTI's CR3 write at every exit to user mode drops the non-global direct
    // map, so even a deferred policy that never flushes leaves no alias behind.
    let (code, out) = check("pti:linux,xpfo:broken-deferred-no-switch-flush", "nehalem-i7-920");
    assert_eq!(code, Some(0), "{out}");
    let (code, _) = check("xpfo:broken-deferred-no-switch-flush", "nehalem-i7-920");
    assert_eq!(code, Some(2));
}
