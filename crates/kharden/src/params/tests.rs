use super::*;
use crate::model::declarations;

#[test]
fn the_builtin_file_values_every_declaration_with_a_source() {
    let p = Params::linux();
    for d in declarations() {
        let param = p
            .get(d.path)
            .unwrap_or_else(|| panic!("{} has no value", d.path));
        assert!(matches!(&param.provenance, Provenance::Source { text, .. } if !text.is_empty()));
    }
    assert_eq!(p.num("kernel.tlb_single_page_flush_ceiling"), 33.0);
    assert_eq!(p.word("kernel.irq_time"), "task-system");
}

#[test]
fn set_checks_path_unit_and_range_in_one_line() {
    let mut p = Params::linux();
    let by = || Provenance::Set { by: "test".into() };
    p.set_text("--set", "kernel.irq_path_cycles", "374cycles", by())
        .unwrap();
    assert_eq!(p.num("kernel.irq_path_cycles"), 374.0);
    p.set_text("--set", "kernel.irq_time", "tick", by())
        .unwrap();
    assert_eq!(p.word("kernel.irq_time"), "tick");
    for (path, value, says) in [
        (
            "kernel.irq_path",
            "1",
            "unknown parameter 'kernel.irq_path': expected one of kernel.",
        ),
        (
            "kernel.irq_path_cycles",
            "300ns",
            "expected a value in cycles, got '300ns'",
        ),
        (
            "kernel.irq_path_cycles",
            "nan",
            "expected a number of cycles from 0 to 100000",
        ),
        ("kernel.irq_path_cycles", "-1", "from 0 to 100000, got -1"),
        ("kernel.fork_refcount_ops", "1.5", "expected a whole number"),
        (
            "kernel.irq_time",
            "sometimes",
            "expected one of task-system, tick, excluded",
        ),
    ] {
        let e = p
            .set_text("--set", path, value, by())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--set: ") && e.contains(says) && !e.contains('\n'),
            "{e}"
        );
    }
}

#[test]
fn a_parameter_file_is_checked_against_the_declarations() {
    let decls = declarations();
    let bad = [
        (
            "[kernel]\nirq_path_cycles = 3\n",
            "irq_path_cycles: expected { value",
        ),
        (
            "[kernel]\nirq_path_cycles = { value = 3 }\n",
            "kernel.irq_path_cycles.source",
        ),
        (
            "[kernel]\nnope = { value = 3, source = \"x\" }\n",
            "missing",
        ),
    ];
    for (text, says) in bad {
        let e = data::parse("k.toml", text, &decls).unwrap_err().to_string();
        assert!(e.starts_with("k.toml: ") && e.contains(says), "{e}");
    }
    let mut full = include_str!("../../../../kernels/linux.toml").to_string();
    full += "\n[extra]\nthing = { value = 1, source = \"x\" }\n";
    let e = data::parse("k.toml", &full, &decls)
        .unwrap_err()
        .to_string();
    assert!(e.contains("extra.thing: not a declared parameter"), "{e}");
}

#[test]
fn machine_fields_are_parameters_with_their_source_comments() {
    let m = crate::machine::load("ivybridge-i5-3550").unwrap();
    let text = crate::machine::source_text("ivybridge-i5-3550").unwrap();
    let leaves = machine_params::leaves(&m, Some(text));
    let sockets = leaves
        .iter()
        .find(|l| l.path == "topology.sockets")
        .unwrap();
    assert!(sockets.source.contains("[ARK]"), "{}", sockets.source);
    let set = machine_params::set(&m, "--set", "costs.interrupt_entry_cycles", "999").unwrap();
    assert_eq!(set.costs.interrupt_entry_cycles, 999);
    let scaled = machine_params::scale(&m, "t", "costs.ipi_latency_ns", 2.0).unwrap();
    assert_eq!(
        scaled.costs.ipi_latency_ns.same_socket_ns,
        2.0 * m.costs.ipi_latency_ns.same_socket_ns
    );
    for (path, value) in [
        ("costs.nope", "1"),
        ("costs.interrupt_entry_cycles", "fast"),
    ] {
        let e = machine_params::set(&m, "--set", path, value)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--set") && e.contains(&format!("machine.{path}")),
            "{e}"
        );
    }
}
