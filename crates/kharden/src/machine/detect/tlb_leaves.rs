//! Decoding of the CPUID leaves that describe TLBs (Intel leaf 18H and leaf 2, AMD
//! 80000005H/80000006H/80000019H) into the profile's TLB arrays. Pure functions of the
//! register values, so they are tested with synthetic registers on any host.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

use super::profile::{PageSizeName, TlbArray, TlbServes};
use super::Vendor;

/// TLB arrays from CPUID registers (`regs(leaf, subleaf)` = [EAX, EBX, ECX, EDX]): leaf 18H
/// (deterministic address translation parameters) where the CPU has it, else the leaf 2
/// descriptors (Intel), else 80000005H/80000006H/80000019H (AMD).
pub(crate) fn arrays(
    vendor: Vendor,
    max_leaf: u32,
    max_ext: u32,
    regs: impl Fn(u32, u32) -> [u32; 4],
) -> Vec<(TlbArray, String)> {
    if vendor == Vendor::Intel && max_leaf >= 0x18 {
        let max_sub = regs(0x18, 0)[0];
        let out: Vec<_> = (0..=max_sub.min(31))
            .filter_map(|sub| leaf18_array(sub, regs(0x18, sub)))
            .collect();
        if !out.is_empty() {
            return out;
        }
    }
    if vendor == Vendor::Intel && max_leaf >= 2 {
        let out = leaf2_arrays(regs(2, 0));
        if !out.is_empty() {
            return out;
        }
    }
    if vendor == Vendor::Amd && max_ext >= 0x8000_0006 {
        let eax_ebx = |leaf| {
            let [eax, ebx, _, _] = regs(leaf, 0);
            [eax, ebx]
        };
        let one_g = (max_ext >= 0x8000_0019).then(|| eax_ebx(0x8000_0019));
        return amd_arrays(eax_ebx(0x8000_0005), eax_ebx(0x8000_0006), one_g);
    }
    vec![]
}

/// One subleaf of leaf 18H ([EAX, EBX, ECX, EDX]) as an array with where it was read, or None
/// for an invalid or unmodelled subleaf.
pub(crate) fn leaf18_array(sub: u32, r: [u32; 4]) -> Option<(TlbArray, String)> {
    let [_, ebx, ecx, edx] = r;
    let kind = edx & 0x1f;
    let serves = match kind {
        1 | 4 => TlbServes::Data,
        2 => TlbServes::Instruction,
        3 => TlbServes::Unified,
        _ => return None, // 0 = invalid, 5 = store-only: a store-side copy of a load TLB, not modelled
    };
    let level = ((edx >> 5) & 7) as u8;
    let full = edx & (1 << 8) != 0;
    let ways = ebx >> 16;
    let sets = ecx;
    let entries = ways.saturating_mul(sets);
    let ps = sizes(ebx & 1 != 0, ebx & 6 != 0, ebx & 8 != 0);
    if entries == 0 || ps.is_empty() || !(1..=2).contains(&level) {
        return None;
    }
    let sharing = ((edx >> 14) & 0xfff) + 1;
    let a = array(
        level,
        serves,
        ps,
        entries,
        if full { entries } else { ways },
    );
    Some((a, format!("CPUID.(EAX=18H,ECX={sub}): type {kind}, level {level}, {ways} ways x {sets} sets{}, shared by up to {sharing} logical processor(s)", if full { ", fully associative" } else { "" })))
}

/// The arrays of leaf 2's descriptor bytes ([EAX, EBX, ECX, EDX]; a register with bit 31 set
/// holds none, and EAX's low byte is the iteration count).
pub(crate) fn leaf2_arrays(r: [u32; 4]) -> Vec<(TlbArray, String)> {
    let mut bytes = vec![];
    for (i, reg) in r.into_iter().enumerate() {
        if reg & (1 << 31) != 0 {
            continue;
        }
        for (j, b) in reg.to_le_bytes().into_iter().enumerate() {
            if !(i == 0 && j == 0) && b != 0 {
                bytes.push(b);
            }
        }
    }
    let mut out = vec![];
    for b in bytes {
        for (level, serves, ps, entries, ways) in leaf2_descriptor(b) {
            out.push((
                array(level, serves, ps, entries, ways),
                format!("CPUID leaf 2 descriptor {b:#04x} (Intel SDM vol. 2A, CPUID, Table 3-12)"),
            ));
        }
    }
    out
}

/// AMD's arrays from the [EAX, EBX] of 80000005H, 80000006H and (if present) 80000019H.
pub(crate) fn amd_arrays(
    l1: [u32; 2],
    l2: [u32; 2],
    one_g: Option<[u32; 2]>,
) -> Vec<(TlbArray, String)> {
    amd_tlb_fields(l1, l2, one_g)
        .into_iter()
        .map(|(level, serves, size, entries, ways, how)| {
            (array(level, serves, vec![size], entries, ways), how)
        })
        .collect()
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

/// `base`, or `base-2`, `base-3`, ... : the first not yet in `taken` (which then holds it), so
/// that arrays CPUID describes alike get names of their own.
pub(crate) fn unique_name(taken: &mut std::collections::BTreeSet<String>, base: &str) -> String {
    let mut n = base.to_string();
    let mut k = 2;
    while !taken.insert(n.clone()) {
        n = format!("{base}-{k}");
        k += 1;
    }
    n
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

/// An array named by its level, what it serves and its page sizes.
fn array(
    level: u8,
    serves: TlbServes,
    page_sizes: Vec<PageSizeName>,
    entries: u32,
    ways: u32,
) -> TlbArray {
    TlbArray {
        name: name_of(level, serves, &page_sizes),
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
    let p: Vec<&str> = sizes.iter().map(|z| z.toml_name()).collect();
    if level == 2 && serves == TlbServes::Unified {
        format!("stlb-{}", p.join("-"))
    } else {
        format!("l{level}{s}-{}", p.join("-"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn leaf18_subleaves_decode() {
        // A first-level data TLB for 4 KiB pages, 4 ways x 16 sets, shared by 2 threads:
        // EDX type 1, level 1 (bits 7:5), sharing - 1 = 1 (bits 25:14); EBX ways 4, 4K bit.
        let edx = 1 | (1 << 5) | (1 << 14);
        let (a, how) = leaf18_array(1, [0, (4 << 16) | 1, 16, edx]).unwrap();
        assert_eq!((a.name.as_str(), a.entries, a.ways), ("l1d-4k", 64, 4));
        assert!(how.contains("4 ways x 16 sets, shared by up to 2"), "{how}");
        // type 0 (invalid) and 5 (store-only) give nothing
        assert!(leaf18_array(0, [0, (4 << 16) | 1, 16, 1 << 5]).is_none());
        assert!(leaf18_array(2, [0, (4 << 16) | 1, 16, 5 | (1 << 5)]).is_none());
    }
}
