//! What KVM does in software when a shadow-paging guest stores to a write-protected page
//! table, and the guest page-table walks it makes on the way (arch/x86/kvm 6.2:
//! paging_tmpl.h FNAME(page_fault) and FNAME(walk_addr_generic), x86.c
//! x86_emulate_instruction and emulator_read_write_onepage, mmu.c kvm_mmu_pte_write).

use super::ssdd::Vcpu;
use super::vmx::ExitReason;
use super::GuestPhysAddr;
use crate::arch::x86::{paging, Pfn, VirtAddr};

impl Vcpu<'_> {
    /// FNAME(walk_addr_generic) of `va` through the current guest tables: per level, the
    /// guest entry read through its host address (kvm_vcpu_gfn_to_memslot,
    /// gfn_to_hva_memslot_prot, __get_user) and the checks on it. Returns the cycles and
    /// the guest leaf it found.
    pub(super) fn software_walk(&mut self, va: VirtAddr) -> (f64, paging::Leaf) {
        let c = &self.cfg.costs;
        let (walk, per_level) = (c.guest_walk_cycles, c.guest_walk_level_cycles);
        let root = self.guest.root_of(self.proc);
        let mut tables = vec![root];
        tables.extend(paging::tables_on_walk(&self.guest.mem, root, va));
        let mut cycles = walk;
        for (i, &table) in tables.iter().enumerate() {
            let level = 4 - i as u8;
            let gpa = self.guest.table_gpa(table) + va.index(level) as u64 * 8;
            cycles += per_level + self.host_read_stall(gpa);
        }
        self.counts.sw_walks += 1;
        self.counts.sw_walk_levels += tables.len() as u64;
        let leaf = paging::translate(&self.guest.mem, root, va)
            .unwrap_or_else(|| panic!("KVM walks only addresses the guest maps: {va:?}"));
        (cycles, leaf)
    }

    /// KVM reading guest memory at `gpa` through its host mapping: the line through the
    /// host's caches, the wait beyond an L1 hit (the software path's cycles include one).
    fn host_read_stall(&mut self, gpa: u64) -> f64 {
        let hit = self.caches.load(0, 0, GuestPhysAddr(gpa).host().0, false);
        self.caches.stall_cycles(hit)
    }

    /// An instruction that exited and that KVM emulates, storing to `va` as the supervisor
    /// (GuestOp::EmulatedStore): x86_emulate_instruction fetches and decodes it, then
    /// emulator_write_emulated translates the store's address (vcpu_mmio_gva_to_gpa, a
    /// guest walk whose permission check is permission_fault()); a fault is injected into
    /// the guest as #PF instead of the store. Returns the guest PTE's W bit and whether the
    /// store went through. (The fetch's own walk is left out: its cost matters to no run.)
    pub(super) fn emulated_store(&mut self, va: VirtAddr) -> (bool, bool) {
        self.counts.emulated_insns += 1;
        self.acct.exit_entry += self.cfg.costs.exit_cycles(&self.hw);
        let (walk, leaf) = self.software_walk(va);
        self.acct.emulation += walk + self.cfg.costs.emulate_cycles;
        let writable = leaf.flags.writable;
        (
            writable,
            !self.mmu.permission_fault_write(writable, self.cr0),
        )
    }

    /// One store into the write-protected per-CPU PGD (`pgd`, slot `slot`) under shadow
    /// paging. The #PF exits; FNAME(page_fault) walks the guest tables for the faulting
    /// address, finds the gfn write-tracked, clears the write-flooding counts along the
    /// address's shadow walk (the root's included, so the root is never zapped as flooded)
    /// and asks for emulation. The store is a plain MOV, which the emulator flags PageTable,
    /// so retry_instruction declines to unprotect the gfn and x86_emulate_instruction
    /// emulates it at once: x86_decode_insn fetches the instruction through a second walk
    /// (kvm_fetch_guest_virt), and the write translates its address through a third
    /// (vcpu_mmio_gva_to_gpa: the faulting GPA is reused only for direct MMUs,
    /// `gpa_available`). kvm_mmu_pte_write then zaps the root's SPTE for the written slot,
    /// and a present one makes KVM flush the vCPU's TLB before the next entry
    /// (KVM_REQ_TLB_FLUSH: INVVPID).
    pub(super) fn emulated_pgd_write(&mut self, pgd: Pfn, slot: usize) {
        self.counts.pt_write_faults += 1;
        self.exit(ExitReason::ExceptionNmi);
        let target = self
            .guest
            .cpu_pgd_va()
            .expect("only the per-CPU PGD is written by a guest path")
            .offset(slot as u64 * 8);
        let code = self.guest.clone_code_va();
        let (fault_walk, _) = self.software_walk(target);
        let (fetch_walk, insn) = self.software_walk(code);
        let fetch = self.host_read_stall(insn.translate(code).0);
        let (write_walk, _) = self.software_walk(target);
        let c = &self.cfg.costs;
        self.acct.emulation +=
            fault_walk + fetch_walk + fetch + write_walk + c.emulate_cycles + c.pte_write_cycles;
        let before = self.guest.mem.read(pgd, slot);
        let old = before.present().then(|| before.addr().pfn());
        if self.mmu.pte_write(pgd, slot, old) {
            self.counts.pt_write_flushes += 1;
            self.counts.flushes += 1;
            self.tlb.invalidate_tag(self.tag);
            self.acct.flush += self.hw.invvpid_cycles;
        }
    }
}
