//! KVM's MMU for one vCPU (arch/x86/kvm/mmu/mmu.c and tdp_mmu.c of early 2023): the CPU
//! role (what the guest's paging looks like) and the root role (the format of the tables
//! KVM builds), kvm_mmu_reset_context = kvm_mmu_unload (the current root and the cached
//! previous roots) + kvm_init_mmu, kvm_mmu_load at the next entry (find or allocate a root,
//! load EPTP/CR3, flush the current context), and the three flavours' root lifetimes:
//! legacy (roots stay in the per-VM hash while unused), TDP (roots reference-counted; the
//! last put invalidates and zaps a root, so the next load builds a fresh one that the guest
//! faults back in through EPT violations) and shadow paging (one root per guest CR3 and
//! role; `cr0_wp` is part of the role).

use super::ept::HostTables;
use super::vmx::{CR0_PG, CR0_WP};
use crate::arch::x86::{Pcid, Pfn};
use crate::error::{Error, Result};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MmuFlavour {
    /// The older MMU managing EPT (`kvm.tdp_mmu=0`).
    Legacy,
    /// The TDP MMU (default since 5.15).
    Tdp,
    /// Shadow paging, no EPT (`kvm_intel.ept=0`).
    Shadow,
}

impl MmuFlavour {
    pub const ALL: [MmuFlavour; 3] = [MmuFlavour::Legacy, MmuFlavour::Tdp, MmuFlavour::Shadow];
    pub fn parse(s: &str) -> Result<MmuFlavour> {
        match s {
            "legacy" => Ok(MmuFlavour::Legacy),
            "tdp" => Ok(MmuFlavour::Tdp),
            "shadow" => Ok(MmuFlavour::Shadow),
            _ => Err(Error::new(format!(
                "expected legacy, tdp or shadow, got \"{s}\""
            ))),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            MmuFlavour::Legacy => "legacy",
            MmuFlavour::Tdp => "tdp",
            MmuFlavour::Shadow => "shadow",
        }
    }
    pub fn direct(self) -> bool {
        self != MmuFlavour::Shadow
    }
}

/// What KVM does on a guest CR0 write: the behaviours the seed's series compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// kvm.git/queue of early 2023: any change of CR0.PG or CR0.WP resets the MMU context
    /// (kvm_post_set_cr0 → kvm_mmu_reset_context), unloading every root.
    Base,
    /// The seed's patch (v3 3/6): a CR0.WP-only change with a direct root role calls
    /// kvm_init_mmu and keeps the roots.
    KeepRoots,
    /// The follow-up ("Make CR0.WP a guest owned bit"): under EPT the guest owns CR0.WP, the
    /// write does not exit, and KVM refreshes its permission bits lazily
    /// (kvm_mmu_refresh_passthrough_bits) before it walks guest tables itself. Includes
    /// KeepRoots for the writes that still exit.
    GuestOwnedWp,
    /// BROKEN on purpose: a CR0.WP-only change keeps the roots on every flavour and does
    /// not re-initialise the MMU (permission bitmap and shadow role stay stale).
    BrokenKeepRoots,
    /// BROKEN, as it was merged: "Make CR0.WP a guest owned bit" (fb509f76acc8) before its
    /// fix cf9f4c0eb169 ("KVM: x86/mmu: Refresh CR0.WP prior to checking for emulated
    /// permission faults"): the emulator's permission_fault() reads the CR0.WP cached in
    /// the MMU's role, which a guest-owned toggle changes behind KVM's back.
    BrokenBeforeRefreshCr0Wp,
}

impl Variant {
    /// "KVM: VMX: Make CR0.WP a guest owned bit": VMX with EPT only (SVM has no per-bit
    /// CR0 mask, shadow paging must intercept WP).
    pub fn guest_owns_wp(self, flavour: MmuFlavour, hw: crate::machine::VirtFlavour) -> bool {
        matches!(
            self,
            Variant::GuestOwnedWp | Variant::BrokenBeforeRefreshCr0Wp
        ) && flavour.direct()
            && hw == crate::machine::VirtFlavour::Vmx
    }

    /// Whether permission_fault() refreshes the role's CR0.WP from the vCPU first
    /// (kvm_mmu_refresh_passthrough_bits, cf9f4c0eb169): only the code after that fix.
    fn refreshes_passthrough_bits(self) -> bool {
        self == Variant::GuestOwnedWp
    }

    /// A deliberately broken variant, which the oracle must catch.
    pub fn broken(self) -> bool {
        self.name().starts_with("broken-")
    }

    pub const ALL: [Variant; 5] = [
        Variant::Base,
        Variant::KeepRoots,
        Variant::GuestOwnedWp,
        Variant::BrokenKeepRoots,
        Variant::BrokenBeforeRefreshCr0Wp,
    ];
    pub fn parse(s: &str) -> Result<Variant> {
        Variant::ALL
            .into_iter()
            .find(|v| v.name() == s)
            .ok_or_else(|| {
                Error::new(format!(
                    "expected base, keep-roots, guest-owned-wp, broken-keep-roots or broken-before-refresh-cr0wp, got \"{s}\""
                ))
            })
    }
    pub fn name(self) -> &'static str {
        match self {
            Variant::Base => "base",
            Variant::KeepRoots => "keep-roots",
            Variant::GuestOwnedWp => "guest-owned-wp",
            Variant::BrokenKeepRoots => "broken-keep-roots",
            Variant::BrokenBeforeRefreshCr0Wp => "broken-before-refresh-cr0wp",
        }
    }
}

/// The role of the tables KVM builds (kvm_mmu_page_role, the parts that matter here).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RootRole {
    pub direct: bool,
    /// For direct roles always true (kvm_calc_tdp_mmu_root_page_role); for shadow roles
    /// the guest's CR0.WP, because a WP=0 guest gets writable SPTEs for read-only gPTEs.
    pub cr0_wp: bool,
}

/// The guest's paging mode as KVM last computed it (kvm_calc_cpu_role).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuRole {
    pub cr0_wp: bool,
}

#[derive(Debug, Clone)]
struct Root {
    table: Pfn,
    role: RootRole,
    /// Shadow roots: the guest CR3 they shadow.
    guest_cr3: Option<Pfn>,
    /// References held by vCPUs (current or previous root).
    refs: u32,
    valid: bool,
    /// The EPTP/VPID tag the hardware uses for this root's translations.
    tag: Pcid,
}

/// KVM's MMU and CR0 variant from the words given, None when not (TDP, base); an error
/// names the option (`mmu`, `kvm_variant`) as `name` spells it.
pub fn parse_kvm(
    mmu: Option<&str>,
    variant: Option<&str>,
    name: impl Fn(&str) -> String,
) -> Result<(MmuFlavour, Variant)> {
    let flavour = MmuFlavour::parse(mmu.unwrap_or("tdp")).map_err(|e| Error::at(name("mmu"), e))?;
    let variant =
        Variant::parse(variant.unwrap_or("base")).map_err(|e| Error::at(name("kvm_variant"), e))?;
    Ok((flavour, variant))
}

/// What KVM's MMU did, counted like its tracepoints and stats.
#[derive(Debug, Clone, Default)]
pub struct MmuStats {
    pub resets: u64,
    pub init_mmu: u64,
    pub roots_freed: u64,
    pub roots_built: u64,
    pub root_loads: u64,
    pub roots_zapped: u64,
    pub sptes_zapped: u64,
    pub tables_allocated: u64,
    pub cr3_fast: u64,
    pub cr3_slow: u64,
}

impl MmuStats {
    /// Every count with its field's name.
    pub fn named(&self) -> [(&'static str, u64); 10] {
        [
            ("resets", self.resets),
            ("init_mmu", self.init_mmu),
            ("roots_freed", self.roots_freed),
            ("roots_built", self.roots_built),
            ("root_loads", self.root_loads),
            ("roots_zapped", self.roots_zapped),
            ("sptes_zapped", self.sptes_zapped),
            ("tables_allocated", self.tables_allocated),
            ("cr3_fast", self.cr3_fast),
            ("cr3_slow", self.cr3_slow),
        ]
    }
}

/// Cycles the MMU operations cost, by the KvmCosts fields they charge.
#[derive(Debug, Clone, Copy, Default)]
pub struct MmuCycles {
    pub handler: f64,
    pub root_alloc: f64,
}

pub struct KvmMmu {
    pub flavour: MmuFlavour,
    pub variant: Variant,
    pub host: HostTables,
    roots: Vec<Root>,
    current: Option<usize>,
    /// Cached previous roots (KVM_MMU_NUM_PREV_ROOTS = 3).
    prev: Vec<usize>,
    pub cpu_role: CpuRole,
    pub root_role: RootRole,
    /// CR0.WP the permission bitmap (mmu->permissions) was computed for.
    pub permissions_wp: bool,
    /// References other vCPUs hold on each direct root (they run too and keep theirs).
    pub other_vcpus: u32,
    next_tag: u16,
    pub stats: MmuStats,
    /// Shadow paging: child shadow tables unlinked from a root by a guest PGD write, by
    /// (root table, the guest table the entry shadowed). KVM keeps such shadow pages in its
    /// hash, and the next fault through that guest table links them again.
    detached: BTreeMap<(Pfn, Pfn), Pfn>,
}

const PREV_ROOTS: usize = 3;

impl KvmMmu {
    pub fn new(flavour: MmuFlavour, variant: Variant, other_vcpus: u32, cr0: u64) -> KvmMmu {
        let wp = cr0 & CR0_WP != 0;
        KvmMmu {
            flavour,
            variant,
            host: HostTables::default(),
            roots: vec![],
            current: None,
            prev: vec![],
            cpu_role: CpuRole { cr0_wp: wp },
            root_role: role_for(flavour, wp),
            permissions_wp: wp,
            other_vcpus,
            next_tag: 1,
            stats: MmuStats::default(),
            detached: BTreeMap::new(),
        }
    }

    /// The loaded root's table and hardware tag (after `load`).
    pub fn current_root(&self) -> Option<(Pfn, Pcid, RootRole)> {
        self.current
            .map(|i| (self.roots[i].table, self.roots[i].tag, self.roots[i].role))
    }

    /// The guest CR3 the loaded shadow root shadows.
    pub fn current_guest_cr3(&self) -> Option<Pfn> {
        self.current.and_then(|i| self.roots[i].guest_cr3)
    }

    /// kvm_post_set_cr0 after a CR0 write that exited. Returns the cycles of the MMU work.
    pub fn post_set_cr0(&mut self, old: u64, new: u64, c: &super::params::KvmCosts) -> f64 {
        let changed = old ^ new;
        let wp_only = changed == CR0_WP;
        match self.variant {
            Variant::BrokenKeepRoots if wp_only => 0.0,
            Variant::KeepRoots | Variant::GuestOwnedWp | Variant::BrokenBeforeRefreshCr0Wp
                if wp_only && self.root_role.direct =>
            {
                self.init_mmu(new);
                c.init_mmu_cycles
            }
            _ if changed & (CR0_PG | CR0_WP) != 0 => self.reset_context(new, c),
            _ => 0.0,
        }
    }

    /// kvm_init_mmu: recompute the roles and the permission bitmap.
    pub fn init_mmu(&mut self, cr0: u64) {
        let wp = cr0 & CR0_WP != 0;
        self.cpu_role = CpuRole { cr0_wp: wp };
        self.root_role = role_for(self.flavour, wp);
        self.permissions_wp = wp;
        self.stats.init_mmu += 1;
    }

    /// permission_fault() for a supervisor write (arch/x86/kvm/mmu.h), which the emulator's
    /// guest walks (FNAME(walk_addr_generic)) consult: whether mmu->permissions, computed
    /// for the role's CR0.WP, faults a write to a page whose guest PTE is `writable`. `cr0`
    /// is the vCPU's CR0 as kvm_read_cr0_bits() returns it now (a VMREAD for guest-owned
    /// bits). After cf9f4c0eb169 the role's CR0.WP is refreshed from it first under TDP;
    /// before, a toggle that did not exit leaves the role, and so the answer, stale.
    pub fn permission_fault_write(&mut self, writable: bool, cr0: u64) -> bool {
        if self.variant.refreshes_passthrough_bits() && self.flavour.direct() {
            self.refresh_passthrough_bits(cr0);
        }
        !writable && self.permissions_wp
    }

    /// __kvm_mmu_refresh_passthrough_bits: a changed CR0.WP goes into the CPU role and the
    /// permission bitmap is recomputed (reset_guest_paging_metadata); the roots stay.
    fn refresh_passthrough_bits(&mut self, cr0: u64) {
        let wp = cr0 & CR0_WP != 0;
        if self.cpu_role.cr0_wp != wp {
            self.cpu_role.cr0_wp = wp;
            self.permissions_wp = wp;
        }
    }

    /// kvm_mmu_reset_context: unload every root, re-initialise.
    pub fn reset_context(&mut self, cr0: u64, c: &super::params::KvmCosts) -> f64 {
        self.stats.resets += 1;
        let freed = self.unload();
        self.init_mmu(cr0);
        c.unload_cycles + freed as f64 * c.free_root_cycles + c.init_mmu_cycles
    }

    /// kvm_mmu_unload: put the current and the previous roots. Returns how many were put.
    fn unload(&mut self) -> u32 {
        let mut put = 0;
        for i in self
            .current
            .take()
            .into_iter()
            .chain(std::mem::take(&mut self.prev))
        {
            self.put_root(i);
            put += 1;
        }
        put
    }

    fn put_root(&mut self, i: usize) {
        self.stats.roots_freed += 1;
        let r = &mut self.roots[i];
        r.refs -= 1;
        // Only the TDP MMU frees a root when its last reference goes (kvm_tdp_mmu_put_root:
        // the root is invalidated and zapped by a worker); the legacy and shadow MMUs keep
        // unreferenced valid roots in the hash for the next kvm_mmu_get_shadow_page.
        if self.flavour == MmuFlavour::Tdp && r.refs + self.other_vcpus == 0 {
            r.valid = false;
            let table = r.table;
            let (_, leaves) = self.host.zap(table);
            self.stats.roots_zapped += 1;
            self.stats.sptes_zapped += leaves;
        }
    }

    /// kvm_mmu_load at VM entry when no root is loaded: find a valid root with the current
    /// role (and guest CR3, for shadow) or build one; the caller then flushes the root's
    /// tag (kvm_x86_flush_tlb_current). Returns the cycles and the root's tag.
    pub fn load(&mut self, guest_cr3: Pfn, c: &super::params::KvmCosts) -> (MmuCycles, Pcid) {
        debug_assert!(self.current.is_none());
        self.stats.root_loads += 1;
        let key = (!self.root_role.direct).then_some(guest_cr3);
        let (i, alloc) = self.find_or_build(key);
        self.current = Some(i);
        let cycles = MmuCycles {
            handler: c.load_cycles + c.root_lookup_cycles,
            root_alloc: if alloc { c.root_alloc_cycles } else { 0.0 },
        };
        (cycles, self.roots[i].tag)
    }

    fn find_or_build(&mut self, guest_cr3: Option<Pfn>) -> (usize, bool) {
        let role = self.root_role;
        if let Some(i) = self
            .roots
            .iter()
            .position(|r| r.valid && r.role == role && r.guest_cr3 == guest_cr3)
        {
            self.roots[i].refs += 1;
            return (i, false);
        }
        let table = self.host.alloc();
        self.stats.roots_built += 1;
        let tag = Pcid(self.next_tag);
        self.next_tag = self.next_tag % Pcid::MAX + 1;
        let root = Root {
            table,
            role,
            guest_cr3,
            refs: 1,
            valid: true,
            tag,
        };
        // Reuse the slot of a zapped root so long runs stay small.
        match self.roots.iter().position(|r| !r.valid) {
            Some(i) => {
                self.roots[i] = root;
                (i, true)
            }
            None => {
                self.roots.push(root);
                (self.roots.len() - 1, true)
            }
        }
    }

    /// Shadow paging: the guest wrote CR3 (kvm_mmu_new_pgd). The fast path swaps in a
    /// cached previous root with the same guest CR3 and role; otherwise the current root is
    /// put and the next load finds or builds one. Returns (cycles, whether a load follows).
    pub fn new_pgd(&mut self, guest_cr3: Pfn, c: &super::params::KvmCosts) -> (f64, bool) {
        let role = self.root_role;
        let hit = self.prev.iter().position(|&i| {
            self.roots[i].guest_cr3 == Some(guest_cr3) && self.roots[i].role == role
        });
        match hit {
            Some(p) => {
                let i = self.prev.remove(p);
                if let Some(cur) = self.current.replace(i) {
                    self.prev.insert(0, cur);
                }
                self.stats.cr3_fast += 1;
                (c.cr3_fast_switch_cycles, false)
            }
            None => {
                if let Some(cur) = self.current.take() {
                    self.prev.insert(0, cur);
                    if self.prev.len() > PREV_ROOTS {
                        let old = self.prev.pop().unwrap();
                        self.put_root(old);
                    }
                }
                self.stats.cr3_slow += 1;
                (c.cr3_slow_switch_cycles, true)
            }
        }
    }

    /// Whether a valid shadow root shadows guest page table `gfn` (KVM write-protects it).
    pub fn shadows(&self, gfn: Pfn) -> bool {
        self.roots
            .iter()
            .any(|r| r.valid && r.guest_cr3 == Some(gfn))
    }

    /// kvm_mmu_pte_write after an emulated store to entry `slot` of guest page table `gfn`,
    /// which pointed to guest table `old` before: every shadow root of `gfn` drops its SPTE
    /// for that entry (mmu_page_zap_pte), the child shadow table kept for `relink`. Whether
    /// any was present, so KVM flushes the TLB.
    pub fn pte_write(&mut self, gfn: Pfn, slot: usize, old: Option<Pfn>) -> bool {
        let mut present = false;
        for r in self
            .roots
            .iter()
            .filter(|r| r.valid && r.guest_cr3 == Some(gfn))
        {
            let Some(child) = self.host.detach_entry(r.table, slot) else {
                continue;
            };
            self.stats.sptes_zapped += 1;
            present = true;
            // Kept under the guest table it shadowed; one kept before for that table (built
            // again instead of relinked) is superseded.
            let stale = match old {
                Some(g) => self.detached.insert((r.table, g), child),
                None => Some(child),
            };
            if let Some(t) = stale {
                self.host.zap_detached(t);
            }
        }
        present
    }

    /// A shadow #PF through entry `slot` of `root`, whose guest entry now points to guest
    /// table `guest_table`: links the child shadow table kept for it, if any (KVM finds the
    /// shadow page in its hash, kvm_mmu_get_child_sp, with its lower SPTEs intact).
    pub fn relink(&mut self, root: Pfn, slot: usize, guest_table: Pfn) -> bool {
        match self.detached.remove(&(root, guest_table)) {
            Some(child) => {
                self.host.attach_entry(root, slot, child);
                true
            }
            None => false,
        }
    }

    /// Counts a table page allocated by a fault.
    /// The MMU's state for kernel/steady.rs: tables, roots and roles (not its stats).
    pub fn canon(&self, c: &mut crate::sim::Canon) {
        self.host.mem.canon(c);
        c.debug(&(
            &self.roots,
            self.current,
            &self.prev,
            self.cpu_role,
            self.root_role,
            self.permissions_wp,
            self.next_tag,
            &self.detached,
        ));
    }

    pub fn count_tables(&mut self, n: u32) {
        self.stats.tables_allocated += n as u64;
    }
}

fn role_for(flavour: MmuFlavour, wp: bool) -> RootRole {
    RootRole {
        direct: flavour.direct(),
        cr0_wp: if flavour.direct() { true } else { wp },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::virt::params::KvmCosts;

    const ON: u64 = CR0_PG | CR0_WP;

    #[test]
    fn base_unloads_on_wp_toggle_and_tdp_rebuilds_alone() {
        let c = KvmCosts::from(&crate::params::Params::linux());
        let mut m = KvmMmu::new(MmuFlavour::Tdp, Variant::Base, 0, ON);
        m.load(Pfn(1), &c);
        m.post_set_cr0(ON, CR0_PG, &c);
        assert!(m.current_root().is_none());
        m.load(Pfn(1), &c);
        assert_eq!(m.stats.roots_built, 2, "the only vCPU's put zaps the root");
        let mut shared = KvmMmu::new(MmuFlavour::Tdp, Variant::Base, 1, ON);
        shared.load(Pfn(1), &c);
        shared.post_set_cr0(ON, CR0_PG, &c);
        shared.load(Pfn(1), &c);
        assert_eq!(shared.stats.roots_built, 1, "another vCPU holds the root");
    }

    #[test]
    fn keep_roots_only_for_direct_roles() {
        let c = KvmCosts::from(&crate::params::Params::linux());
        for (f, kept) in [(MmuFlavour::Legacy, true), (MmuFlavour::Shadow, false)] {
            let mut m = KvmMmu::new(f, Variant::KeepRoots, 0, ON);
            m.load(Pfn(1), &c);
            m.post_set_cr0(ON, CR0_PG, &c);
            assert_eq!(m.current_root().is_some(), kept, "{f:?}");
            assert!(!m.permissions_wp);
        }
    }
}
