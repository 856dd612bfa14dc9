//! Cache geometry of package 0, from sysfs (`/sys/devices/system/cpu/cpu0/cache/index*`).

use super::topology::read_sysfs;
use std::collections::BTreeSet;

#[derive(Debug, Clone, Default)]
pub(crate) struct CacheInfo {
    pub kib: u32,
    pub ways: u32,
    /// How many instances of this cache serve the CPUs of package 0.
    pub instances_in_package: u32,
}

/// The caches the model uses; `None` where sysfs does not describe one.
#[derive(Debug, Clone, Default)]
pub(crate) struct Caches {
    pub l1d: Option<CacheInfo>,
    pub l1i: Option<CacheInfo>,
    pub l2: Option<CacheInfo>,
    /// Highest-level unified cache (equal to L2 on parts without L3).
    pub llc: Option<CacheInfo>,
}

/// The L1D, L2 and last-level cache cpu0 sees, with how many instances of each serve package 0.
pub(crate) fn caches(online_cpus: &[u32]) -> Caches {
    let base = "/sys/devices/system/cpu/cpu0/cache";
    let mut found = Caches::default();
    let Ok(rd) = std::fs::read_dir(base) else {
        return found;
    };
    let mut idx: Vec<String> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("index"))
        .collect();
    idx.sort();
    let package0: Vec<u32> = online_cpus
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
        let (Some(level), Some(kind), Some(size)) = (get("level"), get("type"), get("size")) else {
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
            (1, "Data") => found.l1d = Some(info),
            (1, "Instruction") => found.l1i = Some(info),
            (_, "Unified") => {
                if level == 2 {
                    found.l2 = Some(info.clone());
                }
                if !matches!(best_unified, Some((l, _)) if l >= level) {
                    best_unified = Some((level, info));
                }
            }
            _ => {}
        }
    }
    found.llc = best_unified.map(|(_, c)| c);
    found
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size_kib("48K"), Some(48));
        assert_eq!(parse_size_kib("32768K"), Some(32768));
        assert_eq!(parse_size_kib("2M"), Some(2048));
        assert_eq!(parse_size_kib("x"), None);
    }
}
