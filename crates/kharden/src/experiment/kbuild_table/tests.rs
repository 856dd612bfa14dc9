use super::*;
use crate::params::Params;
use crate::workload::kbuild_run::Sampling;

const ROWS: &str = r#"
name = "t"
kind = "kbuild-table"
title = "t"
source = "t"
tolerance_pct = 15.0
warmup_ms = 1.0
window_cpu_ms = 10.0
[[row]]
label = "base"
machine = "ivybridge-i5-3550"
jobs = 4
defense = "pti:linux"
published = 600.0
[[row]]
label = "xpfo"
baseline = "base"
machine = "ivybridge-i5-3550"
jobs = 4
defense = "pti:linux,xpfo:immediate"
published = 1600.0
"#;

fn with_fits(fits: &[(&str, &str)]) -> String {
    let mut text = ROWS.to_string();
    for (parameter, row) in fits {
        text += &format!("[[fit]]\nparameter = \"{parameter}\"\nrow = \"{row}\"\n");
    }
    text
}

#[test]
fn build_user_cycles_comes_first_and_kernel_costs_may_follow() {
    assert_eq!(
        parse("t.toml", &with_fits(&[("build_user_cycles", "base")]))
            .unwrap()
            .fit
            .len(),
        1
    );
    assert_eq!(
        parse(
            "t.toml",
            &with_fits(&[
                ("build_user_cycles", "base"),
                ("kernel.irq_path_cycles", "xpfo")
            ])
        )
        .unwrap()
        .fit
        .len(),
        2
    );
    let both = [
        ("build_user_cycles", "base"),
        ("xpfo.page_cycles", "xpfo"),
        ("kernel.irq_path_cycles", "xpfo"),
    ];
    assert_eq!(parse("t.toml", &with_fits(&both)).unwrap().fit.len(), 3);
    for bad in [
        vec![("kernel.irq_path_cycles", "xpfo")],
        vec![],
        vec![("build_user_cycles", "base"), ("ipi_latency", "xpfo")],
        vec![("build_user_cycles", "nope")],
        vec![
            ("build_user_cycles", "base"),
            ("xpfo.page_cycles", "xpfo"),
            ("xpfo.page_cycles", "xpfo"),
        ],
        vec![("build_user_cycles", "base"), ("build_user_cycles", "base")],
    ] {
        let err = parse("t.toml", &with_fits(&bad)).unwrap_err().to_string();
        assert!(
            err.starts_with("t.toml") && !err.contains('\n'),
            "{bad:?}: {err}"
        );
    }
}

#[test]
fn one_starting_value_only_for_a_cost_charged_per_counted_event() {
    let fit = |parameter: &str, start: &str| {
        let text = with_fits(&[("build_user_cycles", "base")])
            + &format!("[[fit]]\nparameter = \"{parameter}\"\nrow = \"xpfo\"\nstart = {start}\n");
        parse("t.toml", &text).map(|e| e.fit.len())
    };
    assert_eq!(fit("xpfo.page_cycles", "[0]").unwrap(), 2);
    assert_eq!(fit("kernel.irq_path_cycles", "[0, 100]").unwrap(), 2);
    for (parameter, start, says) in [
        ("kernel.irq_path_cycles", "[0]", "charged per counted event"),
        ("xpfo.page_cycles", "[5, 5]", "equal"),
        ("xpfo.page_cycles", "[1, 2, 3]", "one or two"),
        ("xpfo.page_cycles", "[]", "one or two"),
    ] {
        let err = fit(parameter, start).unwrap_err().to_string();
        assert!(
            err.starts_with("t.toml") && err.contains(says) && !err.contains('\n'),
            "{parameter} {start}: {err}"
        );
    }
}

#[test]
fn samples_pool_the_windows_of_consecutive_seeds() {
    let m = machine::load("ivybridge-i5-3550").unwrap();
    let profile = JobProfile::builtin();
    let sampling = |seed, samples| Sampling {
        warmup_ms: 1.0,
        window_ms: 20.0,
        seed,
        samples,
    };
    let run = |seed, samples| {
        simulate(
            &m,
            "pti:linux",
            4,
            &profile,
            sampling(seed, samples),
            &Params::linux(),
        )
        .unwrap()
    };
    let (a, b, both) = (run(7, 1), run(8, 1), run(7, 2));
    assert_eq!(a.sampling_error(), None);
    assert_eq!(
        both.sample_ratios(),
        [a.sample_ratios()[0], b.sample_ratios()[0]]
    );
    assert_eq!(
        both.window.tasks.system_time(),
        a.window.tasks.system_time() + b.window.tasks.system_time()
    );
    assert_eq!(
        both.user_work_cycles,
        a.user_work_cycles + b.user_work_cycles
    );
    // Two different windows differ, and the standard error of two values is half their
    // distance.
    let (x, y) = (a.sample_ratios()[0], b.sample_ratios()[0]);
    assert_ne!(x, y);
    let se = both.sampling_error().unwrap() * both.system_per_user_cycle();
    assert!(
        (se - (x - y).abs() / 2.0).abs() < 1e-9 * se,
        "{se} vs {x} {y}"
    );
    let bad = parse(
        "t.toml",
        &format!(
            "samples = 0\n{}",
            with_fits(&[("build_user_cycles", "base")])
        ),
    );
    assert!(bad
        .unwrap_err()
        .to_string()
        .contains("samples: expected 1 to 16"));
    let bad = parse(
        "t.toml",
        &format!(
            "set = {{ kernel.irq_time = \"sometimes\" }}\n{}",
            with_fits(&[("build_user_cycles", "base")])
        ),
    );
    let e = bad.unwrap_err().to_string();
    assert!(
        e.starts_with(
            "t.toml: set: kernel.irq_time: expected one of task-system, tick, excluded, got 'sometimes'"
        ),
        "{e}"
    );
}

/// The premise of a one-value start: the per-event cost's events, counted at one value,
/// give the slope of the system time (each adds the cost once, and moves nothing else).
#[test]
fn counted_charges_give_the_slope_of_a_per_event_cost() {
    let m = machine::load("ivybridge-i5-3550").unwrap();
    let sampling = Sampling {
        warmup_ms: 1.0,
        window_ms: 20.0,
        seed: 3,
        samples: 1,
    };
    let run = |cycles: f64| {
        let mut params = Params::linux();
        params
            .set_num(
                "test",
                "xpfo.page_cycles",
                cycles,
                crate::params::Provenance::Set { by: "test".into() },
            )
            .unwrap();
        let decl = params.get("xpfo.page_cycles").unwrap().decl;
        let counter = crate::defense::registry::counter(decl.per_event.unwrap());
        let r = simulate(
            &m,
            "pti:linux,xpfo:deferred",
            4,
            &JobProfile::builtin(),
            sampling,
            &params,
        )
        .unwrap();
        (
            r.system_per_user_cycle(),
            r.window.tasks.owned(counter) as f64 / r.user_work_cycles,
        )
    };
    let ((s0, events), (s1, _)) = (run(0.0), run(2000.0));
    assert!(events > 0.0);
    let predicted = s0 + events * 2000.0 / (m.cpu.frequency_ghz * 1e9);
    assert!(
        (s1 / predicted - 1.0).abs() < 1e-9,
        "system per user cycle at 2000: {s1}, from the slope: {predicted}"
    );
}

/// Two seeds that fit 100 and 300 on their own: their mean's standard error is half their
/// distance, whatever the fitted value they are taken from; one seed gives none.
#[test]
fn a_fitted_value_carries_the_standard_error_of_each_seeds_own_fit() {
    // At v = 200 with a miss of 0.001 per unit, a seed 0.1 under its figure fits 100 more
    // and one 0.1 over fits 100 less.
    let (scale, slope) = (2.0, 0.001);
    let base = [0.5, 0.25];
    let row = [0.9 / (scale / base[0]), 1.1 / (scale / base[1])];
    let se = fit::per_seed_standard_error(&row, &base, scale, 200.0, slope).unwrap();
    assert!((se - 100.0).abs() < 1e-9, "{se}");
    assert_eq!(
        fit::per_seed_standard_error(&row[..1], &base[..1], scale, 200.0, slope),
        None
    );
    assert_eq!(
        fit::per_seed_standard_error(&row, &base, scale, 200.0, 0.0),
        None
    );
}

/// The report gives a fitted kernel cost with its ± when the rows pool several seeds.
#[test]
fn the_report_gives_a_fitted_cost_with_its_sampling_error() {
    let text = |samples: u32| {
        format!(
            "samples = {samples}\n{}",
            ROWS.replace("xpfo:immediate", "xpfo:deferred")
                .replace("1600.0", "700.0")
        ) + "[[fit]]\nparameter = \"build_user_cycles\"\nrow = \"base\"\n"
            + "[[fit]]\nparameter = \"xpfo.page_cycles\"\nrow = \"xpfo\"\nstart = [0]\n"
    };
    let fitted = |samples| {
        let e = parse("t.toml", &text(samples)).unwrap();
        let r = run(&e, &crate::params::Overrides::default()).unwrap();
        r.fitted
            .iter()
            .find(|f| f.starts_with("xpfo.page_cycles"))
            .cloned()
            .unwrap()
    };
    let (one, two) = (fitted(1), fitted(2));
    assert!(!one.contains('±'), "{one}");
    let se: f64 = two
        .split("± ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no ± in {two}"));
    assert!(se > 0.0, "{two}");
}

/// A mechanism's parameter is fitted to what the mechanism adds over its baseline, so the
/// baseline's own error is not absorbed; without a baseline row it is not fitted at all.
#[test]
fn a_mechanism_parameter_is_fitted_to_the_added_cost() {
    let text = ROWS.replace("xpfo:immediate", "xpfo:deferred").replace("1600.0", "900.0")
        // The build is fitted on a second machine, so the i5's baseline keeps its own error.
        + "[[row]]\nlabel = \"big\"\nmachine = \"xeon-platinum-8160\"\njobs = 60\ndefense = \"pti:linux\"\npublished = 900.0\n"
        + "[[fit]]\nparameter = \"build_user_cycles\"\nrow = \"big\"\n"
        + "[[fit]]\nparameter = \"xpfo.page_cycles\"\nrow = \"xpfo\"\nstart = [0]\n";
    let e = parse("t.toml", &text).unwrap();
    let mut r = run(&e, &crate::params::Overrides::default()).unwrap();
    r.judge("t.toml").unwrap();
    let row = |l: &str| r.rows.iter().find(|x| x.label == l).unwrap();
    let base_error = row("base").error_pct.unwrap();
    assert!(
        base_error.abs() > 1.0,
        "the baseline has an error of its own: {base_error}"
    );
    let added = row("xpfo").added.as_ref().unwrap();
    assert!(
        added.difference_pp.abs() < 1.0,
        "the added cost is what was fitted: {added:?}"
    );
    // The absolute row carries the baseline's error instead.
    assert!((row("xpfo").error_pct.unwrap() - base_error).abs() < 3.0);
    let refused = parse("t.toml", &text.replace("baseline = \"base\"\n", ""))
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("a mechanism parameter is fitted to an added cost"),
        "{refused}"
    );
}
