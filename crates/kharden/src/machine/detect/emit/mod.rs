//! The profile text, section by section. Each value comes from the host (read or measured) or
//! from the closest library profile, and its comment says which.

mod costs;
mod measured;
mod memory;
mod tlb;

use super::facts::HostFacts;
use super::measure::Measurements;
use super::profile::{Arch, MachineProfile};
use super::toml_text::{slug, Val, Writer};
use super::{got, DetectOptions, Got};

/// What every section needs: the host's facts, the library profile that fills the gaps (and why
/// it was chosen), the measurements, and the clock used to turn nanoseconds into cycles.
pub(super) struct Ctx<'a> {
    pub f: &'a HostFacts,
    pub fb: &'a MachineProfile,
    pub why: &'a str,
    pub m: &'a Measurements,
    pub ghz: f64,
}

impl Ctx<'_> {
    /// The provenance of a value taken from the library profile.
    pub(super) fn from(&self, what: &str) -> String {
        format!("{what} not detectable from user space; taken from {}, whose comment on the same field gives the value's own source", self.why)
    }
    /// `key = value` taken from the library profile, with `what` it stands for.
    pub(super) fn library(&self, w: &mut Writer, key: &str, value: Val, what: &str) {
        w.kv(key, value, &self.from(what));
    }
    pub(super) fn is_x86(&self) -> bool {
        self.f.arch == Arch::X86_64
    }
}

/// The invalidation instructions the profile says the host has.
pub(super) struct Usable {
    pub invpcid: bool,
    pub invlpgb: bool,
}

/// The profile text, in the order of the library's files.
pub(super) fn emit(
    f: &HostFacts,
    fb: &MachineProfile,
    why: &str,
    m: &Measurements,
    opts: &DetectOptions,
) -> String {
    let ghz = detected_clock(f).map_or(fb.cpu.frequency_ghz, |g| g.value);
    let cx = Ctx { f, fb, why, m, ghz };
    let mut w = Writer::new();
    identity(&mut w, &cx, opts);
    topology(&mut w, &cx);
    cpu(&mut w, &cx);
    let usable = features(&mut w, &cx);
    tlb::arrays(&mut w, &cx);
    memory::paging_structure_cache(&mut w, &cx);
    memory::caches_and_dram(&mut w, &cx);
    costs::costs(&mut w, &cx, &usable);
    costs::ipi_latency(&mut w, &cx);
    costs::line_transfers(&mut w, &cx);
    measured::measured(&mut w, &cx);
    w.out
}

/// The clock the host reports, if plausible.
fn detected_clock(f: &HostFacts) -> Option<&Got<f64>> {
    f.frequency_ghz
        .as_ref()
        .filter(|g| g.value > 0.05 && g.value < 10.0)
}

/// The opening comment, name, description, architecture and what the profile assumes.
pub(super) fn identity(w: &mut Writer, cx: &Ctx, opts: &DetectOptions) {
    let (f, why) = (cx.f, cx.why);
    w.comment(
        "Profile of this host written by `kharden machine detect`.\n\
         Each value says how it was obtained. Values 'taken from' a library profile are not\n\
         measurements of this host: they are that profile's sourced values for the closest\n\
         microarchitecture. Timings are user-space readings of one run; repeat to check noise.",
    );
    let name = opts
        .name
        .clone()
        .unwrap_or_else(|| format!("detected-{}", slug(&f.model)));
    w.kv(
        "name",
        Val::Str(name),
        "--name, or 'detected-' and the CPU model",
    );
    let virt = if f.hypervisor {
        ", running under a hypervisor"
    } else {
        ""
    };
    w.kv(
        "description",
        Val::Str(format!(
            "{} ({}) detected on this host{virt}",
            f.model,
            f.uarch.as_deref().unwrap_or("unknown microarchitecture")
        )),
        "CPU brand string and microarchitecture",
    );
    w.kv(
        "arch",
        Val::Str(
            if f.arch == Arch::Aarch64 {
                "aarch64"
            } else {
                "x86_64"
            }
            .into(),
        ),
        "the architecture kharden was built for",
    );
    let mut assumption = format!(
        "Privileged costs, paging-structure cache sizes and IPI latencies come from {why}."
    );
    if f.hypervisor {
        assumption.push_str(" Measured under a hypervisor: exits and virtual interrupts inflate fault, syscall and shootdown timings.");
    }
    if f.pti_active == Some(true) {
        assumption.push_str(
            " The running kernel uses PTI, so the measured syscall includes two CR3 writes.",
        );
    }
    w.kv(
        "assumption",
        Val::Str(assumption),
        "what this profile assumes",
    );
}

/// `[topology]` from sysfs.
pub(super) fn topology(w: &mut Writer, cx: &Ctx) {
    let f = cx.f;
    w.table(&["topology"]);
    w.kv("sockets", Val::Int(f.sockets.value as u64), &f.sockets.how);
    w.kv(
        "cores_per_socket",
        Val::Int(f.cores_per_socket.value as u64),
        &f.cores_per_socket.how,
    );
    w.kv(
        "threads_per_core",
        Val::Int(f.threads_per_core.value as u64),
        &f.threads_per_core.how,
    );
    w.kv(
        "numa_nodes_per_socket",
        Val::Int(f.nodes_per_socket.value as u64),
        &f.nodes_per_socket.how,
    );
}

/// `[cpu]`: model, microarchitecture and clock.
pub(super) fn cpu(w: &mut Writer, cx: &Ctx) {
    let (f, fb) = (cx.f, cx.fb);
    let from = |what: &str| cx.from(what);
    w.table(&["cpu"]);
    w.kv(
        "model",
        Val::Str(f.model.clone()),
        if cfg!(target_arch = "x86_64") {
            "CPUID.80000002H-80000004H brand string"
        } else {
            "/proc/cpuinfo"
        },
    );
    let uarch = f.uarch.clone().unwrap_or_else(|| "unknown".into());
    w.kv("microarchitecture", Val::Str(uarch), &f.uarch_how);
    match detected_clock(f) {
        Some(g) => w.kv("frequency_ghz", Val::Float(g.value), &g.how),
        None => w.kv(
            "frequency_ghz",
            Val::Float(fb.cpu.frequency_ghz),
            &from("clock"),
        ),
    }
}

/// `[cpu.features]`, and which invalidation instructions the costs section must price.
pub(super) fn features(w: &mut Writer, cx: &Ctx) -> Usable {
    let (f, fb) = (cx.f, cx.fb);
    let from = |what: &str| cx.from(what);
    w.table(&["cpu", "features"]);
    let ff = &fb.cpu.features;
    let feat = |w: &mut Writer, key: &str, v: &Option<Got<bool>>, fallback: bool| match v {
        Some(g) => w.kv(key, Val::Bool(g.value), &g.how),
        None => w.kv(key, Val::Bool(fallback), &from(key)),
    };
    let is_x86 = cx.is_x86();
    if is_x86 {
        feat(w, "pcid", &f.pcid, ff.pcid);
        // INVPCID without PCID cannot be used (and the schema rejects it)
        let invpcid = match (&f.invpcid, &f.pcid) {
            (Some(i), Some(p)) if i.value && !p.value => Some(got(
                false,
                format!(
                    "{} reports INVPCID but PCID is absent, so it is unusable",
                    i.how
                ),
            )),
            (i, _) => i.clone(),
        };
        feat(w, "invpcid", &invpcid, ff.invpcid && ff.pcid);
        feat(w, "global_pages", &f.global_pages, ff.global_pages);
        feat(w, "invlpgb", &f.invlpgb, ff.invlpgb);
        feat(w, "gbpages", &f.gbpages, ff.gbpages);
    } else {
        w.kv("pcid", Val::Bool(false), "arm64 has ASIDs, not PCIDs");
        w.kv("invpcid", Val::Bool(false), "x86 only");
        cx.library(
            w,
            "global_pages",
            Val::Bool(ff.global_pages),
            "global mappings (nG=0)",
        );
        w.kv("invlpgb", Val::Bool(false), "x86 (AMD) only");
        cx.library(w, "gbpages", Val::Bool(ff.gbpages), "1 GiB block mappings");
        w.kv(
            "tlbi_broadcast",
            Val::Bool(true),
            "every ARMv8-A core implements TLBI ...IS broadcast to the inner-shareable domain",
        );
        feat(w, "lse_atomics", &f.lse_atomics, ff.lse_atomics);
        cx.library(
            w,
            "asid_bits",
            Val::Int(ff.asid_bits as u64),
            "ID_AA64MMFR0_EL1.ASIDBits",
        );
    }
    let pcid = f.pcid.as_ref().map_or(ff.pcid, |g| g.value);
    let invpcid = is_x86 && pcid && f.invpcid.as_ref().map_or(ff.invpcid, |g| g.value);
    let invlpgb = is_x86 && f.invlpgb.as_ref().map_or(ff.invlpgb, |g| g.value);

    Usable { invpcid, invlpgb }
}
