//! `kharden machine detect`: a machine profile of this host.
//!
//! What user space can see is read (sysfs topology and caches, CPUID or /proc/cpuinfo for the
//! model, features and TLB geometry) and what user space can time is measured (syscall round trip,
//! minor fault, cross-CPU TLB shootdown, atomic increment, STLB hit, cache and DRAM latency).
//! Everything else (CR3 writes, INVLPG, INVPCID, interrupt entry, IPI costs, paging-structure
//! cache sizes) is privileged or invisible: it is filled from the library profile of the closest
//! microarchitecture, and the comment on each line says exactly where every value came from.
//!
//! Measurements are bounded: each has a fixed iteration count and the whole set a time budget,
//! so detection finishes in well under a second.

use super::profile::*;
use crate::error::{Error, Result};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::Duration;
#[cfg(test)]
use std::time::Instant;

/// How to detect.
#[derive(Debug, Clone)]
pub struct DetectOptions {
    /// `name` of the profile; default "detected-<model>".
    pub name: Option<String>,
    /// Time the host (false: only read what it reports, and fill the rest from the library).
    pub measure: bool,
    /// Upper bound on the time all measurements together may take.
    pub budget: Duration,
}

impl Default for DetectOptions {
    fn default() -> Self {
        DetectOptions {
            name: None,
            measure: true,
            budget: Duration::from_millis(500),
        }
    }
}

/// A detected profile: its TOML text (with one `# machine detect:` comment per value) and the
/// parsed profile (the text is checked to parse and validate before it is returned).
#[derive(Debug, Clone)]
pub struct Detection {
    pub text: String,
    pub profile: MachineProfile,
}

/// Detects this host. Fails only if the result would not be a valid profile.
pub fn detect(opts: &DetectOptions) -> Result<Detection> {
    let facts = HostFacts::read();
    let (fallback, why) = closest_library_profile(&facts);
    let meas = if opts.measure {
        measure::run(&facts, opts.budget)
    } else {
        Measurements::default()
    };
    let text = emit(&facts, &fallback, &why, &meas, opts);
    let profile = super::parse("machine detect", &text)?;
    Ok(Detection { text, profile })
}

// ---------------------------------------------------------------------------------------------
// Facts the host reports.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(dead_code)] // Arm is only constructed on aarch64 builds
pub(crate) enum Vendor {
    Intel,
    Amd,
    Arm,
    Other,
}

/// A value together with how it was obtained.
#[derive(Debug, Clone)]
pub(crate) struct Got<T> {
    pub value: T,
    pub how: String,
}

fn got<T>(value: T, how: impl Into<String>) -> Got<T> {
    Got {
        value,
        how: how.into(),
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct CacheInfo {
    pub kib: u32,
    pub ways: u32,
    /// How many instances of this cache serve the CPUs of package 0.
    pub instances_in_package: u32,
}

#[derive(Debug, Clone)]
pub(crate) struct HostFacts {
    pub arch: Arch,
    pub vendor: Vendor,
    pub model: String,
    pub uarch: Option<String>,
    pub uarch_how: String,
    pub hypervisor: bool,
    pub frequency_ghz: Option<Got<f64>>,
    pub sockets: Got<u32>,
    pub cores_per_socket: Got<u32>,
    pub threads_per_core: Got<u32>,
    pub nodes_per_socket: Got<u32>,
    pub online_cpus: Vec<u32>,
    pub nodes: u32,
    /// Feature flags that could be read, with how; None = not readable here.
    pub pcid: Option<Got<bool>>,
    pub invpcid: Option<Got<bool>>,
    pub global_pages: Option<Got<bool>>,
    pub gbpages: Option<Got<bool>>,
    pub invlpgb: Option<Got<bool>>,
    pub lse_atomics: Option<Got<bool>>,
    pub tlbs: Vec<(TlbArray, String)>,
    pub l1d: Option<CacheInfo>,
    pub l2: Option<CacheInfo>,
    /// Highest-level unified cache (equal to L2 on parts without L3).
    pub llc: Option<CacheInfo>,
    pub pti_active: Option<bool>,
}

impl HostFacts {
    fn read() -> HostFacts {
        let online = read_sysfs("/sys/devices/system/cpu/online")
            .and_then(|s| parse_cpu_list(&s))
            .unwrap_or_else(|| {
                (0..std::thread::available_parallelism()
                    .map(|n| n.get() as u32)
                    .unwrap_or(1))
                    .collect()
            });
        let (sockets, cores, threads) = topology(&online);
        let nodes = read_sysfs("/sys/devices/system/node/online")
            .and_then(|s| parse_cpu_list(&s))
            .map(|v| v.len() as u32);
        let nodes_per_socket = match nodes {
            Some(n) if n >= sockets.value && n % sockets.value == 0 => {
                got(n / sockets.value, format!("/sys/devices/system/node/online lists {n} node(s) over {} socket(s)", sockets.value))
            }
            Some(n) => got(1, format!("/sys/devices/system/node/online lists {n} node(s), not a multiple of the socket count; 1 per socket assumed")),
            None => got(1, "no /sys/devices/system/node; one node per socket assumed"),
        };
        let mut f = HostFacts {
            arch: if cfg!(target_arch = "aarch64") {
                Arch::Aarch64
            } else {
                Arch::X86_64
            },
            vendor: Vendor::Other,
            model: String::new(),
            uarch: None,
            uarch_how: String::new(),
            hypervisor: false,
            frequency_ghz: None,
            sockets,
            cores_per_socket: cores,
            threads_per_core: threads,
            nodes_per_socket,
            nodes: nodes.unwrap_or(1),
            online_cpus: online,
            pcid: None,
            invpcid: None,
            global_pages: None,
            gbpages: None,
            invlpgb: None,
            lse_atomics: None,
            tlbs: vec![],
            l1d: None,
            l2: None,
            llc: None,
            pti_active: read_sysfs("/sys/devices/system/cpu/vulnerabilities/meltdown")
                .map(|s| s.contains("PTI")),
        };
        f.read_cpu();
        f.read_caches();
        f.read_frequency();
        f
    }

    #[cfg(target_arch = "x86_64")]
    fn read_cpu(&mut self) {
        let c = x86::Cpuid::read();
        self.vendor = c.vendor;
        self.model = c.brand.clone();
        self.hypervisor = c.hypervisor;
        let (uarch, how) = x86::microarchitecture(c.vendor, c.family, c.model);
        self.uarch = uarch;
        self.uarch_how = how;
        self.pcid = Some(got(c.pcid, "CPUID.01H:ECX[17] (PCID)"));
        self.invpcid = Some(got(c.invpcid, "CPUID.(EAX=07H,ECX=0):EBX[10] (INVPCID)"));
        self.global_pages = Some(got(c.pge, "CPUID.01H:EDX[13] (PGE)"));
        self.gbpages = Some(got(c.gbpages, "CPUID.80000001H:EDX[26] (Page1GB)"));
        self.invlpgb = Some(got(c.invlpgb, "CPUID.80000008H:EBX[3] (INVLPGB)"));
        self.tlbs = x86::tlbs(&c);
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn read_cpu(&mut self) {
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |key: &str| {
            info.lines()
                .find(|l| {
                    l.split(':')
                        .next()
                        .is_some_and(|k| k.trim().eq_ignore_ascii_case(key))
                })
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        };
        let implementer = field("CPU implementer")
            .and_then(|v| u32::from_str_radix(v.trim_start_matches("0x"), 16).ok());
        let part = field("CPU part")
            .and_then(|v| u32::from_str_radix(v.trim_start_matches("0x"), 16).ok());
        let (uarch, name) = arm_core(implementer, part);
        self.vendor = if cfg!(target_arch = "aarch64") {
            Vendor::Arm
        } else {
            Vendor::Other
        };
        self.uarch = uarch;
        self.uarch_how = format!(
            "/proc/cpuinfo CPU implementer {} part {}",
            implementer.map(|v| format!("{v:#x}")).unwrap_or("?".into()),
            part.map(|v| format!("{v:#x}")).unwrap_or("?".into())
        );
        self.model = field("model name")
            .or(name)
            .unwrap_or_else(|| "unknown CPU".into());
        if let Some(flags) = field("Features").or_else(|| field("flags")) {
            let has = |f: &str| flags.split_whitespace().any(|x| x == f);
            if cfg!(target_arch = "aarch64") {
                self.lse_atomics = Some(got(
                    has("atomics"),
                    "/proc/cpuinfo Features: 'atomics' (FEAT_LSE)",
                ));
            } else {
                self.pcid = Some(got(has("pcid"), "/proc/cpuinfo flags: 'pcid'"));
                self.invpcid = Some(got(has("invpcid"), "/proc/cpuinfo flags: 'invpcid'"));
                self.global_pages = Some(got(has("pge"), "/proc/cpuinfo flags: 'pge'"));
                self.gbpages = Some(got(has("pdpe1gb"), "/proc/cpuinfo flags: 'pdpe1gb'"));
                self.invlpgb = Some(got(has("invlpgb"), "/proc/cpuinfo flags: 'invlpgb'"));
            }
        }
    }

    fn read_caches(&mut self) {
        let base = "/sys/devices/system/cpu/cpu0/cache";
        let Ok(rd) = std::fs::read_dir(base) else {
            return;
        };
        let mut idx: Vec<String> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("index"))
            .collect();
        idx.sort();
        let package0: Vec<u32> = self
            .online_cpus
            .iter()
            .copied()
            .filter(|c| {
                read_sysfs(&format!(
                    "/sys/devices/system/cpu/cpu{c}/topology/physical_package_id"
                ))
                .map(|s| s == "0")
                .unwrap_or(true)
            })
            .collect();
        let mut best_unified: Option<(u32, CacheInfo)> = None;
        for i in idx {
            let get = |f: &str| read_sysfs(&format!("{base}/{i}/{f}"));
            let (Some(level), Some(kind), Some(size)) = (get("level"), get("type"), get("size"))
            else {
                continue;
            };
            let Ok(level) = level.parse::<u32>() else {
                continue;
            };
            let Some(kib) = parse_size_kib(&size) else {
                continue;
            };
            let ways = get("ways_of_associativity")
                .and_then(|w| w.parse::<u32>().ok())
                .unwrap_or(0);
            let instances: BTreeSet<String> = package0
                .iter()
                .filter_map(|c| {
                    read_sysfs(&format!(
                        "/sys/devices/system/cpu/cpu{c}/cache/{i}/shared_cpu_list"
                    ))
                })
                .collect();
            let info = CacheInfo {
                kib,
                ways,
                instances_in_package: (instances.len() as u32).max(1),
            };
            match (level, kind.as_str()) {
                (1, "Data") => self.l1d = Some(info),
                (_, "Unified") => {
                    if level == 2 {
                        self.l2 = Some(info.clone());
                    }
                    if !matches!(best_unified, Some((l, _)) if l >= level) {
                        best_unified = Some((level, info));
                    }
                }
                _ => {}
            }
        }
        self.llc = best_unified.map(|(_, c)| c);
    }

    fn read_frequency(&mut self) {
        if let Some(khz) = read_sysfs("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
            .and_then(|s| s.parse::<f64>().ok())
        {
            if khz > 0.0 {
                self.frequency_ghz = Some(got(
                    khz / 1e6,
                    "cpufreq cpuinfo_max_freq of cpu0 (the highest clock the kernel may run it at)",
                ));
                return;
            }
        }
        if let Some(ghz) = brand_ghz(&self.model) {
            self.frequency_ghz = Some(got(ghz, "nominal clock in the CPU brand string"));
            return;
        }
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        if let Some(mhz) = info
            .lines()
            .find(|l| l.starts_with("cpu MHz"))
            .and_then(|l| l.split_once(':'))
            .and_then(|(_, v)| v.trim().parse::<f64>().ok())
        {
            if mhz > 0.0 {
                self.frequency_ghz = Some(got(mhz / 1000.0, "/proc/cpuinfo 'cpu MHz' of the first CPU (current clock; a guest sees the host's TSC rate)"));
            }
        }
    }
}

fn read_sysfs(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Parses a kernel CPU list such as "0-3,8,10-11".
pub(crate) fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut out = vec![];
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?);
                if b < a || b - a > 65536 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().ok()?),
        }
    }
    if out.is_empty() {
        None
    } else {
        Some(out)
    }
}

/// "32K", "1024K", "32M" -> KiB.
pub(crate) fn parse_size_kib(s: &str) -> Option<u32> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1),
        'M' | 'm' => (&s[..s.len() - 1], 1024),
        'G' | 'g' => (&s[..s.len() - 1], 1024 * 1024),
        _ => (s, 1),
    };
    num.trim()
        .parse::<u32>()
        .ok()?
        .checked_mul(mult)
        .filter(|&k| k > 0)
}

/// "Intel(R) Xeon(R) Platinum 8160 CPU @ 2.10GHz" -> 2.1.
pub(crate) fn brand_ghz(brand: &str) -> Option<f64> {
    let (_, tail) = brand.rsplit_once('@')?;
    let t = tail.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("GHz") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix("MHz") {
        (n, 0.001)
    } else {
        return None;
    };
    num.trim()
        .parse::<f64>()
        .ok()
        .map(|v| v * scale)
        .filter(|v| *v > 0.05 && *v < 10.0)
}

fn topology(online: &[u32]) -> (Got<u32>, Got<u32>, Got<u32>) {
    let n = online.len().max(1) as u32;
    let mut packages = BTreeSet::new();
    let mut max_siblings = 0u32;
    let mut read_any = false;
    for c in online {
        let t = format!("/sys/devices/system/cpu/cpu{c}/topology");
        if let Some(p) = read_sysfs(&format!("{t}/physical_package_id")) {
            read_any = true;
            packages.insert(p);
        }
        let sib = read_sysfs(&format!("{t}/thread_siblings_list"))
            .or_else(|| read_sysfs(&format!("{t}/core_cpus_list")));
        if let Some(list) = sib.and_then(|s| parse_cpu_list(&s)) {
            max_siblings = max_siblings.max(list.len() as u32);
        }
    }
    let sockets = if read_any {
        packages.len().max(1) as u32
    } else {
        1
    };
    let threads = max_siblings.max(1);
    let cores = n.div_ceil(sockets * threads).max(1);
    let how_sockets = if read_any {
        format!("distinct topology/physical_package_id over the {n} online CPU(s)")
    } else {
        "no sysfs topology; one socket assumed".to_string()
    };
    (
        got(sockets, how_sockets),
        got(
            cores,
            format!("{n} online CPU(s) / {sockets} socket(s) / {threads} thread(s) per core"),
        ),
        got(
            threads,
            "largest topology/thread_siblings_list of an online CPU",
        ),
    )
}

// ---------------------------------------------------------------------------------------------
// Microarchitecture names (spelled as in the library's `cpu.microarchitecture`).

/// arm64 MIDR implementer/part -> (microarchitecture, marketing name).
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
pub(crate) fn arm_core(
    implementer: Option<u32>,
    part: Option<u32>,
) -> (Option<String>, Option<String>) {
    let s = |a: &str, b: &str| (Some(a.to_string()), Some(b.to_string()));
    match (implementer, part) {
        (Some(0x41), Some(0xd03)) => s("Cortex-A53", "Arm Cortex-A53"),
        (Some(0x41), Some(0xd07)) => s("Cortex-A57", "Arm Cortex-A57"),
        (Some(0x41), Some(0xd08)) => s("Cortex-A72", "Arm Cortex-A72"),
        (Some(0x41), Some(0xd0b)) => s("Cortex-A76", "Arm Cortex-A76"),
        (Some(0x41), Some(0xd0c)) => s("Neoverse N1", "Arm Neoverse N1"),
        (Some(0x41), Some(0xd40)) => s("Neoverse V1", "Arm Neoverse V1"),
        (Some(0x41), Some(0xd49)) => s("Neoverse N2", "Arm Neoverse N2"),
        (Some(0x41), Some(0xd4f)) => s("Neoverse V2", "Arm Neoverse V2"),
        (Some(0x43), Some(0x0af)) | (Some(0x42), Some(0x516)) => s("Vulcan", "Marvell ThunderX2"),
        (Some(0x43), Some(0x0a1)) => s("ThunderX", "Cavium ThunderX"),
        (Some(0xc0), Some(0xac3)) => s("AmpereOne", "AmpereOne"),
        _ => (None, None),
    }
}

/// Library profile used for what cannot be detected: same microarchitecture if the library has
/// one, else the same family (e.g. Skylake for Skylake-SP), else a per-vendor default.
pub(crate) fn closest_library_profile(f: &HostFacts) -> (MachineProfile, String) {
    let lib: Vec<MachineProfile> = super::names()
        .into_iter()
        .filter_map(|n| super::load(n).ok())
        .collect();
    let arch_ok: Vec<&MachineProfile> = lib.iter().filter(|m| m.arch == f.arch).collect();
    if let Some(u) = &f.uarch {
        if let Some(m) = arch_ok
            .iter()
            .find(|m| m.cpu.microarchitecture.eq_ignore_ascii_case(u))
        {
            return (
                (*m).clone(),
                format!("machines/{}.toml (same microarchitecture: {u})", m.name),
            );
        }
        let family = |s: &str| s.split('-').next().unwrap_or(s).trim().to_ascii_lowercase();
        if let Some(m) = arch_ok
            .iter()
            .find(|m| family(&m.cpu.microarchitecture) == family(u))
        {
            return (
                (*m).clone(),
                format!(
                    "machines/{}.toml (same core family as {u}: {})",
                    m.name, m.cpu.microarchitecture
                ),
            );
        }
    }
    let preferred: &[&str] = match (f.arch, f.vendor) {
        (Arch::Aarch64, _) => &["altra-neoverse-n1", "cortex-a57-opteron-a1100"],
        (_, Vendor::Amd) => &["epyc-7763-2s"],
        _ => &["skylake-i7-6700k", "haswell-i7-4770"],
    };
    let what = f
        .uarch
        .clone()
        .unwrap_or_else(|| "an unrecognised microarchitecture".into());
    for p in preferred {
        if let Some(m) = arch_ok.iter().find(|m| m.name == *p) {
            return (
                (*m).clone(),
                format!(
                    "machines/{}.toml (no library profile of {what}; nearest by vendor and era)",
                    m.name
                ),
            );
        }
    }
    match arch_ok.first().copied().or(lib.first()) {
        Some(m) => (m.clone(), format!("machines/{}.toml (no library profile of {what}; first library profile of this architecture)", m.name)),
        None => (builtin_default(f.arch), "built-in conservative defaults (the machine library is empty)".into()),
    }
}

/// Only reached with an empty library: round, conservative numbers, stated as such.
fn builtin_default(arch: Arch) -> MachineProfile {
    let text = format!(
        r#"name = "default"
description = "conservative defaults"
arch = "{}"
[topology]
sockets = 1
cores_per_socket = 1
threads_per_core = 1
numa_nodes_per_socket = 1
[cpu]
model = "unknown"
microarchitecture = "unknown"
frequency_ghz = 2.0
[cpu.features]
global_pages = true
tlbi_broadcast = {}
[[tlb]]
name = "l1d-4k"
level = 1
serves = "data"
page_sizes = ["4k"]
entries = 64
ways = 4
hit_cycles = 0
[paging_structure_cache]
pml4e_entries = 2
pdpte_entries = 4
pde_entries = 32
[memory]
l1d_kib = 32
l1d_ways = 8
l1d_hit_cycles = 4
l2_kib = 256
l2_ways = 8
l2_hit_cycles = 12
llc_kib_per_socket = 8192
llc_ways = 16
llc_hit_cycles = 40
dram_local_ns = 80.0
dram_remote_ns = 130.0
[costs]
syscall_roundtrip_cycles = 150
cr3_write_noflush_cycles = 250
cr3_write_flush_cycles = 250
invlpg_cycles = 250
{}interrupt_entry_cycles = 400
ipi_send_cycles = 200
[costs.ipi_latency_ns]
same_core_ns = 1000.0
same_socket_ns = 1500.0
remote_socket_ns = 2500.0
"#,
        if arch == Arch::Aarch64 {
            "aarch64"
        } else {
            "x86_64"
        },
        arch == Arch::Aarch64,
        if arch == Arch::Aarch64 {
            "tlbi_broadcast_ns = 500.0\n"
        } else {
            ""
        }
    );
    toml::from_str(&text).expect("built-in default profile is valid TOML")
}

// ---------------------------------------------------------------------------------------------
// x86: CPUID.

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Vendor;
    use crate::machine::profile::{PageSizeName, TlbArray, TlbServes};
    use core::arch::x86_64::{__cpuid_count, CpuidResult};

    #[allow(unused_unsafe)]
    fn cpuid(leaf: u32, sub: u32) -> CpuidResult {
        // SAFETY: CPUID exists on every x86_64 processor and has no side effects.
        unsafe { __cpuid_count(leaf, sub) }
    }

    pub(crate) struct Cpuid {
        pub vendor: Vendor,
        pub family: u32,
        pub model: u32,
        pub brand: String,
        pub hypervisor: bool,
        pub pcid: bool,
        pub invpcid: bool,
        pub pge: bool,
        pub gbpages: bool,
        pub invlpgb: bool,
        pub max_leaf: u32,
        pub max_ext: u32,
    }

    impl Cpuid {
        pub fn read() -> Cpuid {
            let l0 = cpuid(0, 0);
            let mut v = Vec::with_capacity(12);
            for r in [l0.ebx, l0.edx, l0.ecx] {
                v.extend_from_slice(&r.to_le_bytes());
            }
            let vendor = match &v[..] {
                b"GenuineIntel" => Vendor::Intel,
                b"AuthenticAMD" | b"HygonGenuine" => Vendor::Amd,
                _ => Vendor::Other,
            };
            let l1 = cpuid(1, 0);
            let base_family = (l1.eax >> 8) & 0xf;
            let family = if base_family == 0xf {
                base_family + ((l1.eax >> 20) & 0xff)
            } else {
                base_family
            };
            let model = if base_family == 0x6 || base_family == 0xf {
                ((l1.eax >> 12) & 0xf0) | ((l1.eax >> 4) & 0xf)
            } else {
                (l1.eax >> 4) & 0xf
            };
            let l7 = if l0.eax >= 7 {
                cpuid(7, 0)
            } else {
                CpuidResult {
                    eax: 0,
                    ebx: 0,
                    ecx: 0,
                    edx: 0,
                }
            };
            let max_ext = cpuid(0x8000_0000, 0).eax;
            let e1 = if max_ext >= 0x8000_0001 {
                cpuid(0x8000_0001, 0).edx
            } else {
                0
            };
            let e8 = if max_ext >= 0x8000_0008 {
                cpuid(0x8000_0008, 0).ebx
            } else {
                0
            };
            let mut brand = String::new();
            if max_ext >= 0x8000_0004 {
                let mut bytes = vec![];
                for leaf in 0x8000_0002..=0x8000_0004u32 {
                    let r = cpuid(leaf, 0);
                    for x in [r.eax, r.ebx, r.ecx, r.edx] {
                        bytes.extend_from_slice(&x.to_le_bytes());
                    }
                }
                brand = String::from_utf8_lossy(&bytes)
                    .trim_matches(char::from(0))
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
            }
            if brand.is_empty() {
                brand = String::from_utf8_lossy(&v).into_owned();
            }
            Cpuid {
                vendor,
                family,
                model,
                brand,
                hypervisor: l1.ecx & (1 << 31) != 0,
                pcid: l1.ecx & (1 << 17) != 0,
                invpcid: l7.ebx & (1 << 10) != 0,
                pge: l1.edx & (1 << 13) != 0,
                gbpages: e1 & (1 << 26) != 0,
                invlpgb: vendor == Vendor::Amd && e8 & (1 << 3) != 0,
                max_leaf: l0.eax,
                max_ext,
            }
        }
    }

    /// (microarchitecture, how) from the CPUID signature.
    pub(crate) fn microarchitecture(
        vendor: Vendor,
        family: u32,
        model: u32,
    ) -> (Option<String>, String) {
        let how = format!("CPUID signature family {family:#x} model {model:#x}");
        let name = match (vendor, family) {
            (Vendor::Intel, 6) => match model {
                0x1a | 0x1e | 0x1f | 0x2e => Some("Nehalem"),
                0x25 | 0x2c | 0x2f => Some("Westmere"),
                0x2a => Some("Sandy Bridge"),
                0x2d => Some("Sandy Bridge-EP"),
                0x3a => Some("Ivy Bridge"),
                0x3e => Some("Ivy Bridge-EP"),
                0x3c | 0x45 | 0x46 => Some("Haswell"),
                0x3f => Some("Haswell-EP"),
                0x3d | 0x47 => Some("Broadwell"),
                0x4f | 0x56 => Some("Broadwell-EP"),
                0x4e | 0x5e | 0x8e | 0x9e | 0xa5 | 0xa6 => Some("Skylake"),
                0x55 => Some("Skylake-SP"),
                0x7d | 0x7e => Some("Ice Lake"),
                0x6a | 0x6c => Some("Ice Lake-SP"),
                0x8c | 0x8d => Some("Tiger Lake"),
                0x97 | 0x9a | 0xb7 | 0xba | 0xbf => Some("Golden Cove"),
                0x8f | 0xcf => Some("Golden Cove-SP"),
                0x37 | 0x4a | 0x4d | 0x5a | 0x5d | 0x4c => Some("Silvermont"),
                0x5c | 0x5f => Some("Goldmont"),
                0x7a => Some("Goldmont Plus"),
                0x86 | 0x96 | 0x9c => Some("Tremont"),
                _ => None,
            },
            (Vendor::Amd, 0x17) => Some(if model < 0x30 { "Zen" } else { "Zen 2" }),
            (Vendor::Amd, 0x19) => Some(match model {
                0x10..=0x1f | 0x60..=0x7f | 0xa0..=0xaf => "Zen 4",
                _ => "Zen 3",
            }),
            (Vendor::Amd, 0x1a) => Some("Zen 5"),
            _ => None,
        };
        (name.map(str::to_string), how)
    }

    fn sizes(four_k: bool, two_m: bool, one_g: bool) -> Vec<PageSizeName> {
        let mut v = vec![];
        if four_k {
            v.push(PageSizeName::Size4K);
        }
        if two_m {
            v.push(PageSizeName::Size2M);
        }
        if one_g {
            v.push(PageSizeName::Size1G);
        }
        v
    }

    fn array(
        name: String,
        level: u8,
        serves: TlbServes,
        page_sizes: Vec<PageSizeName>,
        entries: u32,
        ways: u32,
    ) -> TlbArray {
        TlbArray {
            name,
            level,
            serves,
            page_sizes,
            entries,
            ways,
            hit_cycles: 0,
            per_thread: false,
        }
    }

    fn name_of(level: u8, serves: TlbServes, sizes: &[PageSizeName]) -> String {
        let s = match serves {
            TlbServes::Data => "d",
            TlbServes::Instruction => "i",
            TlbServes::Unified => "",
        };
        let p: Vec<&str> = sizes
            .iter()
            .map(|z| match z {
                PageSizeName::Size4K => "4k",
                PageSizeName::Size2M => "2m",
                PageSizeName::Size1G => "1g",
            })
            .collect();
        if level == 2 && serves == TlbServes::Unified {
            format!("stlb-{}", p.join("-"))
        } else {
            format!("l{level}{s}-{}", p.join("-"))
        }
    }

    /// TLB arrays from CPUID: leaf 18H (deterministic address translation parameters) where the
    /// CPU has it, else the leaf 2 descriptors (Intel), else 80000005H/80000006H/80000019H (AMD).
    pub(crate) fn tlbs(c: &Cpuid) -> Vec<(TlbArray, String)> {
        let mut out = vec![];
        if c.vendor == Vendor::Intel && c.max_leaf >= 0x18 {
            let max_sub = cpuid(0x18, 0).eax;
            for sub in 0..=max_sub.min(31) {
                let r = cpuid(0x18, sub);
                let kind = r.edx & 0x1f;
                if kind == 0 {
                    continue;
                }
                let serves = match kind {
                    1 | 4 => TlbServes::Data,
                    2 => TlbServes::Instruction,
                    3 => TlbServes::Unified,
                    _ => continue, // 5 = store-only: a store-side copy of a load TLB, not modelled
                };
                let level = ((r.edx >> 5) & 7) as u8;
                let full = r.edx & (1 << 8) != 0;
                let ways = r.ebx >> 16;
                let sets = r.ecx;
                let entries = ways.saturating_mul(sets);
                let ps = sizes(r.ebx & 1 != 0, r.ebx & 6 != 0, r.ebx & 8 != 0);
                if entries == 0 || ps.is_empty() || !(1..=2).contains(&level) {
                    continue;
                }
                let sharing = ((r.edx >> 14) & 0xfff) + 1;
                let mut a = array(
                    name_of(level, serves, &ps),
                    level,
                    serves,
                    ps,
                    entries,
                    if full { entries } else { ways },
                );
                a.per_thread = false;
                out.push((a, format!("CPUID.(EAX=18H,ECX={sub}): type {kind}, level {level}, {ways} ways x {sets} sets{}, shared by up to {sharing} logical processor(s)", if full { ", fully associative" } else { "" })));
            }
            if !out.is_empty() {
                return out;
            }
        }
        if c.vendor == Vendor::Intel && c.max_leaf >= 2 {
            let r = cpuid(2, 0);
            let mut bytes = vec![];
            for (i, reg) in [r.eax, r.ebx, r.ecx, r.edx].into_iter().enumerate() {
                if reg & (1 << 31) != 0 {
                    continue;
                }
                for (j, b) in reg.to_le_bytes().into_iter().enumerate() {
                    if !(i == 0 && j == 0) && b != 0 {
                        bytes.push(b);
                    }
                }
            }
            for b in bytes {
                for (level, serves, ps, entries, ways) in super::leaf2_descriptor(b) {
                    let a = array(
                        name_of(level, serves, &ps),
                        level,
                        serves,
                        ps,
                        entries,
                        ways,
                    );
                    out.push((a, format!("CPUID leaf 2 descriptor {b:#04x} (Intel SDM vol. 2A, CPUID, Table 3-12)")));
                }
            }
            if !out.is_empty() {
                return out;
            }
        }
        if c.vendor == Vendor::Amd && c.max_ext >= 0x8000_0006 {
            let regs = |leaf| {
                let r = cpuid(leaf, 0);
                [r.eax, r.ebx]
            };
            let one_g = (c.max_ext >= 0x8000_0019).then(|| regs(0x8000_0019));
            let fields = super::amd_tlb_fields(regs(0x8000_0005), regs(0x8000_0006), one_g);
            for (level, serves, size, entries, ways, how) in fields {
                let ps = vec![size];
                out.push((
                    array(
                        name_of(level, serves, &ps),
                        level,
                        serves,
                        ps,
                        entries,
                        ways,
                    ),
                    how,
                ));
            }
        }
        out
    }
}

/// AMD L2/L3 associativity encoding (AMD CPUID specification, CPUID Fn8000_0006): None when the
/// array is absent or the code reserved, Some(entries) for fully associative.
pub(crate) fn amd_l2_ways(code: u32, entries: u32) -> Option<u32> {
    match code {
        0x1 => Some(1),
        0x2 => Some(2),
        0x3 => Some(3),
        0x4 => Some(4),
        0x5 => Some(6),
        0x6 => Some(8),
        0x8 => Some(16),
        0xa => Some(32),
        0xb => Some(48),
        0xc => Some(64),
        0xd => Some(96),
        0xe => Some(128),
        0xf => Some(entries),
        _ => None,
    }
}

/// AMD's TLB fields (AMD CPUID specification, Fn8000_0005, Fn8000_0006, Fn8000_0019), from the
/// [EAX, EBX] of each leaf: (level, serves, page size, entries, ways, where it was read).
/// Data TLBs sit in bits 31:16 and instruction TLBs in 15:0; 8000_0005 packs entries in 8
/// bits and ways in 8 (0xFF: fully associative), the others 12 and a 4-bit code. Arrays with
/// no entries are left out; 8000_0019's instruction halves are not read.
pub(crate) fn amd_tlb_fields(
    l1: [u32; 2],
    l2: [u32; 2],
    one_g: Option<[u32; 2]>,
) -> Vec<(u8, TlbServes, PageSizeName, u32, u32, String)> {
    use PageSizeName::{Size1G, Size2M, Size4K};
    use TlbServes::{Data, Instruction};
    let (eax, ebx) = (0, 1);
    let mut fields = vec![
        (0x8000_0005u32, ebx, l1, 1u8, Data, Size4K),
        (0x8000_0005, ebx, l1, 1, Instruction, Size4K),
        (0x8000_0005, eax, l1, 1, Data, Size2M),
        (0x8000_0005, eax, l1, 1, Instruction, Size2M),
        (0x8000_0006, ebx, l2, 2, Data, Size4K),
        (0x8000_0006, ebx, l2, 2, Instruction, Size4K),
        (0x8000_0006, eax, l2, 2, Data, Size2M),
        (0x8000_0006, eax, l2, 2, Instruction, Size2M),
    ];
    if let Some(g) = one_g {
        fields.push((0x8000_0019, eax, g, 1, Data, Size1G));
        fields.push((0x8000_0019, ebx, g, 2, Data, Size1G));
    }
    let mut out = vec![];
    for (leaf, reg, regs, level, serves, size) in fields {
        let data = serves == Data;
        let half = if data {
            regs[reg] >> 16
        } else {
            regs[reg] & 0xffff
        };
        let (entries, ways) = if leaf == 0x8000_0005 {
            let code = half >> 8;
            (
                half & 0xff,
                if code == 0xff {
                    None
                } else {
                    Some(code.max(1))
                },
            )
        } else {
            (half & 0xfff, amd_l2_ways(half >> 12, half & 0xfff))
        };
        if entries == 0 {
            continue;
        }
        let how = format!(
            "CPUID.{leaf:X}H:{}[{}] (L{level} {} {})",
            if reg == eax { "EAX" } else { "EBX" },
            if data { "31:16" } else { "15:0" },
            if data { "DTLB" } else { "ITLB" },
            match size {
                Size4K => "4K",
                Size2M => "2M/4M",
                Size1G => "1G",
            }
        );
        out.push((level, serves, size, entries, ways.unwrap_or(entries), how));
    }
    out
}

/// Intel CPUID leaf 2 TLB descriptors (Intel SDM vol. 2A, CPUID, Table 3-12), as
/// (level, serves, page sizes, entries, ways). Cache and prefetch descriptors give nothing.
pub(crate) fn leaf2_descriptor(b: u8) -> Vec<(u8, TlbServes, Vec<PageSizeName>, u32, u32)> {
    use PageSizeName::*;
    use TlbServes::*;
    let k = || vec![Size4K];
    let m = || vec![Size2M];
    let km = || vec![Size4K, Size2M];
    let one =
        |level: u8, s: TlbServes, p: Vec<PageSizeName>, e: u32, w: u32| vec![(level, s, p, e, w)];
    match b {
        0x01 => one(1, Instruction, k(), 32, 4),
        0x02 => one(1, Instruction, m(), 2, 2),
        0x03 => one(1, Data, k(), 64, 4),
        0x04 => one(1, Data, m(), 8, 4),
        0x05 => one(1, Data, m(), 32, 4),
        0x0b => one(1, Instruction, m(), 4, 4),
        0x4f => one(1, Instruction, k(), 32, 32),
        0x50 => one(1, Instruction, km(), 64, 64),
        0x51 => one(1, Instruction, km(), 128, 128),
        0x52 => one(1, Instruction, km(), 256, 256),
        0x55 => one(1, Instruction, m(), 7, 7),
        0x56 => one(1, Data, m(), 16, 4),
        0x57 => one(1, Data, k(), 16, 4),
        0x59 => one(1, Data, k(), 16, 16),
        0x5a => one(1, Data, m(), 32, 4),
        0x5b => one(1, Data, km(), 64, 64),
        0x5c => one(1, Data, km(), 128, 128),
        0x5d => one(1, Data, km(), 256, 256),
        0x61 => one(1, Instruction, k(), 48, 48),
        0x63 => vec![(1, Data, m(), 32, 4), (1, Data, vec![Size1G], 4, 4)],
        0x64 => one(1, Data, k(), 512, 4),
        0x6a => one(1, Data, k(), 64, 8),
        0x6b => one(1, Data, k(), 256, 8),
        0x6c => one(1, Data, m(), 128, 8),
        0x6d => one(1, Data, vec![Size1G], 16, 16),
        0x76 => one(1, Instruction, m(), 8, 8),
        0xa0 => one(1, Data, k(), 32, 32),
        0xb0 => one(1, Instruction, k(), 128, 4),
        0xb1 => one(1, Instruction, m(), 8, 4),
        0xb2 => one(1, Instruction, k(), 64, 4),
        0xb3 => one(1, Data, k(), 128, 4),
        0xb4 => one(2, Data, k(), 256, 4),
        0xb5 => one(1, Instruction, k(), 64, 8),
        0xb6 => one(1, Instruction, k(), 128, 8),
        0xba => one(2, Data, k(), 64, 4),
        0xc0 => one(1, Data, km(), 8, 4),
        0xc1 => one(2, Unified, km(), 1024, 8),
        0xc2 => one(1, Data, km(), 16, 4),
        0xc3 => vec![
            (2, Unified, km(), 1536, 6),
            (2, Unified, vec![Size1G], 16, 4),
        ],
        0xc4 => one(1, Data, m(), 32, 4),
        0xca => one(2, Unified, k(), 512, 4),
        _ => vec![],
    }
}

/// Makes an array fit the model: entries a multiple of ways and a power-of-two number of sets.
/// Returns a note when it had to change the geometry.
pub(crate) fn fit_tlb_geometry(a: &mut TlbArray) -> Option<String> {
    if a.entries == 0 {
        return None;
    }
    if a.ways == 0 || a.ways > a.entries {
        a.ways = a.entries;
    }
    let sets = a.entries / a.ways;
    if a.entries % a.ways == 0 && sets.is_power_of_two() {
        return None;
    }
    let (old_e, old_w) = (a.entries, a.ways);
    // largest power of two that divides the entry count and gives at least the reported ways
    let mut s = 1u32;
    while s * 2 <= (a.entries / a.ways).max(1) && a.entries % (s * 2) == 0 {
        s *= 2;
    }
    a.ways = a.entries / s;
    Some(format!("reported {old_e} entries x {old_w} ways; modelled as {} sets x {} ways (the model needs a power-of-two set count)", s, a.ways))
}

// ---------------------------------------------------------------------------------------------
// Measurements.

#[derive(Debug, Clone, Default)]
pub(crate) struct Measurements {
    pub syscall_ns: Option<f64>,
    pub minor_fault_ns: Option<f64>,
    pub shootdown_ns: Option<f64>,
    pub shootdown_note: Option<String>,
    pub atomic_ns: Option<f64>,
    pub stlb_hit_ns: Option<f64>,
    pub l1_ns: Option<f64>,
    pub l2_ns: Option<f64>,
    pub llc_ns: Option<f64>,
    pub dram_local_ns: Option<f64>,
    pub dram_remote_ns: Option<f64>,
    /// One modified cache line moved between two CPUs, per distance (same core, same socket,
    /// other socket: LINE_DISTANCES), with the pair measured.
    pub line_transfer: [Option<(f64, usize, usize)>; 3],
    /// Measurements left out because the time budget ran out.
    pub skipped: Vec<&'static str>,
}

/// The `[costs.line_transfer_ns]` keys, in the order of `Measurements::line_transfer`.
const LINE_DISTANCES: [&str; 3] = ["same_core_ns", "same_socket_ns", "remote_socket_ns"];

#[cfg(target_os = "linux")]
mod measure {
    use super::{HostFacts, Measurements};
    use std::hint::black_box;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    struct Budget {
        start: Instant,
        limit: Duration,
    }
    impl Budget {
        fn left(&self) -> bool {
            self.start.elapsed() < self.limit
        }
    }

    pub(crate) fn run(f: &HostFacts, limit: Duration) -> Measurements {
        let b = Budget {
            start: Instant::now(),
            limit,
        };
        let mut m = Measurements::default();
        macro_rules! step {
            ($name:literal, $e:expr) => {
                if b.left() {
                    $e
                } else {
                    m.skipped.push($name);
                }
            };
        }
        step!("syscall", m.syscall_ns = syscall_roundtrip());
        step!("atomic", m.atomic_ns = atomic_increment());
        step!("minor fault", m.minor_fault_ns = minor_fault());
        step!("stlb", m.stlb_hit_ns = stlb_hit(f));
        step!("line transfer", m.line_transfer = line_transfers());
        step!("shootdown", {
            let (v, note) = shootdown(f);
            m.shootdown_ns = v;
            m.shootdown_note = note;
        });
        if let Some(l1) = &f.l1d {
            step!(
                "l1 latency",
                m.l1_ns = chase_latency((l1.kib as usize * 1024) / 2, 20_000)
            );
        }
        if let (Some(l1), Some(l2)) = (&f.l1d, &f.l2) {
            let bytes = ((l1.kib + l2.kib) as usize * 1024) / 2;
            step!("l2 latency", m.l2_ns = chase_latency(bytes, 20_000));
        }
        let l2_kib = f.l2.as_ref().map_or(256, |c| c.kib);
        if let Some(llc) = f.llc.as_ref().filter(|c| c.kib > 2 * l2_kib) {
            // a quarter of one LLC instance (as cpu0 sees it), at least four times the L2: well
            // inside the LLC even where it is shared with other cores or tenants
            let bytes = (llc.kib as usize * 1024 / 4)
                .max(4 * l2_kib as usize * 1024)
                .min(llc.kib as usize * 1024 * 3 / 4);
            step!("llc latency", m.llc_ns = chase_latency(bytes, 20_000));
        }
        let llc_bytes = f.llc.as_ref().map_or(8 << 20, |c| {
            c.kib as usize * 1024 * c.instances_in_package.max(1) as usize
        });
        let dram_bytes = (2 * llc_bytes + (16 << 20)).clamp(32 << 20, 192 << 20);
        step!(
            "dram latency",
            m.dram_local_ns = dram_latency(dram_bytes, None)
        );
        if f.nodes > 1 {
            step!(
                "remote dram latency",
                m.dram_remote_ns = remote_dram(f, dram_bytes)
            );
        }
        m
    }

    fn now_ns(t: Instant) -> f64 {
        t.elapsed().as_nanos() as f64
    }

    fn median(mut v: Vec<f64>) -> Option<f64> {
        v.retain(|x| x.is_finite() && *x > 0.0);
        if v.is_empty() {
            return None;
        }
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        Some(v[v.len() / 2])
    }

    fn syscall_roundtrip() -> Option<f64> {
        let mut batches = vec![];
        for _ in 0..9 {
            let t = Instant::now();
            for _ in 0..400 {
                // SAFETY: getppid takes no arguments and cannot fail.
                black_box(unsafe { libc::syscall(libc::SYS_getppid) });
            }
            batches.push(now_ns(t) / 400.0);
        }
        median(batches)
    }

    fn atomic_increment() -> Option<f64> {
        let x = AtomicU64::new(0);
        let mut batches = vec![];
        for _ in 0..7 {
            let t = Instant::now();
            for _ in 0..5_000 {
                x.fetch_add(1, Ordering::SeqCst);
            }
            batches.push(now_ns(t) / 5_000.0);
        }
        black_box(x.load(Ordering::Relaxed));
        median(batches)
    }

    /// Anonymous private mapping; released on drop.
    struct Map {
        ptr: *mut u8,
        len: usize,
    }
    impl Map {
        fn new(len: usize, huge: bool) -> Option<Map> {
            // SAFETY: a fresh anonymous mapping; the kernel picks the address.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return None;
            }
            // SAFETY: advice on our own mapping; failure only loses the hint.
            unsafe {
                libc::madvise(
                    p,
                    len,
                    if huge {
                        libc::MADV_HUGEPAGE
                    } else {
                        libc::MADV_NOHUGEPAGE
                    },
                )
            };
            Some(Map {
                ptr: p as *mut u8,
                len,
            })
        }
    }
    impl Drop for Map {
        fn drop(&mut self) {
            // SAFETY: unmapping exactly what `new` mapped.
            unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
        }
    }

    fn minor_fault() -> Option<f64> {
        const PAGES: usize = 128;
        let mut per = vec![];
        for _ in 0..3 {
            let map = Map::new(PAGES * 4096, false)?;
            let t = Instant::now();
            for i in 0..PAGES {
                // SAFETY: within the mapping.
                unsafe { std::ptr::write_volatile(map.ptr.add(i * 4096), 1u8) };
            }
            per.push(now_ns(t) / PAGES as f64);
        }
        median(per)
    }

    /// xorshift64*: a fixed, seeded order so runs are comparable.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Builds a random cycle through `slots` (byte offsets in `map`) and chases it `steps` times;
    /// returns ns per load.
    fn chase(map: &Map, n: usize, slot: impl Fn(usize) -> usize, steps: usize) -> Option<f64> {
        chase_with(map, n, slot, steps, true, None)
    }

    /// As `chase`; without `warm` the cycle is not walked before timing, and `evict` (a second
    /// mapping) is written through after the cycle is built, to push it out of every cache.
    fn chase_with(
        map: &Map,
        n: usize,
        slot: impl Fn(usize) -> usize,
        steps: usize,
        warm: bool,
        evict: Option<&Map>,
    ) -> Option<f64> {
        if n < 2 {
            return None;
        }
        let mut order: Vec<usize> = (0..n).collect();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for i in (1..order.len()).rev() {
            let j = rng.below(i + 1);
            order.swap(i, j);
        }
        for w in 0..order.len() {
            let from = slot(order[w]);
            let to = slot(order[(w + 1) % order.len()]);
            // SAFETY: both offsets are inside the mapping and 8-byte aligned.
            unsafe {
                std::ptr::write_volatile(map.ptr.add(from) as *mut usize, map.ptr.add(to) as usize)
            };
        }
        let mut p = map.ptr.wrapping_add(slot(order[0])) as *const usize;
        if let Some(e) = evict {
            // SAFETY: writing within the eviction mapping.
            unsafe { std::ptr::write_bytes(e.ptr, 0x5a, e.len) };
        }
        if warm {
            // once around the cycle (bounded)
            p = chase_loop(p, n.min(steps));
        }
        let t = Instant::now();
        p = chase_loop(p, steps);
        let ns = now_ns(t) / steps as f64;
        black_box(p);
        Some(ns)
    }

    /// `steps` dependent loads starting at `p`. In assembly where we can, so the number does not
    /// depend on the optimisation level kharden was built with.
    fn chase_loop(mut p: *const usize, steps: usize) -> *const usize {
        if steps == 0 {
            return p;
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY: every slot on the cycle holds the address of the next slot, so each load reads
        // mapped memory; the loop touches no other state.
        unsafe {
            std::arch::asm!("2:", "mov {p}, qword ptr [{p}]", "dec {n}", "jnz 2b", p = inout(reg) p, n = inout(reg) steps => _, options(nostack, readonly));
        }
        #[cfg(target_arch = "aarch64")]
        // SAFETY: as above.
        unsafe {
            std::arch::asm!("2:", "ldr {p}, [{p}]", "subs {n}, {n}, #1", "b.ne 2b", p = inout(reg) p, n = inout(reg) steps => _, options(nostack, readonly));
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        for _ in 0..steps {
            // SAFETY: as above.
            p = unsafe { std::ptr::read_volatile(p) } as *const usize;
        }
        p
    }

    /// Load-to-use latency of a random pointer chase over `bytes` (one slot per 64-byte line,
    /// on huge pages where the kernel grants them so TLB misses stay out of the number).
    fn chase_latency(bytes: usize, steps: usize) -> Option<f64> {
        let lines = (bytes / 64).max(2);
        let len = (lines * 64 + (2 << 20)).next_multiple_of(2 << 20);
        let map = Map::new(len, true)?;
        chase(&map, lines, |i| i * 64, steps)
    }

    /// DRAM load-to-use latency: a cycle through one line in each of 16384 pages (64 MiB of
    /// huge pages, so few TLB misses), pushed out of the caches by writing `evict_bytes`
    /// elsewhere, then timed cold for 10000 loads.
    fn dram_latency(evict_bytes: usize, node: Option<u32>) -> Option<f64> {
        const PAGES: usize = 16384;
        let map = Map::new(PAGES * 4096, true)?;
        if let Some(n) = node {
            bind_to_node(&map, n)?;
        }
        let evict = Map::new(evict_bytes, true)?;
        chase_with(
            &map,
            PAGES,
            |i| i * 4096 + (i % 64) * 64,
            10_000,
            false,
            Some(&evict),
        )
    }

    /// STLB hit penalty: a chase over one line in each of many 4 KiB pages (more than the first
    /// level DTLB holds, fewer than the second level) minus the same over a few pages. Lines are
    /// staggered across cache sets so both working sets stay in L1D.
    fn stlb_hit(f: &HostFacts) -> Option<f64> {
        use crate::machine::profile::{PageSizeName, TlbServes};
        let covers_4k = |a: &crate::machine::profile::TlbArray| {
            a.page_sizes.contains(&PageSizeName::Size4K) && a.serves != TlbServes::Instruction
        };
        let l1 = f
            .tlbs
            .iter()
            .filter(|(a, _)| a.level == 1 && covers_4k(a))
            .map(|(a, _)| a.entries)
            .max()
            .unwrap_or(64);
        let l2 = f
            .tlbs
            .iter()
            .filter(|(a, _)| a.level == 2 && covers_4k(a))
            .map(|(a, _)| a.entries)
            .max()
            .unwrap_or(1024);
        // CPUID of some guests under-reports the second level; then try 4x the first level anyway
        let many = if l2 > 2 * l1 {
            (4 * l1).min(l2 / 2).min(512)
        } else {
            (4 * l1).min(512)
        } as usize;
        if many <= l1 as usize + 16 {
            return None;
        }
        let map = Map::new(many * 4096, false)?;
        let slot = |i: usize| i * 4096 + ((i * 7) % 64) * 64;
        let mut diffs = vec![];
        for _ in 0..3 {
            let a = chase(&map, many, slot, 20_000)?;
            let b = chase(&map, 8, slot, 20_000)?;
            diffs.push(a - b);
        }
        median(diffs)
    }

    /// (package, core) of a CPU, from sysfs.
    fn cpu_place(cpu: usize) -> Option<(String, String)> {
        let read = |f: &str| {
            super::read_sysfs(&format!("/sys/devices/system/cpu/cpu{cpu}/topology/{f}"))
                .map(|v| v.trim().to_string())
        };
        Some((read("physical_package_id")?, read("core_id")?))
    }

    /// Line transfers from the first allowed CPU to the first CPU at each distance (an SMT
    /// sibling, another core of the package, another package), where the host has one.
    fn line_transfers() -> [Option<(f64, usize, usize)>; 3] {
        let cpus = online_allowed_cpus();
        let mut out = [None; 3];
        let Some((&a, others)) = cpus.split_first() else {
            return out;
        };
        let Some(home) = cpu_place(a) else { return out };
        for (i, slot) in out.iter_mut().enumerate() {
            let at_distance = |c: &usize| {
                cpu_place(*c).is_some_and(|(pkg, core)| match i {
                    0 => pkg == home.0 && core == home.1,
                    1 => pkg == home.0 && core != home.1,
                    _ => pkg != home.0,
                })
            };
            if let Some(&b) = others.iter().find(|c| at_distance(c)) {
                *slot = line_transfer(a, b).map(|ns| (ns, a, b));
            }
        }
        restore_affinity(&cpus);
        out
    }

    /// One modified cache line moved from CPU `a` to CPU `b`: two pinned threads take turns
    /// incrementing one counter, each waiting for the other's write (the ping-pong of
    /// github.com/nviennot/core-to-core-latency, whose figures the library profiles cite).
    /// Half a round trip, median of 5 batches of 2000 round trips, in ns.
    fn line_transfer(a: usize, b: usize) -> Option<f64> {
        const ROUNDS: u64 = 2_000;
        const BATCHES: usize = 5;
        let counter = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (c2, s2) = (counter.clone(), stop.clone());
        // The helper answers every odd value with the next even one.
        let helper = std::thread::spawn(move || {
            if !pin(b) {
                s2.store(true, Ordering::Release);
                return;
            }
            let mut next = 1;
            while next < 2 * ROUNDS * BATCHES as u64 && !s2.load(Ordering::Relaxed) {
                if c2.load(Ordering::Acquire) == next {
                    c2.store(next + 1, Ordering::Release);
                    next += 2;
                } else {
                    std::hint::spin_loop();
                }
            }
        });
        let result = (|| {
            if !pin(a) {
                return None;
            }
            let start = Instant::now();
            let mut batches = vec![];
            let mut v = 0;
            for _ in 0..BATCHES {
                let t = Instant::now();
                for _ in 0..ROUNDS {
                    counter.store(v + 1, Ordering::Release);
                    let mut spins = 0u32;
                    while counter.load(Ordering::Acquire) != v + 2 {
                        spins = spins.wrapping_add(1);
                        // Reading the clock on every spin would slow the loop it times.
                        if spins % 4096 == 0
                            && (stop.load(Ordering::Relaxed)
                                || start.elapsed() > Duration::from_secs(1))
                        {
                            return None;
                        }
                        std::hint::spin_loop();
                    }
                    v += 2;
                }
                batches.push(now_ns(t) / (2 * ROUNDS) as f64);
            }
            median(batches)
        })();
        stop.store(true, Ordering::Release);
        let _ = helper.join();
        result
    }

    fn online_allowed_cpus() -> Vec<usize> {
        // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: pid 0 = this thread; size matches the set.
        if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) }
            != 0
        {
            return vec![];
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect()
    }

    fn pin(cpu: usize) -> bool {
        // SAFETY: as in online_allowed_cpus.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        unsafe { libc::CPU_SET(cpu, &mut set) };
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 }
    }

    fn restore_affinity(cpus: &[usize]) {
        // SAFETY: as in online_allowed_cpus.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &c in cpus {
            unsafe { libc::CPU_SET(c, &mut set) };
        }
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    }

    /// mprotect toggles of one page, per change, in ns.
    fn toggle(page: *mut u8, n: usize) -> Option<f64> {
        let t = Instant::now();
        for _ in 0..n {
            for prot in [libc::PROT_READ, libc::PROT_READ | libc::PROT_WRITE] {
                // SAFETY: page is a page of our own mapping.
                if unsafe { libc::mprotect(page as *mut libc::c_void, 4096, prot) } != 0 {
                    return None;
                }
            }
        }
        Some(now_ns(t) / (2 * n) as f64)
    }

    /// Cross-CPU shootdown: the cost of an mprotect downgrade/upgrade on this CPU while another
    /// thread of the process reads the page on another CPU, minus the same with that thread idle.
    fn shootdown(_f: &HostFacts) -> (Option<f64>, Option<String>) {
        let cpus = online_allowed_cpus();
        if cpus.len() < 2 {
            return (
                None,
                Some("fewer than two CPUs allowed to this process".into()),
            );
        }
        let (a, b) = (cpus[0], cpus[cpus.len() - 1]);
        if !pin(a) {
            return (None, Some("sched_setaffinity refused".into()));
        }
        let result = (|| {
            let map = Map::new(4096, false)?;
            // SAFETY: within the mapping.
            unsafe { std::ptr::write_volatile(map.ptr, 1u8) };
            let mut base = vec![];
            for _ in 0..3 {
                base.push(toggle(map.ptr, 100)?);
            }
            let stop = Arc::new(AtomicBool::new(false));
            let started = Arc::new(AtomicBool::new(false));
            let addr = map.ptr as usize;
            let (s2, st2) = (stop.clone(), started.clone());
            let helper = std::thread::spawn(move || {
                let pinned = pin(b);
                st2.store(true, Ordering::Release);
                let t = Instant::now();
                while !s2.load(Ordering::Acquire) && t.elapsed() < Duration::from_millis(300) {
                    // SAFETY: the page stays mapped (readable) until the main thread joins us.
                    black_box(unsafe { std::ptr::read_volatile(addr as *const u8) });
                }
                pinned
            });
            let t = Instant::now();
            while !started.load(Ordering::Acquire) && t.elapsed() < Duration::from_millis(100) {
                std::hint::spin_loop();
            }
            let mut remote = vec![];
            for _ in 0..3 {
                if let Some(v) = toggle(map.ptr, 100) {
                    remote.push(v);
                }
            }
            stop.store(true, Ordering::Release);
            let pinned = helper.join().unwrap_or(false);
            if !pinned {
                return None;
            }
            Some(super::measure_diff(median(remote)?, median(base)?))
        })();
        restore_affinity(&cpus);
        match result {
            Some(Some(v)) => (
                Some(v),
                Some(format!(
                    "CPU {a} changes protection while CPU {b} reads the page"
                )),
            ),
            Some(None) => (
                None,
                Some("no measurable difference over the single-CPU case".into()),
            ),
            None => (None, Some("mapping, mprotect or pinning failed".into())),
        }
    }

    fn bind_to_node(map: &Map, node: u32) -> Option<()> {
        if node >= 64 {
            return None;
        }
        let mask: u64 = 1 << node;
        const MPOL_BIND: libc::c_long = 2;
        // SAFETY: mbind on our own mapping with a one-word node mask.
        let r = unsafe {
            libc::syscall(
                libc::SYS_mbind,
                map.ptr as libc::c_long,
                map.len as libc::c_long,
                MPOL_BIND,
                &mask as *const u64 as libc::c_long,
                65 as libc::c_long,
                0 as libc::c_long,
            )
        };
        (r == 0).then_some(())
    }

    fn remote_dram(f: &HostFacts, bytes: usize) -> Option<f64> {
        let cpus = online_allowed_cpus();
        let cpu = *cpus.first()?;
        let here = std::fs::read_dir(format!("/sys/devices/system/cpu/cpu{cpu}"))
            .ok()?
            .filter_map(|e| e.ok())
            .find_map(|e| {
                e.file_name()
                    .to_string_lossy()
                    .strip_prefix("node")
                    .and_then(|n| n.parse::<u32>().ok())
            })?;
        let other = (0..f.nodes).find(|&n| n != here)?;
        if !pin(cpu) {
            return None;
        }
        let v = dram_latency(bytes, Some(other));
        restore_affinity(&cpus);
        v
    }
}

#[cfg(not(target_os = "linux"))]
mod measure {
    use super::{HostFacts, Measurements};
    pub(crate) fn run(_f: &HostFacts, _limit: std::time::Duration) -> Measurements {
        Measurements::default()
    }
}

/// a - b when clearly positive (more than 2% of b), else None.
pub(crate) fn measure_diff(a: f64, b: f64) -> Option<f64> {
    let d = a - b;
    (d.is_finite() && d > 0.02 * b.abs()).then_some(d)
}

// ---------------------------------------------------------------------------------------------
// The TOML text.

#[derive(Debug, Clone)]
pub(crate) enum Val {
    Str(String),
    Int(u64),
    Float(f64),
    Bool(bool),
    List(Vec<String>),
}

/// A TOML writer that puts a `# machine detect:` comment on every value line.
pub(crate) struct Writer {
    pub out: String,
}

pub(crate) fn toml_string(s: &str) -> String {
    let mut o = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

impl Writer {
    fn new() -> Writer {
        Writer { out: String::new() }
    }
    fn header(&mut self, h: &str) {
        let _ = writeln!(self.out, "\n{h}");
    }
    fn comment(&mut self, c: &str) {
        for line in c.lines() {
            let _ = writeln!(self.out, "# {line}");
        }
    }
    fn kv(&mut self, key: &str, v: Val, how: &str) {
        let val = match v {
            Val::Str(s) => toml_string(&s),
            Val::Int(i) => i.to_string(),
            Val::Float(f) => {
                let f = if f.is_finite() { f } else { 0.0 };
                let s = format!("{:.3}", f);
                let s = s.trim_end_matches('0').to_string();
                if s.ends_with('.') {
                    format!("{s}0")
                } else {
                    s
                }
            }
            Val::Bool(b) => b.to_string(),
            Val::List(l) => format!(
                "[{}]",
                l.iter()
                    .map(|s| toml_string(s))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let how = how.replace('\n', " ");
        let _ = writeln!(self.out, "{key} = {val}  # machine detect: {how}");
    }
}

fn cycles(ns: f64, ghz: f64) -> u64 {
    (ns * ghz).round().max(1.0) as u64
}

pub(crate) fn slug(s: &str) -> String {
    let mut o = String::new();
    let s = s.split('@').next().unwrap_or(s);
    for w in s
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let w = w.to_ascii_lowercase();
        if ["r", "tm", "cpu", "processor", "core"].contains(&w.as_str()) || w.ends_with("ghz") {
            continue;
        }
        if !o.is_empty() {
            o.push('-');
        }
        o.push_str(&w);
    }
    o.truncate(40);
    let o = o.trim_end_matches('-').to_string();
    if o.is_empty() {
        "host".into()
    } else {
        o
    }
}

fn emit(
    f: &HostFacts,
    fb: &MachineProfile,
    why: &str,
    m: &Measurements,
    opts: &DetectOptions,
) -> String {
    let from = |what: &str| {
        format!("{what} not detectable from user space; taken from {why}, whose comment on the same field gives the value's own source")
    };
    let mut w = Writer::new();
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

    w.header("[topology]");
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

    w.header("[cpu]");
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
    let ghz = match &f.frequency_ghz {
        Some(g) if g.value > 0.05 && g.value < 10.0 => {
            w.kv("frequency_ghz", Val::Float(g.value), &g.how);
            g.value
        }
        _ => {
            w.kv(
                "frequency_ghz",
                Val::Float(fb.cpu.frequency_ghz),
                &from("clock"),
            );
            fb.cpu.frequency_ghz
        }
    };

    w.header("[cpu.features]");
    let ff = &fb.cpu.features;
    let feat = |w: &mut Writer, key: &str, v: &Option<Got<bool>>, fallback: bool| match v {
        Some(g) => w.kv(key, Val::Bool(g.value), &g.how),
        None => w.kv(key, Val::Bool(fallback), &from(key)),
    };
    let is_x86 = f.arch == Arch::X86_64;
    if is_x86 {
        feat(&mut w, "pcid", &f.pcid, ff.pcid);
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
        feat(&mut w, "invpcid", &invpcid, ff.invpcid && ff.pcid);
        feat(&mut w, "global_pages", &f.global_pages, ff.global_pages);
        feat(&mut w, "invlpgb", &f.invlpgb, ff.invlpgb);
        feat(&mut w, "gbpages", &f.gbpages, ff.gbpages);
    } else {
        w.kv("pcid", Val::Bool(false), "arm64 has ASIDs, not PCIDs");
        w.kv("invpcid", Val::Bool(false), "x86 only");
        w.kv(
            "global_pages",
            Val::Bool(ff.global_pages),
            &from("global mappings (nG=0)"),
        );
        w.kv("invlpgb", Val::Bool(false), "x86 (AMD) only");
        w.kv(
            "gbpages",
            Val::Bool(ff.gbpages),
            &from("1 GiB block mappings"),
        );
        w.kv(
            "tlbi_broadcast",
            Val::Bool(true),
            "every ARMv8-A core implements TLBI ...IS broadcast to the inner-shareable domain",
        );
        feat(&mut w, "lse_atomics", &f.lse_atomics, ff.lse_atomics);
        w.kv(
            "asid_bits",
            Val::Int(ff.asid_bits as u64),
            &from("ID_AA64MMFR0_EL1.ASIDBits"),
        );
    }
    let pcid = f.pcid.as_ref().map_or(ff.pcid, |g| g.value);
    let invpcid = is_x86 && pcid && f.invpcid.as_ref().map_or(ff.invpcid, |g| g.value);
    let invlpgb = is_x86 && f.invlpgb.as_ref().map_or(ff.invlpgb, |g| g.value);

    // TLBs
    let detected_tlbs = !f.tlbs.is_empty();
    let fb_stlb_hit = fb
        .tlb
        .iter()
        .filter(|a| a.level == 2)
        .map(|a| a.hit_cycles)
        .max()
        .unwrap_or(8);
    let stlb_hit = m.stlb_hit_ns.map(|ns| cycles(ns, ghz));
    let tlbs: Vec<(TlbArray, String)> = if detected_tlbs {
        f.tlbs.clone()
    } else {
        fb.tlb
            .iter()
            .map(|a| (a.clone(), from("TLB geometry")))
            .collect()
    };
    let mut names = BTreeSet::new();
    for (mut a, how) in tlbs {
        let note = fit_tlb_geometry(&mut a);
        let mut n = a.name.clone();
        let mut k = 2;
        while !names.insert(n.clone()) {
            n = format!("{}-{k}", a.name);
            k += 1;
        }
        w.header("[[tlb]]");
        let how = match note {
            Some(note) => format!("{how}; {note}"),
            None => how,
        };
        w.kv("name", Val::Str(n), &how);
        w.kv("level", Val::Int(a.level as u64), &how);
        let serves = match a.serves {
            TlbServes::Data => "data",
            TlbServes::Instruction => "instruction",
            TlbServes::Unified => "unified",
        };
        w.kv("serves", Val::Str(serves.into()), &how);
        let sizes = a
            .page_sizes
            .iter()
            .map(|p| match p {
                PageSizeName::Size4K => "4k",
                PageSizeName::Size2M => "2m",
                PageSizeName::Size1G => "1g",
            })
            .map(String::from)
            .collect();
        w.kv("page_sizes", Val::List(sizes), &how);
        w.kv("entries", Val::Int(a.entries as u64), &how);
        w.kv("ways", Val::Int(a.ways as u64), &how);
        if a.level == 1 {
            w.kv(
                "hit_cycles",
                Val::Int(0),
                "first level: looked up in parallel with the L1 cache",
            );
        } else if let Some(c) = stlb_hit {
            w.kv("hit_cycles", Val::Int(c), &format!("measured: chase over more 4 KiB pages than the L1 DTLB holds minus over 8 pages, {:.1} ns at {ghz:.2} GHz", m.stlb_hit_ns.unwrap_or(0.0)));
        } else if detected_tlbs {
            w.kv(
                "hit_cycles",
                Val::Int(fb_stlb_hit as u64),
                &from("second-level TLB hit latency"),
            );
        } else {
            w.kv(
                "hit_cycles",
                Val::Int(a.hit_cycles as u64),
                &from("second-level TLB hit latency"),
            );
        }
        let per_thread = if detected_tlbs { false } else { a.per_thread };
        w.kv(
            "per_thread",
            Val::Bool(per_thread),
            if detected_tlbs {
                "CPUID does not report a per-thread split of this array; shared assumed"
            } else {
                "taken with the geometry above"
            },
        );
    }

    w.header("[paging_structure_cache]");
    let psc = &fb.paging_structure_cache;
    w.kv(
        "pml4e_entries",
        Val::Int(psc.pml4e_entries as u64),
        &from("PML4E cache size (no architectural way to read it)"),
    );
    w.kv(
        "pdpte_entries",
        Val::Int(psc.pdpte_entries as u64),
        &from("PDPTE cache size"),
    );
    w.kv(
        "pde_entries",
        Val::Int(psc.pde_entries as u64),
        &from("PDE cache size"),
    );

    w.header("[memory]");
    let fm = &fb.memory;
    let cache = |w: &mut Writer,
                 pre: &str,
                 c: &Option<CacheInfo>,
                 fb_kib: u32,
                 fb_ways: u32,
                 per_socket: bool,
                 label: &str| {
        match c {
            Some(c) => {
                let kib = if per_socket {
                    c.kib * c.instances_in_package.max(1)
                } else {
                    c.kib
                };
                let lines = kib as u64 * 1024 / 64;
                let mut ways = if c.ways == 0 { lines as u32 } else { c.ways };
                let mut note = String::new();
                if lines % ways as u64 != 0 {
                    let g = gcd(lines, ways as u64) as u32;
                    note = format!(
                        "; sysfs reports {ways} ways, modelled as {g} (must divide the line count)"
                    );
                    ways = g.max(1);
                }
                let size_how = if per_socket && c.instances_in_package > 1 {
                    format!(
                        "sysfs cache/index* of cpu0: {label} of {} KiB x {} instances in package 0",
                        c.kib, c.instances_in_package
                    )
                } else {
                    format!("sysfs cache/index* of cpu0: {label} size")
                };
                let size_key = if per_socket {
                    format!("{pre}_kib_per_socket")
                } else {
                    format!("{pre}_kib")
                };
                w.kv(&size_key, Val::Int(kib as u64), &size_how);
                w.kv(
                    &format!("{pre}_ways"),
                    Val::Int(ways as u64),
                    &format!("sysfs ways_of_associativity{note}"),
                );
            }
            None => {
                let size_key = if per_socket {
                    format!("{pre}_kib_per_socket")
                } else {
                    format!("{pre}_kib")
                };
                w.kv(
                    &size_key,
                    Val::Int(fb_kib as u64),
                    &from(&format!("{label} size (sysfs has none)")),
                );
                w.kv(
                    &format!("{pre}_ways"),
                    Val::Int(fb_ways as u64),
                    &from(&format!("{label} associativity")),
                );
            }
        }
    };
    let lat = |w: &mut Writer, key: &str, ns: Option<f64>, fb_cycles: u32, what: &str| match ns {
        Some(ns) => w.kv(
            key,
            Val::Int(cycles(ns, ghz)),
            &format!("measured: random pointer chase within {what}, {ns:.2} ns at {ghz:.2} GHz"),
        ),
        None => w.kv(
            key,
            Val::Int(fb_cycles as u64),
            &from(&format!("{what} latency (not measured)")),
        ),
    };
    cache(
        &mut w,
        "l1d",
        &f.l1d,
        fm.l1d_kib,
        fm.l1d_ways,
        false,
        "L1 data cache",
    );
    lat(
        &mut w,
        "l1d_hit_cycles",
        m.l1_ns,
        fm.l1d_hit_cycles,
        "half the L1D",
    );
    cache(
        &mut w, "l2", &f.l2, fm.l2_kib, fm.l2_ways, false, "L2 cache",
    );
    lat(
        &mut w,
        "l2_hit_cycles",
        m.l2_ns,
        fm.l2_hit_cycles,
        "a buffer between the L1D and L2 sizes",
    );
    let llc_is_l2 = f.llc.is_some()
        && f.llc.as_ref().map(|c| c.kib) == f.l2.as_ref().map(|c| c.kib)
        && f.llc.as_ref().map(|c| c.instances_in_package)
            == f.l2.as_ref().map(|c| c.instances_in_package);
    cache(
        &mut w,
        "llc",
        &f.llc,
        fm.llc_kib_per_socket,
        fm.llc_ways,
        true,
        if llc_is_l2 {
            "last-level (L2) cache"
        } else {
            "last-level cache"
        },
    );
    let llc_ns = if llc_is_l2 { m.l2_ns } else { m.llc_ns };
    match (llc_ns, m.dram_local_ns) {
        (Some(l), Some(d)) if l > 0.6 * d => w.kv(
            "llc_hit_cycles",
            Val::Int(fm.llc_hit_cycles as u64),
            &format!("measured {l:.1} ns, too close to the {d:.1} ns DRAM reading to be LLC hits (LLC shared with other cores or tenants?), so not used; LLC latency {}", from("").trim_start()),
        ),
        _ => lat(&mut w, "llc_hit_cycles", llc_ns, fm.llc_hit_cycles, "a quarter of one LLC instance"),
    }
    let local = match m.dram_local_ns {
        Some(ns) => {
            w.kv("dram_local_ns", Val::Float(ns), "measured: cold random pointer chase, one line in each of 16384 pages (huge pages where granted), after writing twice the LLC elsewhere");
            ns
        }
        None => {
            w.kv(
                "dram_local_ns",
                Val::Float(fm.dram_local_ns),
                &from("DRAM latency (not measured)"),
            );
            fm.dram_local_ns
        }
    };
    let numa = f.sockets.value * f.nodes_per_socket.value > 1;
    match (numa, m.dram_remote_ns) {
        (true, Some(ns)) if ns >= local => w.kv(
            "dram_remote_ns",
            Val::Float(ns),
            "measured: same chase with the buffer bound (mbind) to another node",
        ),
        (true, _) => {
            let ratio = fm.dram_remote_ns / fm.dram_local_ns;
            w.kv(
                "dram_remote_ns",
                Val::Float(local * ratio),
                &format!(
                    "remote/local ratio {ratio:.2} {}",
                    from("NUMA factor (remote node not measured)")
                ),
            );
        }
        (false, _) => w.kv(
            "dram_remote_ns",
            Val::Float(local),
            "one NUMA node: equal to local",
        ),
    }

    w.header("[costs]");
    let c = &fb.costs;
    match m.syscall_ns {
        Some(ns) => w.kv(
            "syscall_roundtrip_cycles",
            Val::Int(cycles(ns, ghz)),
            &format!("measured: getppid via syscall(2), {ns:.1} ns at {ghz:.2} GHz; an upper bound on the instruction cost (includes entry code, the syscall body and active mitigations{})", if f.pti_active == Some(true) { ", PTI included" } else { "" }),
        ),
        None => w.kv("syscall_roundtrip_cycles", Val::Int(c.syscall_roundtrip_cycles as u64), &from("syscall round trip (not measured)")),
    }
    let cr3 = if is_x86 {
        "MOV to CR3"
    } else {
        "TTBR0_EL1 write + ISB"
    };
    w.kv(
        "cr3_write_noflush_cycles",
        Val::Int(c.cr3_write_noflush_cycles as u64),
        &from(&format!("{cr3} (no flush) cost (privileged)")),
    );
    w.kv(
        "cr3_write_flush_cycles",
        Val::Int(c.cr3_write_flush_cycles as u64),
        &from(&format!("{cr3} (flushing) cost (privileged)")),
    );
    w.kv(
        "invlpg_cycles",
        Val::Int(c.invlpg_cycles as u64),
        &from(if is_x86 {
            "INVLPG cost (privileged)"
        } else {
            "TLBI VAE1 cost (privileged)"
        }),
    );
    if invpcid {
        let fill = |w: &mut Writer, key: &str, v: Option<u32>, default: u32, default_how: &str| {
            match v {
            Some(v) => w.kv(key, Val::Int(v as u64), &from("INVPCID cost (privileged)")),
            None => w.kv(key, Val::Int(default as u64), &format!("INVPCID cost not detectable from user space, and {why} has no INVPCID; conservative default: {default_how}")),
        }
        };
        fill(
            &mut w,
            "invpcid_individual_cycles",
            c.invpcid_individual_cycles,
            c.invlpg_cycles,
            "its INVLPG cost",
        );
        let full = c.cr3_write_flush_cycles.max(c.invlpg_cycles);
        fill(
            &mut w,
            "invpcid_single_context_cycles",
            c.invpcid_single_context_cycles,
            full,
            "the larger of its flushing CR3 write and INVLPG costs",
        );
        fill(
            &mut w,
            "invpcid_all_incl_global_cycles",
            c.invpcid_all_incl_global_cycles,
            full,
            "the larger of its flushing CR3 write and INVLPG costs",
        );
        fill(
            &mut w,
            "invpcid_all_non_global_cycles",
            c.invpcid_all_non_global_cycles,
            full,
            "the larger of its flushing CR3 write and INVLPG costs",
        );
    }
    if invlpgb {
        match c.invlpgb_ns {
            Some(v) => w.kv(
                "invlpgb_ns",
                Val::Float(v),
                &from("INVLPGB+TLBSYNC cost (privileged)"),
            ),
            None => {
                let lib = super::names()
                    .into_iter()
                    .filter_map(|n| super::load(n).ok())
                    .find(|p| p.costs.invlpgb_ns.is_some());
                match lib {
                    Some(p) => w.kv("invlpgb_ns", Val::Float(p.costs.invlpgb_ns.unwrap_or(1000.0)), &format!("INVLPGB cost not detectable from user space; taken from machines/{}.toml (the library's INVLPGB machine)", p.name)),
                    None => w.kv("invlpgb_ns", Val::Float(c.ipi_latency_ns.same_socket_ns), &format!("INVLPGB cost not detectable; conservative default: the same-socket IPI latency of {why}")),
                }
            }
        }
    }
    if !is_x86 {
        let v = c
            .tlbi_broadcast_ns
            .unwrap_or(c.ipi_latency_ns.same_socket_ns);
        w.kv(
            "tlbi_broadcast_ns",
            Val::Float(v),
            &from("TLBI ...IS + DSB ISH cost (privileged)"),
        );
    }
    w.kv(
        "interrupt_entry_cycles",
        Val::Int(c.interrupt_entry_cycles as u64),
        &from("interrupt entry + return cost"),
    );
    w.kv(
        "ipi_send_cycles",
        Val::Int(c.ipi_send_cycles as u64),
        &from("IPI send cost (APIC/GIC register write is privileged)"),
    );

    w.header("[costs.ipi_latency_ns]");
    let shoot = m
        .shootdown_ns
        .map(|v| format!("; compare [measured].tlb_shootdown_ns = {v:.0} ns"))
        .unwrap_or_default();
    let l = &c.ipi_latency_ns;
    w.kv(
        "same_core_ns",
        Val::Float(l.same_core_ns),
        &format!("{}{shoot}", from("IPI delivery latency")),
    );
    w.kv(
        "same_socket_ns",
        Val::Float(l.same_socket_ns),
        &from("IPI delivery latency"),
    );
    if f.sockets.value > 1 {
        w.kv(
            "remote_socket_ns",
            Val::Float(l.remote_socket_ns),
            &from("IPI delivery latency"),
        );
    } else {
        w.kv(
            "remote_socket_ns",
            Val::Float(l.same_socket_ns),
            "one socket: unused, set to the same-socket value",
        );
    }

    // Only distances this host has; a missing one falls back to the cache-hit proxies.
    let library = [
        c.line_transfer_ns.same_core_ns,
        c.line_transfer_ns.same_socket_ns,
        c.line_transfer_ns.remote_socket_ns,
    ];
    let has = [
        f.threads_per_core.value > 1,
        f.cores_per_socket.value > 1,
        f.sockets.value > 1,
    ];
    let lines: Vec<(&str, f64, String)> = LINE_DISTANCES
        .iter()
        .zip(m.line_transfer.iter().zip(library.iter().zip(has)))
        .filter_map(|(&key, (measured, (&lib, has)))| match (measured, lib) {
            (Some((ns, a, b)), _) => Some((key, *ns, format!("measured: one cache line bounced between CPU {a} and CPU {b} (two pinned threads taking turns on a counter; half the round trip, median of 5 batches)"))),
            (None, Some(ns)) if has => Some((key, ns, from("core-to-core latency (not measured)"))),
            _ => None,
        })
        .collect();
    if !lines.is_empty() {
        w.header("[costs.line_transfer_ns]");
        for (key, ns, how) in lines {
            w.kv(key, Val::Float(ns), &how);
        }
    }

    let any = m.syscall_ns.is_some()
        || m.minor_fault_ns.is_some()
        || m.shootdown_ns.is_some()
        || m.atomic_ns.is_some()
        || m.stlb_hit_ns.is_some();
    if any || !m.skipped.is_empty() || m.shootdown_note.is_some() {
        w.header("[measured]");
        if !m.skipped.is_empty() {
            w.comment(&format!(
                "skipped for the time budget: {}",
                m.skipped.join(", ")
            ));
        }
        if let Some(v) = m.syscall_ns {
            w.kv(
                "syscall_getppid_ns",
                Val::Float(v),
                "median of 9 batches of 400 syscall(SYS_getppid)",
            );
        }
        if let Some(v) = m.minor_fault_ns {
            w.kv("minor_fault_ns", Val::Float(v), "median of 3 runs: first write to each of 128 fresh anonymous 4 KiB pages (THP off)");
        }
        match (m.shootdown_ns, &m.shootdown_note) {
            (Some(v), note) => w.kv(
                "tlb_shootdown_ns",
                Val::Float(v),
                &format!(
                    "mprotect of one page, median of 3x200 changes: {} minus the single-CPU cost",
                    note.as_deref().unwrap_or("")
                ),
            ),
            (None, Some(note)) => w.comment(&format!("tlb_shootdown_ns not measured: {note}")),
            (None, None) => {}
        }
        if let Some(v) = m.atomic_ns {
            w.kv(
                "atomic_increment_ns",
                Val::Float(v),
                "median of 7 batches of 5000 dependent SeqCst fetch_add on one word",
            );
        }
        if let Some(v) = m.stlb_hit_ns {
            w.kv(
                "stlb_hit_ns",
                Val::Float(v),
                "median of 3: pointer chase over one line per 4 KiB page, many pages minus 8 pages",
            );
        }
    }
    w.out
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// One-line error for the CLI when a detected profile cannot be written.
pub fn write_error(path: &str, e: std::io::Error) -> Error {
    Error::at(path, format!("cannot write detected profile: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_parses_and_is_bounded() {
        let t = Instant::now();
        let d = detect(&DetectOptions::default()).unwrap_or_else(|e| panic!("{e}"));
        let took = t.elapsed();
        // measurements stop starting new steps after 500 ms; the bound is loose because CI runs
        // this beside other tests on two shared cores
        assert!(took < Duration::from_secs(10), "detection took {took:?}");
        let again = super::super::parse("again.toml", &d.text).unwrap();
        assert_eq!(again.name, d.profile.name);
        assert!(d.profile.threads() >= 1);
        // a host with two cores on a package measures the line transfer between them
        let lt = &d.profile.costs.line_transfer_ns;
        if d.profile.topology.cores_per_socket > 1
            && d.text.contains("measured: one cache line bounced")
        {
            assert!(
                lt.same_socket_ns
                    .is_some_and(|ns| ns > 0.5 && ns < 10_000.0),
                "{lt:?}"
            );
        }
        // every value line says how it was obtained
        for line in d.text.lines() {
            let code = line.split('#').next().unwrap().trim();
            if code.contains('=') {
                assert!(line.contains("# machine detect: "), "no provenance: {line}");
            }
        }
    }

    #[test]
    fn detection_without_measurements_fills_from_the_library() {
        let d = detect(&DetectOptions {
            name: Some("probe".into()),
            measure: false,
            budget: Duration::ZERO,
        })
        .unwrap();
        assert_eq!(d.profile.name, "probe");
        assert!(d
            .text
            .contains("not detectable from user space; taken from machines/"));
        assert!(d.profile.measured.is_none());
    }

    #[test]
    fn amd_tlb_leaves_decode() {
        use crate::machine::profile::{PageSizeName::*, TlbServes::*};
        // Synthetic registers in the layout of AMD's CPUID specification: L1 TLBs of 64
        // entries, fully associative (ways 0xFF); L2 4K/2M TLBs of 2048 entries 8-way (code
        // 6) for data and 512 entries 4-way (code 4) / 2-way (code 2) for instructions;
        // 1G: L1 64 fully associative (code 0xF), L2 data 2048 8-way, no L2 instruction.
        let fields = amd_tlb_fields(
            [0xff40_ff40, 0xff40_ff40],
            [0x6800_2200, 0x6800_4200],
            Some([0xf040_f040, 0x6800_0000]),
        );
        let got: Vec<_> = fields.iter().map(|f| (f.0, f.1, f.2, f.3, f.4)).collect();
        assert_eq!(
            got,
            [
                (1, Data, Size4K, 64, 64),
                (1, Instruction, Size4K, 64, 64),
                (1, Data, Size2M, 64, 64),
                (1, Instruction, Size2M, 64, 64),
                (2, Data, Size4K, 2048, 8),
                (2, Instruction, Size4K, 512, 4),
                (2, Data, Size2M, 2048, 8),
                (2, Instruction, Size2M, 512, 2),
                (1, Data, Size1G, 64, 64),
                (2, Data, Size1G, 2048, 8),
            ]
        );
        assert_eq!(fields[0].5, "CPUID.80000005H:EBX[31:16] (L1 DTLB 4K)");
        assert_eq!(fields[7].5, "CPUID.80000006H:EAX[15:0] (L2 ITLB 2M/4M)");
        assert_eq!(fields[9].5, "CPUID.80000019H:EBX[31:16] (L2 DTLB 1G)");
        assert_eq!(amd_tlb_fields([0, 0], [0, 0], None), []);
    }

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("a"), None);
    }

    #[test]
    fn sizes_and_brand_clocks_parse() {
        assert_eq!(parse_size_kib("48K"), Some(48));
        assert_eq!(parse_size_kib("32768K"), Some(32768));
        assert_eq!(parse_size_kib("2M"), Some(2048));
        assert_eq!(parse_size_kib("x"), None);
        assert_eq!(
            brand_ghz("Intel(R) Xeon(R) Platinum 8160 CPU @ 2.10GHz"),
            Some(2.1)
        );
        assert_eq!(brand_ghz("AMD EPYC"), None);
    }

    #[test]
    fn leaf2_descriptors_decode() {
        let stlb = leaf2_descriptor(0xc1);
        assert_eq!(stlb.len(), 1);
        assert_eq!((stlb[0].0, stlb[0].3, stlb[0].4), (2, 1024, 8));
        assert_eq!(leaf2_descriptor(0x63).len(), 2);
        assert!(leaf2_descriptor(0x2c).is_empty()); // a cache descriptor
        for b in 0..=255u8 {
            for (level, _, sizes, entries, ways) in leaf2_descriptor(b) {
                assert!(
                    (1..=2).contains(&level) && !sizes.is_empty() && entries % ways == 0,
                    "{b:#x}"
                );
            }
        }
    }

    #[test]
    fn geometry_is_fitted_to_power_of_two_sets() {
        let mut a = TlbArray {
            name: "stlb".into(),
            level: 2,
            serves: TlbServes::Unified,
            page_sizes: vec![PageSizeName::Size4K],
            entries: 3072,
            ways: 16,
            hit_cycles: 7,
            per_thread: false,
        };
        let note = fit_tlb_geometry(&mut a).unwrap();
        assert!(note.contains("3072"));
        assert_eq!(a.entries % a.ways, 0);
        assert!((a.entries / a.ways).is_power_of_two());
        let mut b = TlbArray {
            ways: 4,
            entries: 64,
            ..a.clone()
        };
        assert!(fit_tlb_geometry(&mut b).is_none());
        assert_eq!(amd_l2_ways(0x6, 2048), Some(8));
        assert_eq!(amd_l2_ways(0xf, 64), Some(64));
        assert_eq!(amd_l2_ways(0x0, 64), None);
    }

    #[test]
    fn toml_strings_are_escaped_and_names_slugged() {
        assert_eq!(toml_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
        assert_eq!(
            slug("Intel(R) Xeon(R) Platinum 8160 CPU @ 2.10GHz"),
            "intel-xeon-platinum-8160"
        );
        assert_eq!(slug("!!!"), "host");
        assert_eq!(measure_diff(110.0, 100.0), Some(10.0));
        assert_eq!(measure_diff(100.5, 100.0), None);
    }

    #[test]
    fn builtin_defaults_are_valid_profiles() {
        for arch in [Arch::X86_64, Arch::Aarch64] {
            builtin_default(arch).validate().unwrap();
        }
    }

    #[test]
    fn arm_parts_name_library_microarchitectures() {
        assert_eq!(
            arm_core(Some(0x41), Some(0xd07)).0.as_deref(),
            Some("Cortex-A57")
        );
        assert_eq!(
            arm_core(Some(0x41), Some(0xd0c)).0.as_deref(),
            Some("Neoverse N1")
        );
        assert_eq!(
            arm_core(Some(0x43), Some(0x0af)).0.as_deref(),
            Some("Vulcan")
        );
        assert_eq!(arm_core(None, None).0, None);
    }
}

#[cfg(test)]
mod library_tests {
    use super::*;

    /// Every name detect can produce must find its library profile by exact microarchitecture,
    /// and the per-vendor defaults must exist.
    #[test]
    fn detect_names_match_the_library() {
        let lib: Vec<MachineProfile> = crate::machine::names()
            .into_iter()
            .map(|n| crate::machine::load(n).unwrap())
            .collect();
        for u in [
            "Nehalem",
            "Sandy Bridge",
            "Sandy Bridge-EP",
            "Ivy Bridge",
            "Haswell",
            "Haswell-EP",
            "Skylake",
            "Skylake-SP",
            "Silvermont",
            "Zen 3",
            "Cortex-A57",
            "Vulcan",
            "Neoverse N1",
        ] {
            assert!(
                lib.iter().any(|m| m.cpu.microarchitecture == u),
                "no library profile of {u}"
            );
        }
        for n in [
            "altra-neoverse-n1",
            "cortex-a57-opteron-a1100",
            "epyc-7763-2s",
            "skylake-i7-6700k",
            "haswell-i7-4770",
        ] {
            assert!(
                lib.iter().any(|m| m.name == n),
                "default profile {n} missing"
            );
        }
    }
}
