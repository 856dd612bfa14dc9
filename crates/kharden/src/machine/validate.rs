//! Input checks that come before a profile is trusted (issue 18): a bounded read of the
//! file, finite numbers everywhere, and topology products computed without overflow. Called
//! by one-line hooks from `load` and `parse`; `MachineProfile::validate` keeps its own range
//! checks.

use super::MachineProfile;
use crate::error::{Error, Result};
use std::io::Read;
use std::path::Path;

/// Largest input file read (a machine profile is a few KiB; an experiment file too).
pub const MAX_INPUT_BYTES: u64 = 1 << 20;
/// Hardware threads the simulator models at most.
pub const MAX_THREADS: u64 = 4096;
/// NUMA nodes per socket at most (sub-NUMA clustering and AMD NPS give up to 4 today).
pub const MAX_NODES_PER_SOCKET: u32 = 8;
/// NUMA nodes at most: each node owns 256 GiB of simulated physical address space and the
/// x86-64 direct map holds 64 TiB, so a few hundred nodes would not fit it.
pub const MAX_NODES: u64 = 64;

/// Reads a text input file of at most `MAX_INPUT_BYTES` (`/dev/zero` is refused, not read
/// forever); `what` names the kind of file in errors.
pub fn read_bounded(path: &str, what: &str) -> Result<String> {
    let f = std::fs::File::open(Path::new(path))
        .map_err(|e| Error::at(path, format!("cannot read {what}: {e}")))?;
    let mut bytes = Vec::new();
    f.take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::at(path, format!("cannot read {what}: {e}")))?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(Error::at(
            path,
            format!("{what} larger than {MAX_INPUT_BYTES} bytes (expected a small TOML file)"),
        ));
    }
    String::from_utf8(bytes).map_err(|_| Error::at(path, format!("{what} is not UTF-8 text")))
}

/// Rejects NaN and infinities anywhere in TOML `text`, naming the key (`a.b[2].c`).
pub fn finite_numbers(place: &str, text: &str) -> Result<()> {
    let Ok(value) = text.parse::<toml::Table>() else {
        return Ok(()); // the typed parse reports syntax errors with their line
    };
    fn walk(v: &toml::Value, key: &str) -> std::result::Result<(), String> {
        match v {
            toml::Value::Float(f) if !f.is_finite() => {
                Err(format!("{key}: expected a finite number, got {f}"))
            }
            toml::Value::Table(t) => t.iter().try_for_each(|(k, v)| {
                walk(
                    v,
                    &if key.is_empty() {
                        k.clone()
                    } else {
                        format!("{key}.{k}")
                    },
                )
            }),
            toml::Value::Array(a) => a
                .iter()
                .enumerate()
                .try_for_each(|(i, v)| walk(v, &format!("{key}[{i}]"))),
            _ => Ok(()),
        }
    }
    walk(&toml::Value::Table(value), "").map_err(|e| Error::at(place, e))
}

/// Topology checks with checked arithmetic (the u32 product of sockets, cores and threads
/// used to wrap to 0 before the 4096 check).
pub fn topology(place: &str, p: &MachineProfile) -> Result<()> {
    let t = &p.topology;
    let threads = (t.sockets as u64)
        .checked_mul(t.cores_per_socket as u64)
        .and_then(|n| n.checked_mul(t.threads_per_core as u64));
    match threads {
        Some(n) if n <= MAX_THREADS => {}
        _ => {
            return Err(Error::at(
                place,
                format!(
                    "topology: sockets x cores_per_socket x threads_per_core = {} x {} x {}, expected at most {MAX_THREADS} hardware threads",
                    t.sockets, t.cores_per_socket, t.threads_per_core
                ),
            ))
        }
    }
    let n = t.numa_nodes_per_socket;
    if n == 0 || n > MAX_NODES_PER_SOCKET || n > t.cores_per_socket.max(1) {
        return Err(Error::at(
            place,
            format!(
                "topology.numa_nodes_per_socket: expected 1..{} (and at most cores_per_socket), got {n}",
                MAX_NODES_PER_SOCKET
            ),
        ));
    }
    if t.sockets as u64 * n as u64 > MAX_NODES {
        return Err(Error::at(
            place,
            format!(
                "topology: sockets x numa_nodes_per_socket = {}, expected at most {MAX_NODES} NUMA nodes",
                t.sockets as u64 * n as u64
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {

    fn profile_with(edit: &str, with: &str) -> String {
        let text = crate::machine::source_text("ivybridge-i5-3550").unwrap();
        let line = text.lines().find(|l| l.starts_with(edit)).unwrap();
        text.replace(line, with)
    }

    /// Issue 18's machine-profile defects, one each.
    #[test]
    fn hostile_profiles_are_one_line_errors() {
        for (key, bad, expect) in [
            (
                "sockets",
                "sockets = 65536",
                "at most 4096 hardware threads",
            ),
            (
                "cores_per_socket",
                "cores_per_socket = 65536",
                "at most 4096",
            ),
            (
                "numa_nodes_per_socket",
                "numa_nodes_per_socket = 300",
                "numa_nodes_per_socket: expected 1..8",
            ),
            (
                "frequency_ghz",
                "frequency_ghz = nan",
                "cpu.frequency_ghz: expected a finite number",
            ),
            (
                "frequency_ghz",
                "frequency_ghz = inf",
                "expected a finite number",
            ),
        ] {
            let text = profile_with(key, bad);
            let e = crate::machine::parse("m.toml", &text)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(expect) && e.starts_with("m.toml") && !e.contains('\n'),
                "{bad}: {e}"
            );
        }
        let e = crate::machine::load("/dev/zero").unwrap_err().to_string();
        assert!(e.contains("larger than"), "{e}");
    }
}
