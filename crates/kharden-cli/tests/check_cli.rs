//! `kharden check` on XPFO: the staged scenarios catch what single-task syscall loops
//! cannot reach. The page hand-off separates correct flush policies from broken ones; the
//! sibling thread shows the hole every deferred policy leaves for threads of the process
//! that received the page (Dave Hansen's review of v7 16/16), which immediate flushing closes.

use std::process::Command;

fn check(defense: &str, machine: &str) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kharden"))
        .args(["check", "--defense", defense, "--machine", machine])
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The verdict of one scenario: "ok" or "VIOLATION ...".
fn verdict<'a>(out: &'a str, scenario: &str) -> &'a str {
    out.lines()
        .find_map(|l| {
            l.split_once(&format!(" {scenario} "))
                .map(|(_, v)| v.trim())
        })
        .unwrap_or("")
}

#[test]
fn check_runs_the_scenarios_and_separates_the_policies() {
    for machine in ["ivybridge-i5-3550", "haswell-i7-4770"] {
        for pti in ["", "pti:linux,"] {
            let (code, out) = check(&format!("{pti}xpfo:immediate"), machine);
            assert_eq!(code, Some(0), "{pti}immediate on {machine}: {out}");
            assert_eq!(
                (
                    verdict(&out, "page-handoff"),
                    verdict(&out, "sibling-thread")
                ),
                ("ok", "ok"),
                "{out}"
            );
            for deferred in [
                "xpfo:deferred",
                "xpfo:deferred-global",
                "xpfo:batched",
                "xpfo:batched-v8",
            ] {
                let (code, out) = check(&format!("{pti}{deferred}"), machine);
                assert_eq!(code, Some(2), "{pti}{deferred} on {machine}: {out}");
                assert_eq!(
                    verdict(&out, "page-handoff"),
                    "ok",
                    "{pti}{deferred} on {machine}: {out}"
                );
                assert!(
                    verdict(&out, "sibling-thread").starts_with("VIOLATION"),
                    "{pti}{deferred} on {machine}: {out}"
                );
            }
            for bad in [
                "xpfo:broken-deferred-no-switch-flush",
                "xpfo:broken-pending-cleared-early",
                "xpfo:noflush",
            ] {
                let (code, out) = check(&format!("{pti}{bad}"), machine);
                assert_eq!(code, Some(2), "{pti}{bad} on {machine}: {out}");
                assert!(
                    verdict(&out, "page-handoff").starts_with("VIOLATION"),
                    "{pti}{bad} on {machine}: {out}"
                );
            }
        }
    }
}

#[test]
fn pti_without_pcid_hides_the_deferred_flush_holes() {
    // Without PCIDs, PTI's CR3 write at every exit to user mode drops the non-global direct
    // map, so even a deferred policy that never flushes leaves no alias behind.
    for d in ["xpfo:deferred", "xpfo:broken-deferred-no-switch-flush"] {
        let (code, out) = check(&format!("pti:linux,{d}"), "nehalem-i7-920");
        assert_eq!(code, Some(0), "{d}: {out}");
        let (code, _) = check(d, "nehalem-i7-920");
        assert_eq!(code, Some(2), "{d} without PTI");
    }
}

/// XPFO v5's local kunmap flush: only the scenario with two CPUs holding one kmap sees it.
#[test]
fn only_kmap_on_two_cpus_sees_the_v5_local_kunmap_flush() {
    let (code, out) = check("xpfo:broken-before-flush-kernel-range", "ivybridge-i5-3550");
    assert_eq!(code, Some(2), "{out}");
    assert!(
        verdict(&out, "kmap-two-cpus").starts_with("VIOLATION"),
        "{out}"
    );
    let violating: Vec<&str> = out.lines().filter(|l| l.contains("VIOLATION")).collect();
    assert_eq!(violating.len(), 1, "{out}");
    let (code, out) = check("xpfo:immediate", "ivybridge-i5-3550");
    assert_eq!(
        (code, verdict(&out, "kmap-two-cpus")),
        (Some(0), "ok"),
        "{out}"
    );
}

#[test]
fn all_historical_prints_each_fix_and_catches_every_bug() {
    let out = Command::new(env!("CARGO_BIN_EXE_kharden"))
        .args(["check", "--all-historical"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    for fix in [
        "Refresh CR0.WP prior to checking for emulated permission faults",
        "x86/mm/pti: Clear Global bit more aggressively",
        "flush_tlb_kernel_range() instead of __flush_tlb_one",
    ] {
        assert!(text.contains(fix), "{fix}: {text}");
    }
    assert_eq!(text.matches("caught:    yes").count(), 3, "{text}");
    // --defense or --all-historical, not both, not neither.
    for args in [
        vec!["check"],
        vec!["check", "--all-historical", "--defense", "pti:linux"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_kharden"))
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}

/// ASI: the published variants hold everywhere; the enter that keeps the full tables'
/// translations is caught wherever a page is zeroed or copied, the ephmap that leaves its
/// page mapped in the page-cache scenario; PTI next to ASI is refused in one line.
#[test]
fn check_holds_for_asi_and_catches_its_broken_variants() {
    for d in ["asi:prototype", "asi:rfcv2", "asi:pcid"] {
        let (code, out) = check(d, "haswell-i7-4770");
        assert_eq!(code, Some(0), "{d}: {out}");
        assert_eq!(verdict(&out, "page-cache-read"), "ok", "{d}: {out}");
    }
    let (code, out) = check("asi:broken-enter-keeps-tlb", "haswell-i7-4770");
    assert_eq!(code, Some(2), "{out}");
    assert!(
        verdict(&out, "mmap-locked").starts_with("VIOLATION"),
        "{out}"
    );
    let (code, out) = check("asi:broken-ephmap-leak", "haswell-i7-4770");
    assert_eq!(code, Some(2), "{out}");
    assert!(
        verdict(&out, "page-cache-read").starts_with("VIOLATION"),
        "{out}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_kharden"))
        .args(["check", "--defense", "asi,pti:linux"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("asi turns pti off") && err.lines().count() == 1,
        "{err}"
    );
}
