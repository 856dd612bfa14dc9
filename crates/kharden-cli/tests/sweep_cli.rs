//! `kharden sweep FILE` as a user meets it: a bad file fails before any point runs, with one
//! line naming its line; a good one writes its Parquet file and a rerun skips every point.

use std::process::{Command, Output};

fn kharden(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kharden"))
        .args(args)
        .output()
        .expect("run kharden")
}

const FILE: &str = r#"
[grid]
machine = ["ivybridge-i5-3550"]
defense = ["none", "pti:linux"]
workload = [{ name = "syscall-loop", iterations = 1000 }]
"#;

#[test]
fn a_bad_sweep_file_is_one_line_naming_its_line_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, FILE.replace("pti:linux", "pti:nope")).unwrap();
    let o = kharden(&["sweep", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("bad.toml: line 4: defense: unknown defense 'pti:nope'"),
        "{err}"
    );
    assert!(!dir.path().join("bad.parquet").exists());
}

#[test]
fn a_sweep_writes_its_rows_and_a_rerun_skips_them() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.toml");
    std::fs::write(&file, FILE).unwrap();
    let o = kharden(&["sweep", file.to_str().unwrap(), "--threads", "2"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("2 points: 0 already in"), "{err}");
    let out = dir.path().join("s.parquet");
    let first = std::fs::read(&out).unwrap();
    let o = kharden(&["sweep", file.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("2 already in") && err.contains("0 ran"),
        "{err}"
    );
    assert_eq!(std::fs::read(&out).unwrap(), first);
}
