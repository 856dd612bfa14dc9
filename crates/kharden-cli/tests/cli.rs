//! The `kharden` binary as a user meets it: outputs, determinism, and one-line errors.

use std::process::{Command, Output};

fn kharden(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kharden"))
        .args(args)
        .output()
        .expect("run kharden")
}

/// `kharden run` of a syscall loop on the Haswell.
const SYSCALL_LOOP: &[&str] = &[
    "run",
    "--machine",
    "haswell-i7-4770",
    "--workload",
    "syscall-loop",
];

/// 2000 getppid iterations on the Haswell, as JSON, with `extra` flags.
fn getppid_loop(extra: &[&str]) -> Output {
    kharden(&[SYSCALL_LOOP, &["--iterations", "2000", "--json"], extra].concat())
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A bad input: exit status 2, exactly one line on stderr, containing `needle`, no panic.
fn assert_one_line_error(args: &[&str], needle: &str) {
    let o = kharden(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{args:?}: not one line: {err}"
    );
    assert!(err.contains(needle), "{args:?}: '{err}' lacks '{needle}'");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
}

#[test]
fn unknown_machine_workload_defense_syscall() {
    assert_one_line_error(
        &["run", "--machine", "pdp11", "--workload", "syscall-loop"],
        "unknown machine 'pdp11'",
    );
    assert_one_line_error(
        &["run", "--machine", "haswell-i7-4770", "--workload", "kbuil"],
        "--workload: unknown workload 'kbuil'",
    );
    assert_one_line_error(
        &[
            "run",
            "--machine",
            "haswell-i7-4770",
            "--workload",
            "syscall-loop",
            "--defense",
            "pti:maybe",
        ],
        "unknown defense 'pti:maybe'",
    );
    assert_one_line_error(
        &[
            "run",
            "--machine",
            "haswell-i7-4770",
            "--workload",
            "syscall-loop",
            "--syscall",
            "fork",
        ],
        "--syscall: unknown syscall 'fork'",
    );
    assert_one_line_error(
        &[SYSCALL_LOOP, &["--iterations", "0"]].concat(),
        "--iterations",
    );
    assert_one_line_error(&["reproduce", "nothing"], "unknown experiment 'nothing'");
    assert_one_line_error(
        &["machines", "show", "nothing"],
        "unknown machine 'nothing'",
    );
}

#[test]
fn malformed_machine_files_name_file_field_and_expectation() {
    let dir = std::env::temp_dir().join(format!("kharden-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = kharden(&["machines", "show", "haswell-i7-4770"]);
    let good = String::from_utf8(good.stdout).unwrap();
    let cases = [
        (
            "syntax.toml",
            good.replacen("sockets = 1", "sockets = = 1", 1),
            "syntax.toml: line",
        ),
        (
            "type.toml",
            good.replacen("frequency_ghz = 3.9", "frequency_ghz = \"fast\"", 1),
            "type.toml: line",
        ),
        (
            "missing.toml",
            good.replacen("pde_entries", "pde_entriez", 1),
            "pde_entriez",
        ),
        (
            "range.toml",
            good.replacen("cores_per_socket = 4", "cores_per_socket = 0", 1),
            "topology.cores_per_socket",
        ),
        (
            "ways.toml",
            good.replacen("entries = 64", "entries = 66", 1),
            "multiple of ways",
        ),
    ];
    for (name, text, needle) in cases {
        assert_ne!(text, good, "{name}: the mutation did not apply");
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        assert_one_line_error(
            &[
                "run",
                "--machine",
                path.to_str().unwrap(),
                "--workload",
                "syscall-loop",
            ],
            needle,
        );
    }
    assert_one_line_error(
        &[
            "run",
            "--machine",
            "/nonexistent/m.toml",
            "--workload",
            "syscall-loop",
        ],
        "/nonexistent/m.toml: cannot read",
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn same_inputs_same_output() {
    let a = kharden(&["reproduce", "pti-pcid", "--json"]);
    let b = kharden(&["reproduce", "pti-pcid", "--json"]);
    assert!(a.status.success(), "{}", stderr(&a));
    assert_eq!(a.stdout, b.stdout);
    let args = [
        "run",
        "--machine",
        "haswell-i7-4770",
        "--workload",
        "syscall-loop",
        "--syscall",
        "mprotect",
        "--defense",
        "pti:linux",
        "--iterations",
        "3000",
    ];
    assert_eq!(kharden(&args).stdout, kharden(&args).stdout);
}

#[test]
fn reproduce_json_has_the_promised_shape() {
    let o = kharden(&["reproduce", "pti-pcid", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["experiment"], "pti-pcid");
    assert!(v["fitted_parameters"].as_u64().unwrap() <= 1);
    for row in v["rows"].as_array().unwrap() {
        for key in [
            "label",
            "unit",
            "published",
            "simulated",
            "error_pct",
            "tolerance_pct",
            "fitted",
        ] {
            assert!(row.get(key).is_some(), "row lacks {key}: {row}");
        }
    }
    // The fitted row is marked, and the parameters the rows ran with come along.
    let fitted: Vec<&serde_json::Value> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["fitted"] == true)
        .collect();
    assert_eq!(fitted.len(), 1, "{v}");
    assert!(
        v["params"]["kernel.tlb_single_page_flush_ceiling"]["value"] == 33.0,
        "{v}"
    );
    // A mechanism row carries what it adds over its baseline, published and simulated.
    let on = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["label"] == "PCID, PTI on")
        .unwrap();
    assert_eq!(on["baseline"], "PCID, PTI off", "{on}");
    let published = on["added_published_pct"].as_f64().unwrap();
    assert!(
        (published - (478.0 / 339.0 - 1.0) * 100.0).abs() < 1e-9,
        "{on}"
    );
    for key in [
        "added_simulated_pct",
        "added_error_pct",
        "added_tolerance_pct",
    ] {
        assert!(on.get(key).is_some(), "row lacks {key}: {on}");
    }
}

#[test]
fn reproduce_csv_carries_added_costs_and_verdicts() {
    let o = kharden(&["reproduce", "pti-pcid", "--csv"]);
    let text = String::from_utf8(o.stdout).unwrap();
    let header = text.lines().next().unwrap();
    assert!(
        header
            .ends_with(",baseline,added_published_pct,added_simulated_pct,added_error_pct,verdict"),
        "{header}"
    );
    let on = text
        .lines()
        .find(|l| l.starts_with("pti-pcid,\"PCID, PTI on\""))
        .unwrap();
    assert!(
        on.contains(",PCID, PTI off,") || on.contains(",\"PCID, PTI off\","),
        "{on}"
    );
}

#[test]
fn run_prints_syscall_timing_columns_and_a_summary() {
    let o = kharden(&[
        "run",
        "--machine",
        "haswell-i7-4770",
        "--workload",
        "syscall-loop",
        "--defense",
        "pti:freebsd",
        "--iterations",
        "2000",
        "--loops",
        "3",
    ]);
    let out = String::from_utf8(o.stdout.clone()).unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.contains("test loop time iterations periteration"));
    let loop_lines: Vec<&str> = out.lines().filter(|l| l.starts_with("getppid ")).collect();
    assert_eq!(loop_lines.len(), 3);
    for l in loop_lines {
        let cols: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(cols.len(), 5, "{l}");
        assert_eq!(cols[3], "2000");
    }
    assert!(
        out.contains("cr3-write") && out.contains("cr3_write_noflush"),
        "{out}"
    );
    assert!(out.contains("security oracle: no violation"));
}

#[test]
fn check_passes_correct_and_fails_broken_defenses() {
    let ok = kharden(&[
        "check",
        "--defense",
        "pti:linux",
        "--machine",
        "haswell-i7-4770",
    ]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    let bad = kharden(&[
        "check",
        "--defense",
        "pti:broken-global-text",
        "--machine",
        "haswell-i7-4770",
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stdout).contains("VIOLATION"));
}

#[test]
fn bad_flags_and_subcommands_are_one_line_errors() {
    assert_one_line_error(&["frobnicate"], "unrecognized subcommand 'frobnicate'");
    assert_one_line_error(&["run", "--machine"], "--machine");
    // A missing required flag is named on the one line, not only on clap's next lines.
    assert_one_line_error(
        &["run", "--workload", "kernel-op", "--op", "open-close"],
        "required arguments were not provided: --machine <MACHINE>",
    );
    assert_one_line_error(
        &[
            "run",
            "--machine",
            "haswell-i7-4770",
            "--workload",
            "syscall-loop",
            "--iterations",
            "many",
        ],
        "invalid value 'many'",
    );
    assert_one_line_error(
        &["reproduce", "all", "--json", "--csv"],
        "cannot be used with",
    );
    let help = kharden(&["--help"]);
    assert!(help.status.success() && String::from_utf8_lossy(&help.stdout).contains("reproduce"));
}

#[test]
fn kbuild_runs_are_deterministic_and_sweep_rejects_bad_counts() {
    let args = [
        "run",
        "--machine",
        "ivybridge-i5-3550",
        "--workload",
        "kbuild",
        "--defense",
        "pti:linux,xpfo:deferred",
        "--window-ms",
        "5",
        "--json",
    ];
    let a = kharden(&args);
    assert!(a.status.success(), "{}", stderr(&a));
    assert_eq!(a.stdout, kharden(&args).stdout);
    let v: serde_json::Value = serde_json::from_slice(&a.stdout).unwrap();
    assert!(v["system_s"].as_f64().unwrap() > 0.0 && v["user_s"].as_f64().unwrap() > 0.0);
    // The text summary lists the counters the defense owns beside the kernel's.
    let text = kharden(&args[..args.len() - 1]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("page_faults")
            && text.contains("xpfo_flushes")
            && text.contains("xpfo_page_charges"),
        "{text}"
    );
    assert_one_line_error(
        &["sweep", "--family", "xeon-platinum-8160", "--cpus", "7"],
        "not a multiple",
    );
    assert_one_line_error(
        &[
            "run",
            "--machine",
            "ivybridge-i5-3550",
            "--workload",
            "kbuild",
            "--jobs",
            "0",
        ],
        "--jobs",
    );
}

#[test]
fn params_show_provenance_and_set_changes_a_run() {
    let o = kharden(&[
        "params",
        "--defense",
        "xpfo",
        "--machine",
        "ivybridge-i5-3550",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        out.contains("xpfo.page_cycles") && out.contains("kernels/linux.toml"),
        "{out}"
    );
    assert!(
        out.contains("kernel.irq_path_cycles") && out.contains("ESTIMATE"),
        "{out}"
    );
    assert!(
        !out.contains("pti.switch_macro_cycles"),
        "only the named families: {out}"
    );
    assert!(
        out.contains("machine.topology.sockets") && out.contains("[ARK]"),
        "{out}"
    );

    let run = |set: &[&str]| {
        let o = getppid_loop(set);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let base = run(&[]);
    let set = run(&[
        "--set",
        "workload.syscall_loop.user_cycles_per_iteration=500",
    ]);
    let p = &set["params"]["workload.syscall_loop.user_cycles_per_iteration"];
    assert_eq!(p["value"], 500.0);
    assert_eq!(p["provenance"], "set by --set");
    assert!(set["ns_per_iteration"].as_f64() > base["ns_per_iteration"].as_f64());
    let faster = run(&["--set", "machine.cpu.frequency_ghz=7.0"]);
    assert!(faster["ns_per_iteration"].as_f64() < base["ns_per_iteration"].as_f64());

    for (set, needle) in [
        (
            "kernel.irq_path_cycles=300ns",
            "expected a value in cycles, got '300ns'",
        ),
        ("kernel.nope=1", "unknown parameter 'kernel.nope'"),
        ("kernel.irq_path_cycles", "expected PATH=VALUE"),
        (
            "machine.costs.nope=1",
            "machine.costs.nope: the profile has no such field",
        ),
        (
            "machine.topology.sockets=many",
            "machine.topology.sockets: expected integer",
        ),
    ] {
        assert_one_line_error(
            &[
                "run",
                "--machine",
                "haswell-i7-4770",
                "--workload",
                "syscall-loop",
                "--set",
                set,
            ],
            needle,
        );
    }
}

#[test]
fn kernel_ops_run_per_node_and_reject_bad_choices() {
    let args = [
        "run",
        "--machine",
        "xeon-e5-2690v3-2s",
        "--workload",
        "kernel-op",
        "--op",
        "fork-1",
        "--caches",
        "cold",
        "--node",
        "1",
        "--defense",
        "pti:linux,text-repl",
    ];
    let o = kharden(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("kernel_text.memory"));
    assert_eq!(o.stdout, kharden(&args).stdout, "deterministic");
    let base = [
        "run",
        "--machine",
        "xeon-e5-2690v3-2s",
        "--workload",
        "kernel-op",
    ];
    assert_one_line_error(
        &[&base[..], &["--op", "forks"]].concat(),
        "--op: unknown operation 'forks'",
    );
    assert_one_line_error(
        &[&base[..], &["--caches", "warm"]].concat(),
        "--caches: unknown cache state 'warm': expected one of hot, cold, cold-each",
    );
    assert_one_line_error(
        &[&base[..], &["--node", "2"]].concat(),
        "--node: xeon-e5-2690v3-2s has nodes 0 to 1",
    );
}

#[test]
fn text_replication_check_catches_its_broken_variants() {
    for (d, ok) in [
        ("text-repl", true),
        ("text-repl:broken-one-replica", false),
        ("text-repl:broken-writable", false),
    ] {
        let o = kharden(&["check", "--defense", d, "--machine", "xeon-e5-2690v3-2s"]);
        assert_eq!(o.status.success(), ok, "{d}: {}", stderr(&o));
    }
}

/// `kharden kernel evict-fault` with `--faults 20 --repeats 1` and `extra`: its table.
fn evict_fault(extra: &[&str]) -> String {
    let mut args = vec!["kernel", "evict-fault", "--faults", "20", "--repeats", "1"];
    args.extend(extra);
    let out = kharden(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn evict_fault_times_this_host_beside_the_model() {
    let text = evict_fault(&["--evict-kib", "0,256"]);
    assert!(
        text.contains("native p50 ns") && text.contains("model p50 ns"),
        "{text}"
    );
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("256"))
        .collect();
    assert_eq!(rows.len(), 1, "{text}");
    // --fit prints the profile's two lines, fitted to this host's faults.
    let text = evict_fault(&["--fit", "--evict-kib", "0,4096,65536"]);
    for field in ["llc_miss_overlap = ", "dram_miss_overlap = "] {
        let line = text
            .lines()
            .find(|l| l.starts_with(field))
            .unwrap_or_else(|| panic!("{text}"));
        let v: f64 = line[field.len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1.0..=64.0).contains(&v), "{line}");
    }
    // The model's column alone (this used to panic on the empty native columns).
    let text = evict_fault(&["--model-only", "--evict-kib", "0,4096"]);
    assert!(
        text.contains("model p50 ns") && !text.contains("native"),
        "{text}"
    );
    // Without the sizes the fit needs, it refuses before measuring anything.
    let out = kharden(&["kernel", "evict-fault", "--fit", "--evict-kib", "0,256"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--fit: expected --evict-kib to hold 0"),
        "{err}"
    );
    let out = kharden(&["kernel", "evict-fault", "--evict-kib", "99999999"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--evict-kib: expected at most"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// A workload's option given to another workload would be ignored: it is refused, so no
/// one takes a bare syscall loop for one in a guest, or a kbuild for one run on node 1.
#[test]
fn options_of_another_workload_are_refused() {
    let run = |workload: &str, extra: &[&str]| {
        let mut a = vec![
            "run",
            "--machine",
            "skylake-i7-6700k",
            "--workload",
            workload,
        ];
        a.extend_from_slice(extra);
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    for (args, needle) in [
        (
            run("syscall-loop", &["--mmu", "legacy"]),
            "--mmu: applies to ssdd and syscall-loop under --virt kvm, not to --workload syscall-loop without --virt kvm",
        ),
        (run("kbuild", &["--node", "1"]), "--node: applies to kernel-op"),
        (run("kernel-op", &["--iterations", "5"]), "--iterations: applies to syscall-loop"),
        (run("ssdd", &["--virt", "kvm", "--jobs", "4"]), "--jobs: applies to kbuild"),
        (
            run("syscall-loop", &["--virt", "kvm", "--guest-model", "kernel"]),
            "--guest-model: applies to ssdd",
        ),
        (
            run("ssdd", &["--virt", "kvm", "--ept-page", "4k"]),
            "--ept-page: sets the kernel-model guest's EPT pages",
        ),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_one_line_error(&args, needle);
    }
}

#[test]
fn cpuid_tlbs_reads_a_published_dump_and_refuses_what_is_not_one() {
    let dir = std::env::temp_dir().join(format!("kharden-cpuid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dump = dir.join("avoton.txt");
    std::fs::write(
        &dump,
        "CPUID Registers (CPU #1):\n\
         CPUID 00000000: 0000000B-756E6547-6C65746E-49656E69\n\
         CPUID 00000002: 61B3A001-0000FFC2-00000000-00000000\n",
    )
    .unwrap();
    let dump = dump.to_str().unwrap();
    let o = kharden(&["machines", "cpuid-tlbs", dump]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    assert_eq!(out.matches("[[tlb]]").count(), 4, "{out}");
    assert!(out.contains("entries = 48"), "the 48-entry ITLB: {out}");
    let bad = dir.join("bad.txt");
    std::fs::write(&bad, "CPUID 00000000: 0000000B-756E6547\n").unwrap();
    let bad = bad.to_str().unwrap();
    assert_one_line_error(
        &["machines", "cpuid-tlbs", bad],
        &format!("{bad} line 1: expected 'CPUID LLLLLLLL: EAX-EBX-ECX-EDX'"),
    );
    assert_one_line_error(
        &["machines", "cpuid-tlbs", "/nonexistent/dump.txt"],
        "/nonexistent/dump.txt",
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `--footprints FILE` runs the model on a recording of one's own kernel: the committed
/// file given by path changes nothing; a copy whose getppid took 1000 ns longer on the
/// recording host makes the simulated getppid longer by that work at the target's clock;
/// a file that lacks a path the model runs, or none at all, is a one-line error.
#[test]
fn run_takes_its_kernel_paths_from_the_footprints_given() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The run's figure, and the recording its JSON says it ran.
    let run = |extra: &[&str]| -> (f64, String) {
        let o = getppid_loop(extra);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let footprints = v["footprints"].as_str().unwrap().to_string();
        (v["ns_per_iteration"].as_f64().unwrap(), footprints)
    };
    let ns = |extra: &[&str]| run(extra).0;
    let (committed, place) = run(&[]);
    assert_eq!(place, kharden::kernel::footprints::footprint::BUILTIN_PLACE);
    let builtin = kharden::kernel::footprints::footprint::BUILTIN;
    let same = d.join("same.toml");
    std::fs::write(&same, builtin).unwrap();
    let same_path = same.to_str().unwrap();
    assert_eq!(
        run(&["--footprints", same_path]),
        (committed, same_path.to_string())
    );

    let cut = builtin.find("name = \"getppid\"").unwrap();
    let at = cut + builtin[cut..].find("latency_ns = [").unwrap();
    let end = at + builtin[at..].find('\n').unwrap();
    let slower_by = |ns: &str| format!("{:.1}", ns.trim().parse::<f64>().unwrap() + 1000.0);
    let latencies: Vec<String> = builtin[at + "latency_ns = [".len()..end - 1]
        .split(',')
        .map(slower_by)
        .collect();
    let slower = d.join("slower.toml");
    std::fs::write(
        &slower,
        format!(
            "{}latency_ns = [{}]{}",
            &builtin[..at],
            latencies.join(", "),
            &builtin[end..]
        ),
    )
    .unwrap();
    let longer = ns(&["--footprints", slower.to_str().unwrap()]);
    let host_ghz = kharden::kernel::footprints::footprint::Footprints::builtin()
        .kernel
        .host_ghz;
    let haswell = kharden::machine::load("haswell-i7-4770").unwrap();
    let expected = 1000.0 * host_ghz / haswell.cpu.frequency_ghz;
    assert!(
        (longer - committed - expected).abs() < 0.05 * expected,
        "{committed} -> {longer} ns, expected {expected:.0} more"
    );

    let cut_at = builtin.find("[[path]]\nname = \"lseek\"").unwrap();
    let next = cut_at + 1 + builtin[cut_at + 1..].find("[[path]]").unwrap();
    let partial = d.join("partial.toml");
    std::fs::write(
        &partial,
        format!("{}{}", &builtin[..cut_at], &builtin[next..]),
    )
    .unwrap();
    for (file, says) in [
        (partial.to_str().unwrap(), "missing lseek"),
        ("/no/such/footprints.toml", "cannot read footprint file"),
    ] {
        assert_one_line_error(&[SYSCALL_LOOP, &["--footprints", file]].concat(), says);
    }
}

/// `--workload fio-randread`: deterministic JSON with the reads and IOPS, options checked.
#[test]
fn fio_randread_runs_and_refuses_what_does_not_apply() {
    let args = [
        "run",
        "--machine",
        "haswell-i7-4770",
        "--workload",
        "fio-randread",
        "--defense",
        "asi:prototype",
        "--jobs",
        "2",
        "--window-ms",
        "1",
        "--json",
    ];
    let a = kharden(&args);
    assert_eq!(a.status.code(), Some(0), "{}", stderr(&a));
    assert_eq!(a.stdout, kharden(&args).stdout, "same inputs, same output");
    let v: serde_json::Value = serde_json::from_slice(&a.stdout).unwrap();
    assert!(
        v["ios"].as_u64().unwrap() > 0 && v["iops"].as_f64().unwrap() > 0.0,
        "{v}"
    );
    assert!(
        v["stats"]["counters.asi_ephmap_copies"].as_u64().unwrap() > 0,
        "{v}"
    );
    assert_one_line_error(
        &[
            "run",
            "--machine",
            "haswell-i7-4770",
            "--workload",
            "fio-randread",
            "--syscall",
            "getppid",
        ],
        "--syscall: applies to syscall-loop",
    );
    assert_one_line_error(
        &[
            "run",
            "--machine",
            "haswell-i7-4770",
            "--workload",
            "fio-randread",
            "--jobs",
            "64",
        ],
        "jobs: expected 1..8",
    );
}
