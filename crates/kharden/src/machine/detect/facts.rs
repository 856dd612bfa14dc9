//! What the host reports about itself: topology, caches, the processor's identity, features
//! and TLBs, and its clock.

use super::caches::{self, CacheInfo};
#[cfg(target_arch = "x86_64")]
use super::cpuid;
use super::profile::{Arch, TlbArray};
use super::topology::{self, read_sysfs};
use super::{got, uarch, Got, Vendor};

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
    pub l1i: Option<CacheInfo>,
    pub l2: Option<CacheInfo>,
    /// Highest-level unified cache (equal to L2 on parts without L3).
    pub llc: Option<CacheInfo>,
    pub pti_active: Option<bool>,
    /// CPUs one IPI write addresses under the running kernel's APIC driver, with the kernel
    /// log line that named the driver; None when the log is unreadable or names no driver
    /// the model knows.
    pub ipi_cpus_per_write: Option<Got<u32>>,
}

impl HostFacts {
    /// Everything the host reports: sysfs topology and caches, then the processor's own
    /// description, then its clock.
    pub(crate) fn read() -> HostFacts {
        let online = topology::online_cpus();
        let (sockets, cores, threads) = topology::topology(&online);
        let (nodes, nodes_per_socket) = topology::numa_nodes(sockets.value);
        let caches = caches::caches(&online);
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
            nodes,
            pcid: None,
            invpcid: None,
            global_pages: None,
            gbpages: None,
            invlpgb: None,
            lse_atomics: None,
            tlbs: vec![],
            l1d: caches.l1d,
            l1i: caches.l1i,
            l2: caches.l2,
            llc: caches.llc,
            pti_active: read_sysfs("/sys/devices/system/cpu/vulnerabilities/meltdown")
                .map(|s| s.contains("PTI")),
            ipi_cpus_per_write: std::process::Command::new("dmesg")
                .output()
                .ok()
                .and_then(|o| apic_cpus_per_write(&String::from_utf8_lossy(&o.stdout))),
        };
        f.read_cpu();
        f.read_frequency();
        f
    }

    #[cfg(target_arch = "x86_64")]
    fn read_cpu(&mut self) {
        let c = cpuid::Cpuid::read();
        self.vendor = c.vendor;
        self.model = c.brand.clone();
        self.hypervisor = c.hypervisor;
        let (uarch, how) = uarch::x86_microarchitecture(c.vendor, c.family, c.model);
        self.uarch = uarch;
        self.uarch_how = how;
        self.pcid = Some(got(c.pcid, "CPUID.01H:ECX[17] (PCID)"));
        self.invpcid = Some(got(c.invpcid, "CPUID.(EAX=07H,ECX=0):EBX[10] (INVPCID)"));
        self.global_pages = Some(got(c.pge, "CPUID.01H:EDX[13] (PGE)"));
        self.gbpages = Some(got(c.gbpages, "CPUID.80000001H:EDX[26] (Page1GB)"));
        self.invlpgb = Some(got(c.invlpgb, "CPUID.80000008H:EBX[3] (INVLPGB)"));
        self.tlbs = cpuid::tlbs(&c);
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
        let (uarch, name) = uarch::arm_core(implementer, part);
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

/// The x86 kernel's boot message naming its APIC driver ("APIC: Switched APIC routing to:
/// physical x2apic" in 6.x, "Switched APIC routing to cluster x2apic." before), as the CPUs
/// one IPI write addresses: 16 for x2APIC cluster mode, 8 for flat logical mode, 1 for a
/// physical destination mode.
pub(crate) fn apic_cpus_per_write(kernel_log: &str) -> Option<Got<u32>> {
    let line = kernel_log
        .lines()
        .rfind(|l| l.contains("APIC routing to"))?;
    let driver = line
        .split("APIC routing to")
        .nth(1)?
        .trim_start_matches(':')
        .trim();
    let n = if driver.contains("cluster") {
        16
    } else if driver.contains("phys") {
        1
    } else if driver.contains("flat") {
        8
    } else {
        return None;
    };
    let message = line.split_once("] ").map_or(line, |(_, m)| m).trim();
    Some(got(n, format!("kernel log: '{message}'")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brand_clocks_parse() {
        assert_eq!(
            brand_ghz("Intel(R) Xeon(R) Platinum 8160 CPU @ 2.10GHz"),
            Some(2.1)
        );
        assert_eq!(brand_ghz("AMD EPYC"), None);
    }

    #[test]
    fn the_kernels_apic_driver_gives_the_cpus_one_ipi_write_reaches() {
        let of = |log: &str| apic_cpus_per_write(log).map(|g| (g.value, g.how));
        assert_eq!(
            of("[    0.248052] APIC: Switched APIC routing to: physical x2apic\n"),
            Some((
                1,
                "kernel log: 'APIC: Switched APIC routing to: physical x2apic'".into()
            ))
        );
        assert_eq!(
            of("Switched APIC routing to cluster x2apic.").map(|g| g.0),
            Some(16)
        );
        assert_eq!(
            of("Switched APIC routing to physical flat.").map(|g| g.0),
            Some(1)
        );
        assert_eq!(of("Setting APIC routing to flat.").map(|g| g.0), Some(8));
        assert_eq!(of("APIC: Switched APIC routing to: default"), None);
        assert_eq!(of("x2apic enabled"), None);
    }
}
