//! x86 CPUID: vendor, signature, brand string, the paging features, and the raw TLB leaves
//! (decoded in `tlb_leaves`).

use super::profile::TlbArray;
use super::{tlb_leaves, Vendor};
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

/// TLB arrays from this processor's CPUID (tlb_leaves::arrays says which leaves).
pub(crate) fn tlbs(c: &Cpuid) -> Vec<(TlbArray, String)> {
    let regs = |leaf, sub| {
        let r = cpuid(leaf, sub);
        [r.eax, r.ebx, r.ecx, r.edx]
    };
    tlb_leaves::arrays(c.vendor, c.max_leaf, c.max_ext, regs)
}
