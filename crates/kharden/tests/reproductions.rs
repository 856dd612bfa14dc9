//! Every reproduction row within its tolerance, unless its experiment file records a known
//! miss with the reason; a known miss must still miss, so fixing the model forces the file
//! (and the reported findings) to be updated.

use kharden::experiment;

fn check(name: &str, max_fitted: u32) -> kharden::report::Reproduction {
    let rep = experiment::reproduce(name, &Default::default()).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        rep.fitted_parameters <= max_fitted,
        "{name}: {} fitted parameters",
        rep.fitted_parameters
    );
    assert_eq!(
        rep.fitted.len() as u32,
        rep.fitted_parameters,
        "{name}: every fitted parameter is named"
    );
    // Every fitted parameter but the build's size (which scales all rows alike) fixes one
    // row, which the report marks and never counts as a prediction.
    assert_eq!(
        rep.fitted_rows() as u32,
        rep.fitted_parameters,
        "{name}: each fit marks its row"
    );
    for r in &rep.rows {
        let err = match (r.error_pct, r.difference_pp) {
            (Some(e), _) => format!("{e:+.1}%, tolerance {:?}%", r.tolerance_pct),
            (None, Some(d)) => format!("{d:+.1} pp, tolerance {:?} pp", r.tolerance_pp),
            (None, None) => panic!("{name}: \"{}\" has no target", r.label),
        };
        match &r.known_miss {
            None => assert!(!r.misses(), "{name}: \"{}\" off by {err}", r.label),
            Some(_) => assert!(
                r.misses(),
                "{name}: \"{}\" is within tolerance ({err}) but recorded as a known miss",
                r.label
            ),
        }
    }
    rep
}

#[test]
fn pti_pcid_rows() {
    let rep = check("pti-pcid", 1);
    // Each missing row that writes CR3 says what cost per write its published figure means;
    // the fitted row (no PTI, no CR3 write) says nothing.
    let implied = |label: &str| {
        rep.notes
            .iter()
            .filter(|n| n.starts_with(&format!("\"{label}\": were its CR3 writes")))
            .count()
    };
    assert_eq!(implied("PCID, PTI on"), 1);
    assert_eq!(implied("no PCID, PTI on"), 1);
    assert_eq!(implied("PCID, PTI off"), 0);
}

#[test]
fn xpfo_rows() {
    // Fewer fitted parameters than the table has rows (issue: "fewer than the rows").
    check("xpfo", 5);
}

#[test]
fn xpfo_v8_rows() {
    check("xpfo-v8", 5);
}

#[test]
fn xpfo_v9_rows() {
    check("xpfo-v9", 3);
}

#[test]
fn kvm_cr0wp_rows() {
    // 6 rows, 2 fitted (the guest's work per step and the unload cost per CR0.WP toggle).
    check("kvm-cr0wp", 2);
}

#[test]
fn text_replication_rows() {
    // Nothing fitted: every row is a prediction.
    let rep = check("text-replication", 0);
    // The published pairs the rows' known misses call inconsistent are the ones the table
    // finds so: the loops whose cold runs save less than their hot ones.
    let pairs = rep
        .breakdowns
        .iter()
        .find(|t| t.title.contains("published hot and cold gains"))
        .expect("the published-pairs table");
    let verdict = |op: &str| {
        let row = pairs.rows.iter().find(|r| r[0] == op).expect(op);
        row.last().unwrap().clone()
    };
    for op in ["open-close", "mmap-lock"] {
        assert!(
            verdict(op).starts_with("cold saves"),
            "{op}: {}",
            verdict(op)
        );
    }
    for op in ["mmap-munmap", "kill", "mount"] {
        assert_eq!(verdict(op), "consistent", "{op}");
    }
    assert!(verdict("fork-1").starts_with("not checked"));
}

#[test]
fn evict_fault_rows() {
    // 12 rows, 2 fitted (the recording host's LLC and DRAM miss overlaps).
    check("evict-fault", 2);
}

#[test]
fn asi_rows() {
    // Nothing fitted; each mechanism row judged by what it adds over its baseline row.
    let rep = check("asi", 0);
    assert!(rep
        .rows
        .iter()
        .any(|r| r.unit == "% added" && r.difference_pp.is_some()));
    assert!(
        rep.notes.iter().any(|n| n.starts_with("not modelled")),
        "the guest build is reported as not modelled"
    );
}
