use super::*;

const SMALL: &str = r#"
[grid]
machine = ["ivybridge-i5-3550"]
defense = ["none", "pti:linux"]
workload = [{ name = "syscall-loop", iterations = 2000 }]
set = { "kernel.irq_path_cycles" = [300, 374] }

[[point]]
machine = "xeon-platinum-8160"
cpus = 8
defense = "pti:linux,nopcid"
workload = { name = "syscall-loop", syscall = "getpid", iterations = 1000 }
"#;

fn parse(text: &str) -> Result<Sweep> {
    Sweep::parse("s.toml", text, &Overrides::default(), &[])
}

fn err(text: &str) -> String {
    match parse(text) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn grid_is_the_product_then_the_listed_points() {
    let s = parse(SMALL).unwrap();
    assert_eq!(s.points.len(), 5);
    assert_eq!(s.points[4].machine.threads(), 8);
    let keys: Vec<String> = s.points.iter().map(|p| p.point.key()).collect();
    assert!(keys[1].ends_with("kernel.irq_path_cycles=374"), "{keys:?}");
    assert_eq!(s.points[1].params.num("kernel.irq_path_cycles"), 374.0);
}

#[test]
fn rows_do_not_depend_on_the_thread_count() {
    let s = parse(SMALL).unwrap();
    let one = run_all(&s, 1, &[]);
    let two = run_all(&s, 3, &[]);
    assert_eq!(one, two);
    assert!(one.iter().all(|r| r.error().is_none()));
    // PTI costs something on every syscall: the rows measure, they are not copies.
    let ns = |r: &Record| match r.get("ns_per_iteration") {
        Some(Cell::Float(v)) => *v,
        other => panic!("{other:?}"),
    };
    assert!(ns(&one[2]) > ns(&one[0]));
    assert!(one[0].get("counters.syscalls").is_some() || one[0].cells.len() > 20);
}

#[test]
fn unknown_names_are_rejected_with_their_line() {
    let bad_machine = SMALL.replace("\"ivybridge-i5-3550\"", "\"no-such-box\"");
    assert!(
        err(&bad_machine).starts_with("s.toml: line 3: machine:"),
        "{}",
        err(&bad_machine)
    );
    let bad_defense = SMALL.replace("\"pti:linux\"]", "\"pti:nope\"]");
    assert!(
        err(&bad_defense).starts_with("s.toml: line 4: defense: unknown defense 'pti:nope'"),
        "{}",
        err(&bad_defense)
    );
    let bad_path = SMALL.replace("kernel.irq_path_cycles", "kernel.no_such");
    assert!(
        err(&bad_path).starts_with("s.toml: line 6: set: unknown parameter 'kernel.no_such'"),
        "{}",
        err(&bad_path)
    );
    let bad_value = SMALL.replace("[300, 374]", "[300, -1]");
    assert!(
        err(&bad_value).starts_with("s.toml: line 6: "),
        "{}",
        err(&bad_value)
    );
    let bad_workload = SMALL.replace("syscall = \"getpid\"", "syscall = \"nosuch\"");
    assert!(
        err(&bad_workload).starts_with("s.toml: line 12: workload: syscall: unknown syscall"),
        "{}",
        err(&bad_workload)
    );
    let bad_option = SMALL.replace("iterations = 2000", "jobs = 4");
    assert!(
        err(&bad_option).starts_with("s.toml: line 5: workload: syscall-loop: option jobs"),
        "{}",
        err(&bad_option)
    );
    let bad_cpus = SMALL.replace("cpus = 8", "cpus = 7");
    assert!(
        err(&bad_cpus).starts_with("s.toml: line 10: cpus:"),
        "{}",
        err(&bad_cpus)
    );
    let bad_machine_path = SMALL.replace("kernel.irq_path_cycles", "machine.costs.no_such");
    assert!(
        err(&bad_machine_path).starts_with("s.toml: line 6: set: "),
        "{}",
        err(&bad_machine_path)
    );
    let unknown_key = SMALL.replace("[[point]]", "[[point]]\nbogus = 1");
    assert!(
        err(&unknown_key).starts_with("s.toml: line 8: unknown field `bogus`"),
        "{}",
        err(&unknown_key)
    );
    assert!(err("").contains("no points"));
    let twice = SMALL.replace("[\"none\", \"pti:linux\"]", "[\"none\", \"none\"]");
    assert!(err(&twice).contains("repeats point 0"), "{}", err(&twice));
}

#[test]
fn a_failing_point_records_its_error_and_the_others_run() {
    // jobs are checked before the run; an oracle violation happens during it: the broken
    // PTI variant leaks kernel mappings to user mode.
    let text = r#"
[grid]
machine = ["ivybridge-i5-3550"]
defense = ["none", "pti:broken-user-maps-kernel"]
workload = [{ name = "syscall-loop", iterations = 500 }]
"#;
    let s = parse(text).unwrap();
    let rows = run_all(&s, 2, &[]);
    assert!(rows[0].error().is_none());
    assert!(rows[1].error().is_some(), "{:?}", rows[1]);
}

#[test]
fn parquet_round_trips_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.parquet");
    let s = parse(SMALL).unwrap();
    let first = run_to_file(&s, &out, Options::default(), &[], &mut |_, _| {}).unwrap();
    assert_eq!((first.ran, first.skipped, first.failed), (5, 0, 0));
    let (rows, meta) = read(&out).unwrap();
    assert_eq!(rows, run_all(&s, 1, &[]));
    assert!(meta
        .iter()
        .any(|(k, v)| k == "kharden.version" && !v.is_empty()));
    let bytes = std::fs::read(&out).unwrap();
    // Resumed with one more point: only that one runs, and the file holds all six.
    let more = SMALL.replace("[300, 374]", "[300, 374, 400]");
    let s2 = parse(&more).unwrap();
    let second = run_to_file(&s2, &out, Options::default(), &[], &mut |_, _| {}).unwrap();
    assert_eq!((second.ran, second.skipped), (2, 5));
    assert_eq!(read(&out).unwrap().0.len(), 7);
    // Nothing left to do: the file is rewritten identically.
    let s1 = parse(SMALL).unwrap();
    std::fs::write(&out, &bytes).unwrap();
    let third = run_to_file(&s1, &out, Options::default(), &[], &mut |_, _| {}).unwrap();
    assert_eq!(third.ran, 0);
    assert_eq!(std::fs::read(&out).unwrap(), bytes);
    // Other base parameters: refused, not mixed.
    let other = Overrides::parse(&["kernel.irq_path_cycles=310".to_string()]).unwrap();
    let s3 = Sweep::parse("s.toml", SMALL, &other, &[]).unwrap();
    let e = run_to_file(&s3, &out, Options::default(), &[], &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("cannot resume"), "{e}");
}

#[test]
fn rows_cross_processes_exactly() {
    let r = Record {
        key: "k".into(),
        cells: vec![
            ("key".into(), Cell::Text("k".into())),
            ("b".into(), Cell::Float(0.011575718585394603)),
            ("a".into(), Cell::Int(-3)),
            ("n".into(), Cell::Float(f64::NAN)),
        ],
    };
    let text = r.to_json().to_string();
    let back = Record::from_json(&serde_json::from_str(&text).unwrap()).unwrap();
    assert_eq!(back.cells[..3], r.cells[..3]);
    assert!(matches!(back.cells[3].1, Cell::Float(f) if f.is_nan()));
}

/// Every workload `kharden run` takes is a sweep workload, and a point's figure is the one
/// a direct run of the same options gives (the name decides the run: a kernel-op point once
/// ran a kbuild).
#[test]
fn kernel_op_and_ssdd_points_run_what_they_name() {
    let text = r#"
[grid]
machine = ["xeon-e5-2690v3-2s"]
defense = ["pti:linux", "pti:linux,text-repl"]
workload = [{ name = "kernel-op", op = "kill", caches = "cold", node = 1 }]

[[point]]
machine = "skylake-i7-6700k"
workload = { name = "ssdd", mmu = "legacy" }

[[point]]
machine = "skylake-i7-6700k"
workload = { name = "ssdd", mmu = "legacy", kvm_variant = "keep-roots" }
"#;
    let s = parse(text).unwrap();
    let rows = run_all(&s, 2, &[]);
    assert!(rows.iter().all(|r| r.error().is_none()), "{rows:?}");
    let f = |r: &Record, c: &str| match r.get(c) {
        Some(Cell::Float(v)) => *v,
        other => panic!("{c}: {other:?}"),
    };
    let m = crate::machine::load("xeon-e5-2690v3-2s").unwrap();
    let mut k = crate::kernel::Kernel::boot(m, crate::defense::parse_list("pti:linux").unwrap());
    use crate::workload::kernel_ops::{run, Caches, Op};
    let direct = run(&mut k, Op::Kill, Caches::Cold, 1, false).unwrap();
    assert_eq!(f(&rows[0], "seconds"), direct.elapsed.secs());
    assert!(
        f(&rows[1], "seconds") < f(&rows[0], "seconds"),
        "replication speeds up a cold kill on node 1"
    );
    // Without the patch every CR0.WP toggle resets the MMU; keep-roots does not.
    assert!(f(&rows[2], "kvm_mmu_per_step.resets") > 0.0);
    assert!(f(&rows[3], "seconds") < f(&rows[2], "seconds"));
    assert!(
        rows[2].get("counters.syscalls").is_none(),
        "no kernel stats for the path model"
    );
}

#[test]
fn kernel_op_and_ssdd_options_are_checked_before_anything_runs() {
    let point = |machine: &str, defense: &str, workload: &str| {
        format!(
            "[[point]]\nmachine = \"{machine}\"\ndefense = \"{defense}\"\nworkload = {workload}\n"
        )
    };
    let e = err(&point(
        "haswell-i7-4770",
        "none",
        "{ name = \"kernel-op\", node = 1 }",
    ));
    assert!(
        e.starts_with(
            "s.toml: line 4: workload: kernel-op: node: haswell-i7-4770 has nodes 0 to 0"
        ),
        "{e}"
    );
    let e = err(&point(
        "haswell-i7-4770",
        "none",
        "{ name = \"kernel-op\", vcpus = 2 }",
    ));
    assert!(
        e.contains("option vcpus is not one of op, caches, node"),
        "{e}"
    );
    let e = err(&point("skylake-i7-6700k", "pti:linux", "\"ssdd\""));
    assert!(
        e.starts_with("s.toml: line 3: defense: 'pti:linux': an ssdd point"),
        "{e}"
    );
    let e = err(&point(
        "skylake-i7-6700k",
        "none",
        "{ name = \"ssdd\", guest_model = \"kernel\", mmu = \"shadow\" }",
    ));
    assert!(
        e.contains("workload: ssdd: mmu: the kernel-model guest"),
        "{e}"
    );
    let e = err(&point("atom-c2750", "none", "\"ssdd\""));
    assert!(e.contains("no hardware virtualization"), "{e}");
}

#[test]
fn a_syscall_loop_point_runs_in_a_guest_with_its_options() {
    let text = r#"
[grid]
machine = ["haswell-i7-4770"]
defense = ["pti:freebsd,nopcid"]
workload = [
  { name = "syscall-loop", iterations = 2000 },
  { name = "syscall-loop", iterations = 2000, virt = "kvm", ept_page = "4k" },
]
"#;
    let rows = run_all(&parse(text).unwrap(), 1, &[]);
    let get = |r: &Record, c: &str| match r.get(c) {
        Some(Cell::Float(v)) => *v,
        Some(Cell::Int(v)) => *v as f64,
        other => panic!("{c}: {other:?}"),
    };
    assert_eq!(get(&rows[0], "counters.ept_walks"), 0.0);
    assert!(get(&rows[1], "counters.ept_walks") > 0.0, "{:?}", rows[1]);
    assert!(get(&rows[1], "ns_per_iteration") > get(&rows[0], "ns_per_iteration"));
    let e = err(&text.replace(", virt = \"kvm\"", ""));
    assert!(
        e.contains("workload: syscall-loop: ept_page: applies to a loop in a guest"),
        "{e}"
    );
}
