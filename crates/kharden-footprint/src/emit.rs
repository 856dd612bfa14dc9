//! Writes the footprint data file (kernels/linux-RELEASE.toml) that
//! crates/kharden/src/kernel/footprints/footprint.rs loads.

use crate::kallsyms::Kallsyms;
use crate::latency::Latency;
use crate::record::PathRecord;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Configuration facts that decide what the paths run and where the text lies.
const CONFIG_KEYS: &[&str] = &[
    "CONFIG_HZ",
    "CONFIG_NO_HZ_IDLE",
    "CONFIG_NO_HZ_FULL",
    "CONFIG_PREEMPT_NONE",
    "CONFIG_PREEMPT_VOLUNTARY",
    "CONFIG_PREEMPT",
    "CONFIG_PREEMPT_DYNAMIC",
    "CONFIG_MITIGATION_PAGE_TABLE_ISOLATION",
    "CONFIG_PAGE_TABLE_ISOLATION",
    "CONFIG_MITIGATION_RETPOLINE",
    "CONFIG_MITIGATION_CALL_DEPTH_TRACKING",
    "CONFIG_RANDOMIZE_BASE",
    "CONFIG_VMAP_STACK",
    "CONFIG_STACKPROTECTOR_STRONG",
    "CONFIG_PARAVIRT",
    "CONFIG_KVM_GUEST",
    "CONFIG_TRANSPARENT_HUGEPAGE",
    "CONFIG_TRANSPARENT_HUGEPAGE_ALWAYS",
    "CONFIG_TRANSPARENT_HUGEPAGE_MADVISE",
    "CONFIG_SLUB",
    "CONFIG_SLUB_DEBUG",
    "CONFIG_INIT_ON_ALLOC_DEFAULT_ON",
    "CONFIG_X86_5LEVEL",
    "CONFIG_UNWINDER_ORC",
];

/// The running kernel's configuration facts and where they were read, or why not.
pub fn config_facts(release: &str) -> (Vec<String>, String) {
    let from_zcat = std::process::Command::new("zcat")
        .arg("/proc/config.gz")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            (
                String::from_utf8_lossy(&o.stdout).into_owned(),
                "/proc/config.gz".to_string(),
            )
        });
    let boot = format!("/boot/config-{release}");
    let found = from_zcat.or_else(|| {
        std::fs::read_to_string(&boot)
            .ok()
            .map(|t| (t, boot.clone()))
    });
    match found {
        Some((text, source)) => {
            let facts = text
                .lines()
                .filter(|l| {
                    CONFIG_KEYS
                        .iter()
                        .any(|k| l.strip_prefix(k).is_some_and(|rest| rest.starts_with('=')))
                })
                .map(str::to_string)
                .collect();
            (facts, source)
        }
        None => (
            Vec::new(),
            format!("unavailable (no /proc/config.gz, no {boot})"),
        ),
    }
}

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Everything the file says about the recording, besides the paths.
pub struct Header {
    pub release: String,
    pub version: String,
    pub host_ghz: f64,
    pub host_machine: String,
    pub commands: Vec<String>,
    pub meltdown: String,
    pub record_scale: f64,
    pub latency_scale: f64,
}

/// The seeds' kernels against this one: what differs and what it does to predictions.
const SEED_KERNELS: &str = "The seeds measured Linux 4.x (PTI, XPFO, 2017-2018) and FreeBSD 11. \
Their paths differ from this 6.18 kernel's: 4.x entered syscalls through a per-CPU trampoline \
with PTI (entry_SYSCALL_64_trampoline, one extra text page), dispatched through \
do_syscall_64 without the generic entry code (kernel/entry/common.c came in 5.9), had no \
retpoline return thunks or call-depth tracking before 4.15/6.2, kept VMAs in an rbtree \
rather than a maple tree (6.1) and faulted through handle_mm_fault without per-VMA locks \
(6.4). FreeBSD 11's syscall path (amd64_syscall, exception.S) and VM (vm_fault) are other \
code altogether. Text footprints of the same path on those kernels are therefore ESTIMATED \
to be within a factor of about two of these (same work, different code layout); a model \
that uses these footprints for the seeds predicts TLB and cache misses from 6.18's text \
layout, so a miss rate that depends on how many distinct text pages a path spans may be off \
in either direction by the same factor. Latencies are this host's (AMD EPYC, KVM guest) and \
say nothing about the seeds' machines until scaled.";

pub fn write(
    h: &Header,
    k: &Kallsyms,
    paths: &[PathRecord],
    latencies: &BTreeMap<String, Latency>,
) -> String {
    let mut o = String::new();
    let w = &mut o;
    let _ = writeln!(w, "# Kernel path footprints measured on the recording host by `kharden kernel record-footprint`.");
    let _ = writeln!(w, "# Text offsets are bytes from _text (the image start), so KASLR does not matter; a line is");
    let _ = writeln!(
        w,
        "# offset / 64 and a page offset / 4096. Loaded by crates/kharden/src/kernel/footprints/footprint.rs;"
    );
    let _ = writeln!(
        w,
        "# docs/design/footprints.md says how each figure was measured. Regenerate, do not edit."
    );
    let _ = writeln!(w);
    let _ = writeln!(w, "[kernel]");
    let _ = writeln!(w, "release = {}", quote(&h.release));
    let _ = writeln!(w, "version = {}", quote(&h.version));
    let _ = writeln!(w, "# _etext - _text from /proc/kallsyms");
    let _ = writeln!(w, "text_bytes = {}", k.text_bytes);
    let (facts, source) = config_facts(&h.release);
    let _ = writeln!(w, "config_source = {}", quote(&source));
    let _ = writeln!(w, "config = [");
    for f in &facts {
        let _ = writeln!(w, "  {},", quote(f));
    }
    let _ = writeln!(w, "]");
    let _ = writeln!(w, "# /sys/devices/system/cpu/vulnerabilities/meltdown: PTI is off where the CPU is not affected");
    let _ = writeln!(w, "meltdown = {}", quote(&h.meltdown));
    let _ = writeln!(
        w,
        "# /proc/cpuinfo 'cpu MHz' of the recording host; cycles below are ns times this"
    );
    let _ = writeln!(w, "host_ghz = {:.6}", h.host_ghz);
    let _ = writeln!(
        w,
        "# the recording host's machine profile, which each path's work is derived against"
    );
    let _ = writeln!(w, "host_machine = {}", quote(&h.host_machine));
    let _ = writeln!(w, "sample_period_ns = {}", crate::record::PERIOD_NS);
    let _ = writeln!(w, "record_scale = {}", h.record_scale);
    let _ = writeln!(w, "latency_scale = {}", h.latency_scale);
    let _ = writeln!(w, "commands = [");
    for c in &h.commands {
        let _ = writeln!(w, "  {},", quote(c));
    }
    let _ = writeln!(w, "]");
    let _ = writeln!(w, "seed_kernels = {}", quote(SEED_KERNELS));
    let _ = writeln!(w);
    let _ = writeln!(w, "# Bytes of the kernel objects paths touch: slab sizes measured, the rest as their source says.");
    let _ = writeln!(w, "[objects]");
    for (name, bytes, source) in crate::data::object_sizes() {
        let _ = writeln!(w, "{name} = {bytes} # {source}");
    }
    for p in paths {
        let _ = writeln!(w);
        let _ = writeln!(w, "[[path]]");
        let _ = writeln!(w, "name = {}", quote(&p.name));
        let _ = writeln!(w, "scenario = {}", quote(&p.scenario));
        let _ = writeln!(w, "samples = {}", p.samples);
        let _ = writeln!(w, "ops = {}", p.ops);
        let _ = writeln!(w, "window_ns = {}", p.window_ns);
        let _ = writeln!(w, "new_lines_last_tenth = {}", p.new_lines_last_tenth);
        let _ = writeln!(
            w,
            "new_functions_last_tenth = {}",
            p.new_functions_last_tenth
        );
        let excluded: Vec<String> = p
            .excluded
            .iter()
            .map(|(why, n)| format!("{why} = {n}"))
            .collect();
        let _ = writeln!(
            w,
            "# samples in the path's windows left out: under interrupts, softirqs, preemption, return-to-user work"
        );
        let _ = writeln!(w, "excluded = {{ {} }}", excluded.join(", "));
        let missing: Vec<String> = p.missing_source.iter().map(|m| quote(m)).collect();
        let _ = writeln!(w, "missing_source = [{}]", missing.join(", "));
        if let Some(l) = latencies.get(&p.name) {
            let _ = writeln!(
                w,
                "# ns per operation, bare, over its windows: 10th percentile, median, 90th"
            );
            let _ = writeln!(
                w,
                "latency_ns = [{:.1}, {:.1}, {:.1}]",
                l.ns_p10, l.ns_median, l.ns_p90
            );
            let _ = writeln!(w, "latency_windows = {}", l.windows);
        }
        let data: Vec<String> = crate::data::objects(&p.name)
            .iter()
            .map(|d| quote(d))
            .collect();
        let _ = writeln!(
            w,
            "# ESTIMATE from the source: the kernel objects the path touches"
        );
        let _ = writeln!(w, "data = [{}]", data.join(", "));
        let _ = writeln!(w, "# [name, offset from _text, size, samples (0: interrupts-off code listed from the source), reach]");
        let _ = writeln!(w, "functions = [");
        for u in &p.functions {
            let f = &k.functions[u.index];
            let _ = writeln!(
                w,
                "  [{}, {}, {}, {}, {}],",
                quote(&f.name),
                f.offset,
                f.size,
                u.samples,
                u.reach
            );
        }
        let _ = writeln!(w, "]");
        let _ = write!(w, "sampled_lines = [");
        for (i, l) in p.sampled_lines.iter().enumerate() {
            let _ = write!(w, "{}{}", if i % 16 == 0 { "\n  " } else { " " }, l);
            let _ = write!(w, ",");
        }
        let _ = writeln!(w, "\n]");
    }
    o
}
