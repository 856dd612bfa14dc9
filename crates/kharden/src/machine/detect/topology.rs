//! CPU and NUMA topology from sysfs (`/sys/devices/system/cpu`, `/sys/devices/system/node`).

use super::{got, Got};
use std::collections::BTreeSet;

/// The online CPUs; all CPUs this process may count on when sysfs does not list them.
pub(crate) fn online_cpus() -> Vec<u32> {
    read_sysfs("/sys/devices/system/cpu/online")
        .and_then(|s| parse_cpu_list(&s))
        .unwrap_or_else(|| {
            (0..std::thread::available_parallelism()
                .map(|n| n.get() as u32)
                .unwrap_or(1))
                .collect()
        })
}

/// (online NUMA nodes, nodes per socket with how it was decided).
pub(crate) fn numa_nodes(sockets: u32) -> (u32, Got<u32>) {
    let nodes = read_sysfs("/sys/devices/system/node/online")
        .and_then(|s| parse_cpu_list(&s))
        .map(|v| v.len() as u32);
    let per_socket = match nodes {
        Some(n) if n >= sockets && n % sockets == 0 => {
            got(n / sockets, format!("/sys/devices/system/node/online lists {n} node(s) over {sockets} socket(s)"))
        }
        Some(n) => got(1, format!("/sys/devices/system/node/online lists {n} node(s), not a multiple of the socket count; 1 per socket assumed")),
        None => got(1, "no /sys/devices/system/node; one node per socket assumed"),
    };
    (nodes.unwrap_or(1), per_socket)
}

pub(crate) fn read_sysfs(path: &str) -> Option<String> {
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

/// (sockets, cores per socket, threads per core) of the online CPUs.
pub(crate) fn topology(online: &[u32]) -> (Got<u32>, Got<u32>, Got<u32>) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
