//! TLB arrays from a published CPUID dump rather than from this host: the text format of
//! InstLatx64's and AIDA64's dumps, one register line per leaf,
//! `CPUID 80000006: 48002200-68004200-02006140-08009140 [L2: 512 KB]` (leaf, then EAX-EBX-ECX-EDX
//! in hex; anything after the registers is ignored). A leaf listed more than once is its
//! subleaves in order (leaf 4, 0BH, 18H). Only the first processor's block is read: a dump
//! lists every logical CPU, and they agree on the TLB leaves.

use super::{tlb_leaves, Vendor};
use crate::error::{Error, Result};
use std::collections::BTreeMap;

/// [EAX, EBX, ECX, EDX] by (leaf, subleaf).
type Leaves = BTreeMap<(u32, u32), [u32; 4]>;

/// The register lines of the dump's first processor. `place` names the file in errors.
fn parse(place: &str, text: &str) -> Result<Leaves> {
    let mut leaves = Leaves::new();
    for (n, line) in text.lines().enumerate() {
        // A register line starts with the leaf; other lines (headers such as "CPUID
        // Registers (CPU #1):", other sections of the dump) are not registers.
        let Some((leaf, regs)) = line
            .trim_start()
            .strip_prefix("CPUID ")
            .and_then(|rest| rest.split_once(':'))
        else {
            continue;
        };
        let Some(leaf) = hex(leaf.trim()) else {
            continue;
        };
        let bad = || {
            Error::at(
                format!("{place} line {}", n + 1),
                "expected 'CPUID LLLLLLLL: EAX-EBX-ECX-EDX' with eight hex digits each",
            )
        };
        let regs: Vec<u32> = regs
            .split_whitespace()
            .next()
            .ok_or_else(bad)?
            .split('-')
            .map(|r| hex(r).ok_or_else(bad))
            .collect::<Result<_>>()?;
        let [eax, ebx, ecx, edx] = regs[..] else {
            return Err(bad());
        };
        if leaf == 0 && !leaves.is_empty() {
            break; // the next processor's block
        }
        let sub = leaves.range((leaf, 0)..=(leaf, u32::MAX)).count() as u32;
        leaves.insert((leaf, sub), [eax, ebx, ecx, edx]);
    }
    if !leaves.contains_key(&(0, 0)) {
        return Err(Error::at(
            place,
            "expected CPUID register lines, starting with leaf 00000000 ('CPUID 00000000: EAX-EBX-ECX-EDX')",
        ));
    }
    Ok(leaves)
}

fn hex(s: &str) -> Option<u32> {
    (s.len() == 8)
        .then(|| u32::from_str_radix(s, 16).ok())
        .flatten()
}

/// The `[[tlb]]` arrays the dump's CPUID describes, as profile TOML with a comment naming the
/// leaf each came from. `hit_cycles` is not in CPUID: level-1 arrays get 0 (looked up with
/// the L1 cache), level-2 arrays are left for the profile's author to source.
pub fn tlbs_from_cpuid_dump(place: &str, text: &str) -> Result<String> {
    let leaves = parse(place, text)?;
    let regs = |leaf: u32, sub: u32| leaves.get(&(leaf, sub)).copied().unwrap_or([0; 4]);
    let [max_leaf, b, c, d] = regs(0, 0);
    let vendor = match [b, d, c].map(u32::to_le_bytes).concat().as_slice() {
        b"GenuineIntel" => Vendor::Intel,
        b"AuthenticAMD" | b"HygonGenuine" => Vendor::Amd,
        _ => Vendor::Other,
    };
    let max_ext = regs(0x8000_0000, 0)[0];
    let arrays = tlb_leaves::arrays(vendor, max_leaf, max_ext, regs);
    if arrays.is_empty() {
        return Err(Error::at(
            place,
            "expected TLB leaves (Intel leaf 2 or 18H, AMD 80000005H and 80000006H) for a GenuineIntel or AuthenticAMD processor",
        ));
    }
    let mut out = String::new();
    let mut names = std::collections::BTreeSet::new();
    for (mut a, how) in arrays {
        let how = match tlb_leaves::fit_tlb_geometry(&mut a) {
            Some(note) => format!("{how}; {note}"),
            None => how,
        };
        let sizes: Vec<String> = a
            .page_sizes
            .iter()
            .map(|s| format!("\"{}\"", s.toml_name()))
            .collect();
        let hit = if a.level == 1 {
            "hit_cycles = 0\n".to_string()
        } else {
            "# hit_cycles: not in CPUID; give it with its source\n".to_string()
        };
        out += &format!(
            "\n[[tlb]]\nname = \"{}\"  # {place}: {how}\nlevel = {}\nserves = \"{}\"\npage_sizes = [{}]\nentries = {}\nways = {}\n{hit}",
            tlb_leaves::unique_name(&mut names, &a.name),
            a.level,
            a.serves.toml_name(),
            sizes.join(", "),
            a.entries,
            a.ways,
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Atom C2750's leaves 0 and 2 and a second processor's block (InstLatx64's dump).
    const AVOTON: &str = "CPUID Registers (CPU #1):
CPUID 00000000: 0000000B-756E6547-6C65746E-49656E69
CPUID 00000002: 61B3A001-0000FFC2-00000000-00000000
CPUID 80000000: 80000008-00000000-00000000-00000000

CPUID Registers (CPU #2):
CPUID 00000000: 0000000B-756E6547-6C65746E-49656E69
CPUID 00000002: 00000000-00000000-00000000-00000000
";

    #[test]
    fn an_intel_dump_gives_its_leaf_2_arrays() {
        let text = tlbs_from_cpuid_dump("avoton.txt", AVOTON).unwrap();
        let p: toml::Table = toml::from_str(&text).unwrap();
        let arrays = p["tlb"].as_array().unwrap();
        let geometry: Vec<(i64, i64)> = arrays
            .iter()
            .map(|a| {
                (
                    a["entries"].as_integer().unwrap(),
                    a["ways"].as_integer().unwrap(),
                )
            })
            .collect();
        // In the byte order of EAX (its low byte is the count), then EBX: A0h DTLB 32 fully
        // associative, B3h DTLB 128 4-way, 61h ITLB 48 fully associative, C2h 4 KiB/2 MiB DTLB
        // 16 4-way.
        assert_eq!(geometry, [(32, 32), (128, 4), (48, 48), (16, 4)]);
        assert!(text.contains("name = \"l1d-4k-2\""), "names are unique");
        assert!(text.contains("avoton.txt: CPUID leaf 2 descriptor 0x61"));
    }

    #[test]
    fn an_amd_dump_gives_its_extended_leaf_arrays() {
        // EPYC 7763 (InstLatx64's Milan dump): 64-entry fully associative L1s, L2 ITLB 512
        // entries, L2 DTLB 2048, 1 GiB entries in both L1s and the L2 DTLB.
        let milan = "CPUID 00000000: 00000010-68747541-444D4163-69746E65
CPUID 80000000: 80000023-68747541-444D4163-69746E65
CPUID 80000005: FF40FF40-FF40FF40-20080140-20080140
CPUID 80000006: 48002200-68004200-02006140-08009140
CPUID 80000019: F040F040-F0400000-00000000-00000000
";
        let text = tlbs_from_cpuid_dump("milan.txt", milan).unwrap();
        let p: toml::Table = toml::from_str(&text).unwrap();
        let entries: Vec<i64> = p["tlb"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["entries"].as_integer().unwrap())
            .collect();
        assert!(entries.contains(&2048) && entries.contains(&512) && entries.contains(&64));
    }

    #[test]
    fn bad_dumps_are_refused_with_the_place() {
        for (text, want) in [
            ("no registers here", "t.txt: expected CPUID register lines"),
            (
                "CPUID 00000000: 0000000B-756E6547",
                "t.txt line 1: expected 'CPUID",
            ),
            (
                "CPUID 00000002: 61B3A001-0000FFC2-00000000",
                "t.txt line 1: expected 'CPUID",
            ),
            (
                "CPUID 00000000: 00000001-00000000-00000000-00000000",
                "t.txt: expected TLB leaves",
            ),
        ] {
            let e = tlbs_from_cpuid_dump("t.txt", text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }
}
