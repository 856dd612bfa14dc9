//! Architectural semantics of the x86 MMU model: unit tests and property tests.

use super::mmu::*;
use super::paging;
use super::*;
use crate::arch::caches::CacheHierarchy;
use crate::machine::{self, MachineProfile};
use crate::sim::{Counter, Stats};
use proptest::prelude::*;

struct Rig {
    m: MachineProfile,
    mem: PhysMem,
    caches: CacheHierarchy,
    stats: Stats,
    mmu: Mmu,
}

impl Rig {
    fn new() -> Rig {
        let m = machine::load("haswell-i7-4770").unwrap();
        let caches = CacheHierarchy::new(&m);
        let mut mmu = Mmu::new(&m, 0, 0, 0);
        mmu.set_pcide(true);
        Rig {
            mem: PhysMem::new(1),
            caches,
            stats: Stats::default(),
            mmu,
            m,
        }
    }
    fn tr(&mut self, va: u64, access: Access, user: bool) -> Result<Translated, Fault> {
        let mut env = WalkEnv {
            mem: &self.mem,
            caches: &mut self.caches,
            stats: &mut self.stats,
            holders: None,
            ept: None,
        };
        self.mmu.translate(&mut env, VirtAddr(va), access, user)
    }
    fn map(&mut self, root: Pfn, va: u64, pa: u64, flags: PteFlags) {
        paging::map(
            &mut self.mem,
            root,
            VirtAddr(va),
            PhysAddr(pa),
            PageSize::Size4K,
            flags,
            0,
        );
    }
}

const UVA: u64 = 0x40_0000;
const KVA: u64 = 0xffff_ffff_8100_0000;

#[test]
fn hit_after_walk_and_no_walk_on_second_access() {
    let mut r = Rig::new();
    let root = r.mem.alloc_table(0);
    r.map(root, UVA, 0x9000, PteFlags::USER_DATA);
    r.mmu.write_cr3(root, Pcid(1), false);
    let t1 = r.tr(UVA, Access::Read, true).unwrap();
    assert!(t1.walked && t1.cycles > 0.0);
    let t2 = r.tr(UVA + 8, Access::Read, true).unwrap();
    assert!(!t2.walked && t2.cycles == 0.0);
    assert_eq!(r.stats.counter(Counter::PageWalks), 1);
    let _ = &r.m;
}

#[test]
fn permissions_are_enforced_from_tlb_and_walk() {
    let mut r = Rig::new();
    let root = r.mem.alloc_table(0);
    r.map(root, KVA, 0x9000, PteFlags::KERNEL_DATA);
    r.map(root, UVA, 0xa000, PteFlags::USER_TEXT);
    r.mmu.write_cr3(root, Pcid(1), false);
    assert_eq!(
        r.tr(KVA, Access::Read, true),
        Err(Fault::Protection(VirtAddr(KVA)))
    );
    assert!(r.tr(KVA, Access::Read, false).is_ok());
    assert_eq!(
        r.tr(KVA, Access::Read, true),
        Err(Fault::Protection(VirtAddr(KVA))),
        "from the TLB too"
    );
    assert_eq!(
        r.tr(UVA, Access::Write, true),
        Err(Fault::Protection(VirtAddr(UVA)))
    );
    assert_eq!(
        r.tr(KVA, Access::Exec, false),
        Err(Fault::Protection(VirtAddr(KVA))),
        "kernel data is NX"
    );
}

#[test]
fn entry_of_one_pcid_is_never_hit_under_another() {
    let mut r = Rig::new();
    let a = r.mem.alloc_table(0);
    let b = r.mem.alloc_table(0);
    r.map(a, UVA, 0x9000, PteFlags::USER_DATA);
    r.map(b, UVA, 0xb000, PteFlags::USER_DATA);
    r.mmu.write_cr3(a, Pcid(1), false);
    assert_eq!(
        r.tr(UVA, Access::Read, true).unwrap().page,
        PhysAddr(0x9000)
    );
    r.mmu.write_cr3(b, Pcid(2), true);
    let t = r.tr(UVA, Access::Read, true).unwrap();
    assert!(t.walked, "PCID 2 must not hit PCID 1's entry");
    assert_eq!(t.page, PhysAddr(0xb000));
    r.mmu.write_cr3(a, Pcid(1), true);
    let t = r.tr(UVA, Access::Read, true).unwrap();
    assert!(!t.walked, "no-flush switch back keeps PCID 1's entry");
    assert_eq!(t.page, PhysAddr(0x9000));
}

#[test]
fn global_entry_survives_non_global_flushes_but_not_type_2() {
    let mut r = Rig::new();
    let root = r.mem.alloc_table(0);
    r.map(root, KVA, 0x9000, PteFlags::KERNEL_TEXT.with_global(true));
    r.map(root, UVA, 0xa000, PteFlags::USER_DATA);
    r.mmu.write_cr3(root, Pcid(1), false);
    r.tr(KVA, Access::Exec, false).unwrap();
    r.tr(UVA, Access::Read, true).unwrap();
    r.mmu.write_cr3(root, Pcid(1), false); // flushing CR3 write of PCID 1
    assert!(
        !r.tr(KVA, Access::Exec, false).unwrap().walked,
        "global survives a flushing CR3 write"
    );
    assert!(
        r.tr(UVA, Access::Read, true).unwrap().walked,
        "non-global does not"
    );
    r.mmu.invpcid(InvpcidType::AllNonGlobal);
    assert!(
        !r.tr(KVA, Access::Exec, false).unwrap().walked,
        "global survives INVPCID type 3"
    );
    r.mmu.invpcid(InvpcidType::SingleContext(Pcid(1)));
    assert!(
        !r.tr(KVA, Access::Exec, false).unwrap().walked,
        "global survives INVPCID type 1"
    );
    r.mmu
        .invpcid(InvpcidType::Individual(Pcid(1), VirtAddr(KVA)));
    assert!(
        !r.tr(KVA, Access::Exec, false).unwrap().walked,
        "global survives INVPCID type 0"
    );
    r.mmu.invpcid(InvpcidType::AllInclGlobal);
    assert!(
        r.tr(KVA, Access::Exec, false).unwrap().walked,
        "type 2 flushes globals"
    );
    r.mmu.invlpg(VirtAddr(KVA));
    assert!(
        r.tr(KVA, Access::Exec, false).unwrap().walked,
        "INVLPG flushes a global entry of its page"
    );
}

#[test]
fn without_pcide_every_cr3_write_flushes_non_global() {
    let mut r = Rig::new();
    r.mmu.write_cr3(Pfn(0), Pcid(0), true);
    r.mmu.set_pcide(false);
    let root = r.mem.alloc_table(0);
    r.map(root, UVA, 0x9000, PteFlags::USER_DATA);
    r.map(root, KVA, 0xa000, PteFlags::KERNEL_TEXT.with_global(true));
    r.mmu.write_cr3(root, Pcid(0), false);
    r.tr(UVA, Access::Read, true).unwrap();
    r.tr(KVA, Access::Exec, false).unwrap();
    r.mmu.write_cr3(root, Pcid(0), false);
    assert!(r.tr(UVA, Access::Read, true).unwrap().walked);
    assert!(!r.tr(KVA, Access::Exec, false).unwrap().walked);
}

#[test]
fn invlpg_hits_current_pcid_only_for_non_global() {
    let mut r = Rig::new();
    let a = r.mem.alloc_table(0);
    let b = r.mem.alloc_table(0);
    r.map(a, UVA, 0x9000, PteFlags::USER_DATA);
    r.map(b, UVA, 0x9000, PteFlags::USER_DATA);
    r.mmu.write_cr3(a, Pcid(1), false);
    r.tr(UVA, Access::Read, true).unwrap();
    r.mmu.write_cr3(b, Pcid(2), true);
    r.tr(UVA, Access::Read, true).unwrap();
    r.mmu.invlpg(VirtAddr(UVA)); // in PCID 2
    assert!(r.tr(UVA, Access::Read, true).unwrap().walked);
    r.mmu.write_cr3(a, Pcid(1), true);
    assert!(
        !r.tr(UVA, Access::Read, true).unwrap().walked,
        "PCID 1's entry survives INVLPG run under PCID 2"
    );
}

#[test]
fn large_pages_fill_large_entries_and_fracture_where_needed() {
    let mut r = Rig::new();
    let root = r.mem.alloc_table(0);
    paging::map(
        &mut r.mem,
        root,
        VirtAddr(KVA),
        PhysAddr(0x4000_0000),
        PageSize::Size2M,
        PteFlags::KERNEL_TEXT,
        0,
    );
    let dmap = 0xffff_8880_0000_0000;
    paging::map(
        &mut r.mem,
        root,
        VirtAddr(dmap),
        PhysAddr(0),
        PageSize::Size1G,
        PteFlags::KERNEL_DATA,
        0,
    );
    r.mmu.write_cr3(root, Pcid(1), false);
    let t = r.tr(KVA + 0x1f_f000, Access::Exec, false).unwrap();
    assert_eq!(t.size, PageSize::Size2M);
    assert!(
        !r.tr(KVA + 0x1000, Access::Exec, false).unwrap().walked,
        "one 2M entry covers the page"
    );
    r.tr(dmap + 0x3000_0000, Access::Read, false).unwrap();
    assert!(
        !r.tr(dmap + 0x100, Access::Read, false).unwrap().walked,
        "1G entry in the 1G DTLB"
    );
    // Haswell's ITLB has no 1G entries: executing from the 1G page fractures into 2M entries.
    paging::protect(&mut r.mem, root, VirtAddr(dmap), PteFlags::KERNEL_TEXT);
    r.mmu.invlpg(VirtAddr(dmap));
    r.tr(dmap, Access::Exec, false).unwrap();
    assert!(!r.tr(dmap + 0x1000, Access::Exec, false).unwrap().walked);
    assert!(
        r.tr(dmap + 0x20_0000, Access::Exec, false).unwrap().walked,
        "the next 2M part of the 1G page is a separate entry"
    );
    let itlb_2m = r
        .mmu
        .tlb_entries()
        .filter(|e| e.size == PageSize::Size2M && e.va() == VirtAddr(dmap))
        .count();
    assert!(itlb_2m >= 1, "fractured 2M entry present");
}

#[derive(Debug, Clone)]
enum Op {
    Map {
        space: usize,
        page: u64,
        frame: u64,
        writable: bool,
    },
    Unmap {
        space: usize,
        page: u64,
    },
    Protect {
        space: usize,
        page: u64,
        writable: bool,
    },
    Switch {
        space: usize,
        noflush: bool,
    },
    Access {
        page: u64,
        write: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let page = 0u64..12; // few pages, so operations often hit the same one
    prop_oneof![
        1 => (0..2usize, page.clone(), 1u64..1000, any::<bool>()).prop_map(|(space, page, frame, writable)| Op::Map { space, page, frame, writable }),
        1 => (0..2usize, page.clone()).prop_map(|(space, page)| Op::Unmap { space, page }),
        1 => (0..2usize, page.clone(), any::<bool>()).prop_map(|(space, page, writable)| Op::Protect { space, page, writable }),
        1 => (0..2usize, any::<bool>()).prop_map(|(space, noflush)| Op::Switch { space, noflush }),
        3 => (page, any::<bool>()).prop_map(|(page, write)| Op::Access { page, write }),
    ]
}

fn page_va(page: u64) -> u64 {
    // Spread pages over different PDEs and PDPTEs to exercise the paging-structure caches.
    0x10_0000_0000 * (page % 3) + 0x20_0000 * (page % 5) + 0x1000 * page
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// After any sequence of page-table changes, each followed by the flush the architecture
    /// requires (INVLPG in the current PCID, INVPCID type 0 for another), no lookup returns a
    /// translation the current page tables do not contain.
    #[test]
    fn tlb_never_returns_stale_translations(ops in prop::collection::vec(op(), 1..120)) {
        let mut r = Rig::new();
        let roots = [r.mem.alloc_table(0), r.mem.alloc_table(0)];
        let pcids = [Pcid(1), Pcid(2)];
        let mut current = 0;
        r.mmu.write_cr3(roots[0], pcids[0], false);
        let flush = |r: &mut Rig, space: usize, current: usize, va: u64| {
            if space == current { r.mmu.invlpg(VirtAddr(va)) } else { r.mmu.invpcid(InvpcidType::Individual(pcids[space], VirtAddr(va))) }
        };
        for op in ops {
            match op {
                Op::Map { space, page, frame, writable } => {
                    let flags = PteFlags { writable, ..PteFlags::USER_DATA };
                    r.map(roots[space], page_va(page), frame << 12, flags);
                    flush(&mut r, space, current, page_va(page));
                }
                Op::Unmap { space, page } => {
                    paging::unmap(&mut r.mem, roots[space], VirtAddr(page_va(page)));
                    flush(&mut r, space, current, page_va(page));
                }
                Op::Protect { space, page, writable } => {
                    paging::protect(&mut r.mem, roots[space], VirtAddr(page_va(page)), PteFlags { writable, ..PteFlags::USER_DATA });
                    flush(&mut r, space, current, page_va(page));
                }
                Op::Switch { space, noflush } => {
                    current = space;
                    r.mmu.write_cr3(roots[space], pcids[space], noflush);
                }
                Op::Access { page, write } => {
                    let va = page_va(page);
                    let truth = paging::translate(&r.mem, roots[current], VirtAddr(va));
                    let access = if write { Access::Write } else { Access::Read };
                    match (r.tr(va, access, true), truth) {
                        (Ok(t), Some(leaf)) => {
                            prop_assert_eq!(t.page, leaf.page);
                            prop_assert!(!write || leaf.flags.writable, "write allowed through a stale writable entry");
                        }
                        (Ok(t), None) => prop_assert!(false, "stale translation {:?} for unmapped {:#x}", t, va),
                        (Err(Fault::Protection(_)), Some(leaf)) => prop_assert!(write && !leaf.flags.writable),
                        (Err(Fault::NotPresent(_)), None) => {}
                        (res, truth) => prop_assert!(false, "{:?} vs page tables {:?}", res, truth),
                    }
                }
            }
        }
    }
}

/// A guest's walk under EPT: every guest-physical reference translated, the combined TLB
/// entry no larger than the EPT page, first touches EPT violations, and guest CR3 writes
/// leaving the guest-physical mapping cache alone (SDM vol. 3C 29.4.1).
#[test]
fn guest_walks_in_two_dimensions_and_splinters_large_pages() {
    use super::ept::{HostTables, SecondStage};
    /// A hypervisor that maps guest RAM at host-physical 0 with `backing` pages.
    struct Ept {
        tables: HostTables,
        root: Pfn,
        backing: PageSize,
    }
    impl SecondStage for Ept {
        fn loaded(&self) -> (&HostTables, Pfn, Pcid) {
            (&self.tables, self.root, Pcid(1))
        }
        fn fault_in(&mut self, gpa: u64) {
            let base = gpa & !(self.backing.bytes() - 1);
            let flags = PteFlags::KERNEL_DATA;
            self.tables
                .map(self.root, base, PhysAddr(base), self.backing, flags);
        }
    }
    for (backing, combined) in [
        (PageSize::Size4K, PageSize::Size4K),
        (PageSize::Size2M, PageSize::Size2M),
        (PageSize::Size1G, PageSize::Size2M),
    ] {
        let mut r = Rig::new();
        let mut tables = HostTables::at(1 << 40);
        let root = tables.alloc();
        let mut ept = Ept {
            tables,
            root,
            backing,
        };
        r.mmu.enter_guest();
        let groot = r.mem.alloc_table(0);
        let big = 0x4000_0000;
        paging::map(
            &mut r.mem,
            groot,
            VirtAddr(KVA),
            PhysAddr(big),
            PageSize::Size2M,
            PteFlags::KERNEL_TEXT,
            0,
        );
        r.mmu.write_cr3(groot, Pcid(1), false);
        let tr = |r: &mut Rig, ept: &mut Ept, va: u64| {
            let mut env = WalkEnv {
                mem: &r.mem,
                caches: &mut r.caches,
                stats: &mut r.stats,
                holders: None,
                ept: Some(ept),
            };
            r.mmu
                .translate(&mut env, VirtAddr(va), Access::Exec, false)
                .unwrap()
        };
        let t = tr(&mut r, &mut ept, KVA + 0x5123);
        assert_eq!(t.size, combined, "{backing:?}");
        assert_eq!(t.page.0, (big + 0x5123) & !(combined.bytes() - 1));
        // Three guest tables and the guest page, each a violation of its own EPT page
        // (the tables share one 2 MiB or 1 GiB page).
        let violations = r.stats.counter(Counter::EptViolations);
        let expected = if backing == PageSize::Size4K { 4 } else { 2 };
        assert_eq!(violations, expected, "{backing:?}");
        // The next 4 KiB page: a new TLB entry only if the combined entry is 4 KiB.
        let walks = r.stats.counter(Counter::PageWalks);
        tr(&mut r, &mut ept, KVA + 0x6000);
        let walked_again = r.stats.counter(Counter::PageWalks) > walks;
        assert_eq!(walked_again, combined == PageSize::Size4K, "{backing:?}");
        // ... and, backed by 4 KiB, a violation for the new guest page.
        let expected = expected + (backing == PageSize::Size4K) as u64;
        assert_eq!(r.stats.counter(Counter::EptViolations), expected);
        // A guest CR3 write flushes combined mappings, not guest-physical ones: the walk
        // that follows needs no EPT walk.
        r.mmu.write_cr3(groot, Pcid(1), false);
        let ept_walks = r.stats.counter(Counter::EptWalks);
        tr(&mut r, &mut ept, KVA + 0x5123);
        assert_eq!(r.stats.counter(Counter::EptWalks), ept_walks, "{backing:?}");
        assert_eq!(r.stats.counter(Counter::EptViolations), expected);
    }
}
