//! One logical CPU's MMU: CR3/CR4 state, PCID-tagged TLB arrays, paging-structure caches and
//! the hardware walker. Invalidation instructions follow Intel SDM vol. 3A 4.10.4.1 and the
//! INVPCID reference (vol. 2A) exactly: what they must invalidate, and no more.

use super::ept::{GpaCache, SecondStage};
use super::psc::{PagingStructureCache, PscEntry};
use super::tlb::{TlbArray, TlbEntry};
use super::TlbHolders;
use super::{PageSize, Pcid, Pfn, PhysAddr, PhysMem, PteFlags, VirtAddr};
use crate::arch::caches::{CacheHierarchy, HitLevel};
use crate::machine::{MachineProfile, TlbServes};
use crate::sim::{Counter, Stats};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    Exec,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// No present leaf maps the address.
    NotPresent(VirtAddr),
    /// A leaf exists but forbids the access.
    Protection(VirtAddr),
}

/// INVPCID's four types (Intel SDM vol. 2A, INVPCID).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvpcidType {
    /// Type 0: one address in one PCID, global translations excepted.
    Individual(Pcid, VirtAddr),
    /// Type 1: every non-global translation of one PCID.
    SingleContext(Pcid),
    /// Type 2: everything, globals included.
    AllInclGlobal,
    /// Type 3: everything but globals.
    AllNonGlobal,
}

/// What a translation cost and where it came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Translated {
    pub page: PhysAddr,
    pub size: PageSize,
    pub flags: PteFlags,
    /// Cycles beyond an L1 TLB hit (STLB lookup, walk loads).
    pub cycles: f64,
    pub walked: bool,
}

/// Everything outside the MMU that a walk touches.
pub struct WalkEnv<'a> {
    pub mem: &'a PhysMem,
    pub caches: &'a mut CacheHierarchy,
    pub stats: &'a mut Stats,
    /// The index of which CPU walked which kernel page, and this MMU's CPU in it (None for
    /// an MMU on its own).
    pub holders: Option<(&'a mut TlbHolders, usize)>,
    /// The VM's EPT when this MMU runs a guest (`Mmu::enter_guest`).
    pub ept: Option<&'a mut dyn SecondStage>,
}

pub struct Mmu {
    root: Pfn,
    pcid: Pcid,
    pcide: bool,
    pge: bool,
    /// CR0.WP: supervisor writes obey read-only pages (SDM 4.6.1). KERNEXEC clears it
    /// around its writes to read-only kernel data.
    wp: bool,
    l1i: Vec<TlbArray>,
    l1d: Vec<TlbArray>,
    /// Second-level arrays with what they serve.
    l2: Vec<(TlbServes, TlbArray, f64)>,
    psc: PagingStructureCache,
    core: usize,
    socket: usize,
    node: u32,
    /// Recent L1 TLB hits by 4 KiB page, and the count of changes to the tags of the L1
    /// arrays of each side (data, instruction) they were found under.
    recent: [RecentHit; RECENT_HITS],
    l1_changes: [u64; 2],
    /// In VMX non-root mode with EPT: the guest-physical mapping cache. Every guest-physical
    /// address a walk uses (each paging entry's, the leaf's page) then goes through it or an
    /// EPT walk, and the TLBs hold combined mappings no larger than the EPT page.
    gpa_cache: Option<Box<GpaCache>>,
}

/// Where an L1 TLB lookup of a 4 KiB page found its entry: the side (instruction or data),
/// array and slot. While no tag of that side's L1 arrays has changed since (no insert, no
/// invalidation), the same lookup scans the same tags and finds the same slot first, so the
/// hit is taken from here and only its LRU stamp is updated, as the scan would. Every page
/// size an array holds is 4 KiB or larger, so any address in the page finds the same slot.
#[derive(Debug, Clone, Copy)]
struct RecentHit {
    page: u64,
    pcid: Pcid,
    exec: bool,
    l1_changes: u64,
    array: usize,
    slot: usize,
}

const RECENT_HITS: usize = 32;

impl RecentHit {
    fn index(page: u64) -> usize {
        ((page ^ page >> 9) as usize) % RECENT_HITS
    }
}

impl Mmu {
    /// An MMU for a hardware thread on `core` of `socket`, whose memory is on `node`.
    pub fn new(m: &MachineProfile, core: usize, socket: usize, node: u32) -> Mmu {
        let mut l1i = vec![];
        let mut l1d = vec![];
        let mut l2 = vec![];
        for a in &m.tlb {
            let arr = TlbArray::from_profile(a);
            match (a.level, a.serves) {
                (1, TlbServes::Instruction) => l1i.push(arr),
                (1, TlbServes::Data) => l1d.push(arr),
                (1, TlbServes::Unified) => {
                    l1i.push(arr.clone());
                    l1d.push(arr);
                }
                (_, serves) => l2.push((serves, arr, a.hit_cycles as f64)),
            }
        }
        let p = &m.paging_structure_cache;
        Mmu {
            root: Pfn(0),
            pcid: Pcid(0),
            pcide: false,
            pge: m.cpu.features.global_pages,
            wp: true,
            l1i,
            l1d,
            l2,
            psc: PagingStructureCache::new(p.pml4e_entries, p.pdpte_entries, p.pde_entries),
            core,
            socket,
            node,
            recent: [RecentHit {
                page: 0,
                pcid: Pcid(0),
                exec: false,
                l1_changes: u64::MAX,
                array: 0,
                slot: 0,
            }; RECENT_HITS],
            l1_changes: [0; 2],
            gpa_cache: None,
        }
    }

    pub fn root(&self) -> Pfn {
        self.root
    }
    /// The PCID translations are currently tagged with (0 when CR4.PCIDE = 0).
    pub fn current_pcid(&self) -> Pcid {
        self.pcid
    }
    pub fn pcide(&self) -> bool {
        self.pcide
    }
    pub fn node(&self) -> u32 {
        self.node
    }
    /// The core and socket whose caches this hardware thread uses.
    pub fn core(&self) -> usize {
        self.core
    }
    pub fn socket(&self) -> usize {
        self.socket
    }

    /// Sets CR4.PCIDE (only with PCID 0 current, as the architecture requires). Clearing it
    /// flushes all non-global entries of all PCIDs.
    pub fn set_pcide(&mut self, on: bool) {
        assert_eq!(
            self.pcid,
            Pcid(0),
            "CR4.PCIDE changes require CR3[11:0] = 0"
        );
        if self.pcide && !on {
            self.invalidate_tlbs(|e| !e.global);
            self.psc.invalidate_all();
        }
        self.pcide = on;
    }

    /// MOV to CR0 changing WP. Permission checks read CR0.WP when they are made, so no cached
    /// translation needs dropping (SDM 4.10.4.1 lists no CR0.WP flush on Intel).
    pub fn set_wp(&mut self, on: bool) {
        self.wp = on;
    }

    pub fn wp(&self) -> bool {
        self.wp
    }

    /// Toggling CR4.PGE flushes everything, globals included (SDM 4.10.4.1).
    pub fn set_pge(&mut self, on: bool) {
        if on != self.pge {
            self.invalidate_tlbs(|_| true);
            self.psc.invalidate_all();
        }
        self.pge = on;
    }

    /// VMX non-root operation with EPT from now on (a VM entry with a fresh VPID): every
    /// cached translation dropped, guest-physical addresses translated through the EPT the
    /// walks are given (`WalkEnv::ept`).
    pub fn enter_guest(&mut self) {
        self.gpa_cache = Some(Box::default());
        self.invept();
    }

    /// INVEPT single-context of the EPTP the vCPU runs on (KVM's flush when it loads a
    /// root): every combined and guest-physical mapping and paging-structure entry, globals
    /// included, since this vCPU uses one EPTP at a time.
    pub fn invept(&mut self) {
        self.invalidate_tlbs(|_| true);
        self.psc.invalidate_all();
        if let Some(g) = self.gpa_cache.as_mut() {
            **g = GpaCache::default();
        }
    }

    /// MOV to CR3. Without PCIDE every write flushes all non-global entries (PCID 0); with
    /// PCIDE, a write with bit 63 clear flushes the non-global entries of the new PCID, and
    /// with bit 63 set flushes nothing. Returns whether anything was flushed.
    pub fn write_cr3(&mut self, root: Pfn, pcid: Pcid, noflush: bool) -> bool {
        assert!(
            self.pcide || (pcid == Pcid(0) && !noflush),
            "CR3 PCID/no-flush bits need CR4.PCIDE"
        );
        self.root = root;
        self.pcid = pcid;
        if noflush {
            return false;
        }
        self.invalidate_tlbs(|e| e.pcid == pcid && !e.global);
        self.psc.invalidate_where(|p| p == pcid);
        true
    }

    /// INVLPG: entries for the page of `va` in the current PCID, global entries for that page
    /// in any PCID, and all paging-structure-cache entries of the current PCID.
    pub fn invlpg(&mut self, va: VirtAddr) {
        let pcid = self.pcid;
        self.invalidate_page(va, |e| e.pcid == pcid || e.global);
        self.forget_paging_structures(pcid);
    }

    /// What INVLPG and an individual-address INVPCID do beyond the TLBs: drop `pcid`'s
    /// paging-structure-cache entries. All of what they do on a CPU whose TLBs hold no
    /// translation of the page (kernel/mod.rs asks TlbHolders).
    pub fn forget_paging_structures(&mut self, pcid: Pcid) {
        self.psc.invalidate_where(|p| p == pcid);
    }

    pub fn pcid(&self) -> Pcid {
        self.pcid
    }

    /// What a broadcast invalidation of one page does here, in two parts a caller may skip
    /// where they find nothing (kernel/tlb/tlbflush.rs): the page's entries in every PCID,
    /// globals included ...
    pub fn invalidate_page_all_contexts(&mut self, va: VirtAddr) {
        self.invalidate_page(va, |_| true);
    }

    /// ... and all paging-structure-cache entries.
    pub fn invalidate_paging_structure_caches(&mut self) {
        self.psc.invalidate_all();
    }

    pub fn invpcid(&mut self, kind: InvpcidType) {
        match kind {
            InvpcidType::Individual(pcid, va) => {
                self.invalidate_page(va, |e| e.pcid == pcid && !e.global);
                self.forget_paging_structures(pcid);
            }
            InvpcidType::SingleContext(pcid) => {
                self.invalidate_tlbs(|e| e.pcid == pcid && !e.global);
                self.psc.invalidate_where(|p| p == pcid);
            }
            InvpcidType::AllInclGlobal => {
                self.invalidate_tlbs(|_| true);
                self.psc.invalidate_all();
            }
            InvpcidType::AllNonGlobal => {
                self.invalidate_tlbs(|e| !e.global);
                self.psc.invalidate_all();
            }
        }
    }

    fn arrays_mut(&mut self) -> impl Iterator<Item = &mut TlbArray> {
        self.l1i
            .iter_mut()
            .chain(self.l1d.iter_mut())
            .chain(self.l2.iter_mut().map(|(_, a, _)| a))
    }

    fn invalidate_tlbs(&mut self, kill: impl Fn(&TlbEntry) -> bool) {
        self.l1_changes = self.l1_changes.map(|n| n + 1);
        for a in self.arrays_mut() {
            a.invalidate_where(&kill);
        }
    }

    fn invalidate_page(&mut self, va: VirtAddr, kill: impl Fn(&TlbEntry) -> bool) {
        self.l1_changes = self.l1_changes.map(|n| n + 1);
        for a in self.arrays_mut() {
            // Fractured entries may sit under smaller page sizes: check every size the array holds.
            a.invalidate_page_where(va, &kill);
        }
    }

    /// The size of the L1 entry (ITLB for `exec`, else DTLB) a translation of a `size` page
    /// leaves: `size`, or the smaller size the L1 fractures it into.
    pub fn l1_entry_size(&self, exec: bool, size: PageSize) -> PageSize {
        let arrays = if exec { &self.l1i } else { &self.l1d };
        entry_size(arrays, size).unwrap_or(size)
    }

    /// Every TLB entry currently held (all arrays; an entry can be in L1 and L2 at once).
    pub fn tlb_entries(&self) -> impl Iterator<Item = &TlbEntry> {
        self.l1i
            .iter()
            .chain(&self.l1d)
            .chain(self.l2.iter().map(|(_, a, _)| a))
            .flat_map(|a| a.entries())
    }

    /// Every paging-structure-cache entry with the region it covers.
    pub fn psc_entries(&self) -> impl Iterator<Item = (PscEntry, VirtAddr, u64)> + '_ {
        self.psc.entries()
    }

    /// The MMU's state for kernel/steady.rs: control registers, TLB arrays and
    /// paging-structure caches (the recent-hit memo and its change counts only repeat
    /// lookups, and core, socket and node are fixed).
    pub fn canon(&self, c: &mut crate::sim::Canon) {
        let Mmu {
            root,
            pcid,
            pcide,
            pge,
            wp,
            l1i,
            l1d,
            l2,
            psc,
            core: _,
            socket: _,
            node: _,
            recent: _,
            l1_changes: _,
            gpa_cache,
        } = self;
        c.words([
            root.0,
            pcid.0 as u64,
            *pcide as u64,
            *pge as u64,
            *wp as u64,
        ]);
        for a in l1i.iter().chain(l1d).chain(l2.iter().map(|(_, a, _)| a)) {
            a.canon(c);
        }
        psc.canon(c);
        if let Some(g) = gpa_cache {
            g.canon(c);
        }
    }

    /// Translates `va` for an access in user or supervisor mode: L1 TLB, then STLB, then a walk.
    pub fn translate(
        &mut self,
        env: &mut WalkEnv,
        va: VirtAddr,
        access: Access,
        user_mode: bool,
    ) -> Result<Translated, Fault> {
        let pcid = self.pcid;
        if let Some(e) = self.l1_lookup(va, pcid, access == Access::Exec) {
            env.stats.count(if access == Access::Exec {
                Counter::ItlbL1Hit
            } else {
                Counter::DtlbL1Hit
            });
            check(va, e.flags, access, user_mode, self.wp)?;
            return Ok(Translated {
                page: e.page,
                size: e.size,
                flags: e.flags,
                cycles: 0.0,
                walked: false,
            });
        }
        let serves = |s: TlbServes| {
            s == TlbServes::Unified || (s == TlbServes::Instruction) == (access == Access::Exec)
        };
        let mut stlb_cycles = 0.0;
        for (s, arr, hit) in self.l2.iter_mut() {
            if !serves(*s) {
                continue;
            }
            stlb_cycles = f64::max(stlb_cycles, *hit);
            if let Some(e) = arr.lookup(va, pcid) {
                env.stats.count(Counter::StlbHit);
                check(va, e.flags, access, user_mode, self.wp)?;
                self.l1_changes[(access == Access::Exec) as usize] += 1;
                let l1 = if access == Access::Exec {
                    &mut self.l1i
                } else {
                    &mut self.l1d
                };
                insert_fractured(l1, e, va);
                return Ok(Translated {
                    page: e.page,
                    size: e.size,
                    flags: e.flags,
                    cycles: *hit,
                    walked: false,
                });
            }
        }
        let walked = self.walk(env, va);
        if let Some((holders, cpu)) = env.holders.as_mut() {
            holders.note_walk(*cpu, va, walked.as_ref().ok().map(|w| w.1));
        }
        let (leaf_page, size, flags, walk_cycles) = walked?;
        check(va, flags, access, user_mode, self.wp)?;
        let entry = TlbEntry {
            vpn: va.page_number(size),
            size,
            pcid,
            global: flags.global && self.pge,
            page: leaf_page,
            flags,
        };
        for (s, arr, _) in self.l2.iter_mut() {
            if serves(*s) && arr.holds(size) {
                arr.insert(entry);
            }
        }
        self.l1_changes[(access == Access::Exec) as usize] += 1;
        let l1 = if access == Access::Exec {
            &mut self.l1i
        } else {
            &mut self.l1d
        };
        insert_fractured(l1, entry, va);
        Ok(Translated {
            page: leaf_page,
            size,
            flags,
            cycles: stlb_cycles + walk_cycles,
            walked: true,
        })
    }

    /// The L1 TLB lookup of `va` on the instruction or data side: the first array (in
    /// profile order) holding a matching entry, which becomes its set's most recently used.
    fn l1_lookup(&mut self, va: VirtAddr, pcid: Pcid, exec: bool) -> Option<TlbEntry> {
        let page = va.0 >> 12;
        let r = &mut self.recent[RecentHit::index(page)];
        let l1 = if exec { &mut self.l1i } else { &mut self.l1d };
        let changes = self.l1_changes[exec as usize];
        if r.page == page && r.pcid == pcid && r.exec == exec && r.l1_changes == changes {
            return Some(l1[r.array].hit(r.slot));
        }
        let (array, slot) = l1
            .iter()
            .enumerate()
            .find_map(|(i, a)| a.find(va, pcid).map(|slot| (i, slot)))?;
        *r = RecentHit {
            page,
            pcid,
            exec,
            l1_changes: changes,
            array,
            slot,
        };
        Some(l1[array].hit(slot))
    }

    /// The hardware walk: start from the deepest paging-structure-cache hit, load each
    /// remaining entry through the data caches.
    fn walk(
        &mut self,
        env: &mut WalkEnv,
        va: VirtAddr,
    ) -> Result<(PhysAddr, PageSize, PteFlags, f64), Fault> {
        env.stats.count(Counter::PageWalks);
        let pcid = self.pcid;
        let (mut table, mut level, mut w, mut u, mut nx) = match self.psc.lookup(va, pcid) {
            Some(hit) => {
                env.stats.count(Counter::PscHits);
                (
                    hit.entry.table,
                    hit.next_level,
                    hit.entry.writable,
                    hit.entry.user,
                    hit.entry.no_exec,
                )
            }
            None => (self.root, 4, true, true, false),
        };
        let mut cycles = 0.0;
        loop {
            let idx = va.index(level);
            let mut entry_pa = table.addr().0 + idx as u64 * 8;
            if self.gpa_cache.is_some() {
                entry_pa = self.second_stage(env, entry_pa, &mut cycles).0;
            }
            let remote = env.mem.node_of(table) != self.node;
            let hit = env.caches.load(self.core, self.socket, entry_pa, remote);
            env.stats.count(match hit {
                HitLevel::L1 => Counter::WalkLoadsL1,
                HitLevel::L2 => Counter::WalkLoadsL2,
                HitLevel::Llc => Counter::WalkLoadsLlc,
                HitLevel::LocalDram | HitLevel::RemoteDram => Counter::WalkLoadsDram,
            });
            if hit == HitLevel::RemoteDram {
                env.stats.count(Counter::WalkLoadsRemoteDram);
            }
            cycles += env.caches.cycles(hit);
            let e = env.mem.read(table, idx);
            if !e.present() {
                return Err(Fault::NotPresent(va));
            }
            w &= e.writable();
            u &= e.user();
            nx |= e.no_exec();
            let size = e.leaf_size(level);
            if let Some(size) = size {
                let flags = PteFlags {
                    writable: w,
                    user: u,
                    no_exec: nx,
                    global: e.global(),
                };
                if self.gpa_cache.is_some() {
                    // The combined mapping: no larger than the EPT page behind it.
                    let gpa = e.addr().0 + (va.0 & (size.bytes() - 1));
                    let (hpa, host_size) = self.second_stage(env, gpa, &mut cycles);
                    let size = size.min(host_size);
                    return Ok((PhysAddr(hpa & !(size.bytes() - 1)), size, flags, cycles));
                }
                return Ok((e.addr(), size, flags, cycles));
            }
            let next = e.addr().pfn();
            self.psc.fill(
                level,
                va,
                PscEntry {
                    pcid,
                    prefix: 0,
                    table: next,
                    writable: w,
                    user: u,
                    no_exec: nx,
                },
            );
            table = next;
            level -= 1;
        }
    }
}

impl Mmu {
    /// A guest-physical address to host-physical, through the guest-physical mapping cache
    /// or an EPT walk (its loads through the data caches, their cycles added to `cycles`);
    /// with the EPT page's size. An absent mapping is an EPT violation: the hypervisor maps
    /// the page (SecondStage::fault_in) and the walk retries.
    #[cold]
    #[inline(never)]
    fn second_stage(&mut self, env: &mut WalkEnv, gpa: u64, cycles: &mut f64) -> (u64, PageSize) {
        let cache = self.gpa_cache.as_mut().expect("second_stage in a guest");
        let ept = env
            .ept
            .as_deref_mut()
            .expect("a guest's MMU walks with its VM's EPT");
        let (core, socket) = (self.core, self.socket);
        loop {
            let (caches, stats) = (&mut *env.caches, &mut *env.stats);
            let mut walked = false;
            let (tables, root, tag) = ept.loaded();
            // EPT tables come from the memory of the node KVM's faulting thread ran on:
            // taken as local.
            let leaf = cache.translate(tables, root, tag, gpa, &mut |pa| {
                walked = true;
                stats.count(Counter::EptWalkLoads);
                let hit = caches.load(core, socket, pa, false);
                *cycles += caches.cycles(hit);
            });
            if walked {
                env.stats.count(Counter::EptWalks);
            }
            if let Some(l) = leaf {
                return (l.page.0 + (gpa & (l.size.bytes() - 1)), l.size);
            }
            env.stats.count(Counter::EptViolations);
            ept.fault_in(gpa);
        }
    }
}

/// The size of the entries `arrays` keep for a page of `size`: the size itself where an
/// array holds it, else the largest smaller size one holds (the hardware "fractures" the
/// large page), else none.
fn entry_size(arrays: &[TlbArray], size: PageSize) -> Option<PageSize> {
    PageSize::ALL
        .iter()
        .rev()
        .copied()
        .filter(|&s| s <= size)
        .find(|&s| arrays.iter().any(|a| a.holds(s)))
}

/// Inserts into the L1 array that holds the entry's size; where none does (e.g. 1 GiB pages
/// in an ITLB without 1 GiB entries), into the array with the largest smaller size, as the
/// smaller page containing `va`.
fn insert_fractured(arrays: &mut [TlbArray], e: TlbEntry, va: VirtAddr) {
    if let Some(a) = arrays.iter_mut().find(|a| a.holds(e.size)) {
        a.insert(e);
        return;
    }
    let Some(s) = entry_size(arrays, e.size) else {
        return;
    };
    let offset = va.align_down(s).0 - va.align_down(e.size).0;
    let part = TlbEntry {
        vpn: va.page_number(s),
        size: s,
        page: PhysAddr(e.page.0 + offset),
        ..e
    };
    arrays.iter_mut().find(|a| a.holds(s)).unwrap().insert(part);
}

fn check(
    va: VirtAddr,
    f: PteFlags,
    access: Access,
    user_mode: bool,
    wp: bool,
) -> Result<(), Fault> {
    let denied = (user_mode && !f.user)
        || (access == Access::Write && !f.writable && (user_mode || wp))
        || (access == Access::Exec && f.no_exec);
    if denied {
        Err(Fault::Protection(va))
    } else {
        Ok(())
    }
}
