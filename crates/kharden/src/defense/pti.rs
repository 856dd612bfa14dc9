//! Page-table isolation (Meltdown): user mode runs on a second PGD that maps the user half
//! plus only the entry trampoline; every kernel entry and exit switches CR3.
//!
//! With PCID the two PGDs get two tags, kernel PCID and user PCID = kernel PCID | bit 11
//! (FreeBSD's seed 003 and Linux's X86_CR3_PTI_PCID_USER_BIT), and CR3 writes set the
//! no-flush bit, so neither half loses its TLB entries. Without PCID every switch flushes all
//! non-global entries. User-address invalidations done in the kernel's context must also
//! reach the user PCID: with INVPCID immediately (type 0 on the user PCID), without it by a
//! deferred flush at the next return to user (Linux's user_pcid_flush_mask, FreeBSD's
//! ucr3_load_mask).

use super::{CounterSlots, Defense};
use crate::arch::x86::{paging, InvpcidType, PageSize, Pcid, VirtAddr};
use crate::kernel::memory::layout;
use crate::kernel::memory::layout::{CPU_ENTRY_AREA, KERNEL_DATA, KERNEL_TEXT};
use crate::kernel::{BootConfig, CpuId, Kernel, KernelGlobal, MmId};
use crate::machine::MachineProfile;
use crate::oracle::{pti as invariant, Violation};
use crate::params::{Decl, Params, Unit};
use crate::sim::OwnedCounter;
use crate::sim::TimeCategory;

/// Bit 11 of the PCID marks the user half's tag.
pub const USER_PCID_BIT: u16 = 1 << 11;

pub const FAMILY: super::Family = super::Family {
    name: "pti",
    boot_option: false,
    variants: &[
        super::Variant::new("pti:freebsd", &[], "PTI as FreeBSD does it: no global kernel mappings, user PCID = kernel PCID | bit 11, no-flush CR3 switches with PCID", false, |s| Box::new(Pti::new(Variant::FreeBsd, s))),
        super::Variant::new("pti:linux", &["pti"], "PTI as Linux does it (pti=auto): without PCID, kernel text and rodata cloned into the user tables and global; deferred user-PCID flushes or INVPCID", false, |s| Box::new(Pti::new(Variant::Linux, s))),
        super::Variant::new("pti:linux-forced", &["pti=on"], "Linux PTI booted with pti=on: only the entry text is cloned into user tables and global (pti_kernel_image_global_ok() is false unless PTI was chosen automatically)", false, |s| Box::new(Pti::new(Variant::LinuxForced, s))),
        super::Variant::new("pti:broken-global-text", &[], "BROKEN: PTI with PCID that leaves kernel text global (its TLB entries survive into user mode)", true, |s| Box::new(Pti::new(Variant::BrokenGlobalText, s))),
        super::Variant::new("pti:broken-user-maps-kernel", &[], "BROKEN: user page tables that still map the whole kernel half", true, |s| Box::new(Pti::new(Variant::BrokenUserMapsKernel, s))),
        super::Variant::new("pti:broken-no-user-flush", &[], "BROKEN: PTI with PCID that never flushes user-PCID entries after a user-address invalidation", true, |s| Box::new(Pti::new(Variant::BrokenNoUserFlush, s))),
        super::Variant::new("pti:broken-before-clear-global", &[], "BROKEN, as Linux 4.17-4.18.4 had it: without PCID the whole kernel image stays global, its read-write data included (fixed by \"x86/mm/pti: Clear Global bit more aggressively\")", true, |s| Box::new(Pti::new(Variant::BrokenBeforeClearGlobal, s))),
    ],
    params: &[Decl::num("pti.switch_macro_cycles", Unit::Cycles, (0.0, 10_000.0), "the CR3-switch macro's own instructions at each kernel entry and exit")],
    excludes: &[],
    counters: &[("deferred_user_flushes", "Linux PTI: user-PCID flushes deferred to the next return to user space")],
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    FreeBsd,
    Linux,
    /// Linux with pti=on: no global kernel image, whatever the CPU.
    LinuxForced,
    /// Kernel text global even with PCID: its entries outlive the switch to user mode.
    BrokenGlobalText,
    /// User PGD shares every kernel PGD slot: isolation in name only.
    BrokenUserMapsKernel,
    /// Never invalidates the user PCID's copy of a flushed user translation.
    BrokenNoUserFlush,
    /// Linux before "x86/mm/pti: Clear Global bit more aggressively" (Dave Hansen, 2018):
    /// without PCID the G bit was cleared nowhere in the image, so kernel data was global.
    BrokenBeforeClearGlobal,
}

impl Variant {
    fn is_linux(self) -> bool {
        matches!(
            self,
            Variant::Linux | Variant::LinuxForced | Variant::BrokenBeforeClearGlobal
        )
    }
}

pub struct Pti {
    variant: Variant,
    /// pti.switch_macro_cycles.
    switch_macro_cycles: f64,
    deferred_user_flushes: OwnedCounter,
    /// Per CPU: a user-PCID flush is owed at the next return to user mode.
    deferred_user_flush: Vec<bool>,
}

impl Pti {
    pub fn new(variant: Variant, slots: &CounterSlots) -> Pti {
        Pti {
            variant,
            switch_macro_cycles: 0.0,
            deferred_user_flushes: slots.get("deferred_user_flushes"),
            deferred_user_flush: vec![],
        }
    }

    /// Kernel memory the user-mode page tables may map by this variant's design.
    pub fn allowed_in_user_mode(&self, k: &Kernel) -> Vec<(u64, u64)> {
        let slot = VirtAddr(CPU_ENTRY_AREA).align_down(PageSize::Size1G).0 & !((1u64 << 39) - 1);
        let mut allowed = vec![(slot, slot + (1 << 39))];
        let entry = k.paths.entry_text_page().0;
        allowed.push((entry, entry + PageSize::Size2M.bytes()));
        if self.clones_image(k) {
            // Linux without PCID maps kernel text and rodata into user tables
            // (pti_clone_kernel_text): judged not secret, and global, they spare the refills.
            allowed.push((KERNEL_TEXT, KERNEL_DATA));
        }
        allowed
    }

    /// Whether the user tables map the kernel's text and rodata, not only its entry text.
    fn clones_image(&self, k: &Kernel) -> bool {
        self.variant.is_linux()
            && matches!(
                k.config.global_kernel,
                KernelGlobal::ClonedImage | KernelGlobal::WholeImage
            )
    }

    fn user_pcid(k: &Kernel, cpu: CpuId) -> Pcid {
        let kernel = k.kernel_pcid(cpu);
        if k.cpus[cpu].mmu.pcide() {
            Pcid(kernel.0 | USER_PCID_BIT)
        } else {
            kernel
        }
    }

    /// The trampoline's own memory: entry text and this CPU's entry stack.
    fn trampoline(&self, k: &mut Kernel, cpu: CpuId) {
        let area = layout::cpu_entry_area(cpu);
        for (va, access) in [
            (area, crate::arch::x86::Access::Exec),
            (area.offset(4096), crate::arch::x86::Access::Write),
        ] {
            k.touch(cpu, va, access)
                .expect("cpu_entry_area is mapped in both PGDs");
        }
        k.compute(cpu, self.switch_macro_cycles, TimeCategory::EntryTrampoline);
    }
}

impl Defense for Pti {
    fn canon(&self, c: &mut crate::sim::Canon) {
        let Pti {
            variant: _,
            switch_macro_cycles: _,
            deferred_user_flushes: _,
            deferred_user_flush,
        } = self;
        c.debug(deferred_user_flush);
    }

    fn name(&self) -> String {
        match self.variant {
            Variant::FreeBsd => "pti:freebsd",
            Variant::Linux => "pti:linux",
            Variant::LinuxForced => "pti:linux-forced",
            Variant::BrokenGlobalText => "pti:broken-global-text",
            Variant::BrokenUserMapsKernel => "pti:broken-user-maps-kernel",
            Variant::BrokenNoUserFlush => "pti:broken-no-user-flush",
            Variant::BrokenBeforeClearGlobal => "pti:broken-before-clear-global",
        }
        .into()
    }

    fn configure(&mut self, config: &mut BootConfig, machine: &MachineProfile, params: &Params) {
        self.switch_macro_cycles = params.num("pti.switch_macro_cycles");
        let pcid = config.use_pcid && machine.cpu.features.pcid;
        config.global_kernel = match self.variant {
            // FreeBSD: pg_g = 0 whenever PTI is on.
            Variant::FreeBsd | Variant::BrokenUserMapsKernel | Variant::BrokenNoUserFlush => {
                KernelGlobal::None
            }
            // Linux: pti_kernel_image_global_ok() is false with PCID and with pti=on; the
            // entry text stays global (measured on 6.1: kernel/mod.rs KernelGlobal).
            Variant::Linux | Variant::BrokenBeforeClearGlobal if pcid => KernelGlobal::EntryText,
            Variant::LinuxForced => KernelGlobal::EntryText,
            Variant::Linux => KernelGlobal::ClonedImage,
            Variant::BrokenGlobalText => KernelGlobal::ClonedImage,
            // Only pti_clone_kernel_text() and set_memory_nonglobal() with PCID touched G.
            Variant::BrokenBeforeClearGlobal => KernelGlobal::WholeImage,
        };
        self.deferred_user_flush = vec![false; machine.threads() as usize];
    }

    fn on_mm_created(&mut self, k: &mut Kernel, _cpu: CpuId, mm: MmId) {
        // pgd_alloc() takes both halves from the allocating CPU's node, as the kernel PGD.
        let user_root = k.mem.alloc_table(k.mms[mm].node);
        let kernel_root = k.mms[mm].root;
        if self.variant == Variant::BrokenUserMapsKernel {
            for slot in 256..512 {
                paging::share_pml4_entry(&mut k.mem, user_root, kernel_root, slot);
            }
        } else {
            // cpu_entry_area has a PGD slot of its own: share it.
            paging::share_pml4_entry(
                &mut k.mem,
                user_root,
                kernel_root,
                VirtAddr(CPU_ENTRY_AREA).index(4),
            );
            // The cloned PMDs are the kernel's own, flags included.
            let pages: Vec<VirtAddr> = if self.clones_image(k) {
                (KERNEL_TEXT..KERNEL_DATA)
                    .step_by(PageSize::Size2M.bytes() as usize)
                    .map(VirtAddr)
                    .collect()
            } else {
                vec![k.paths.entry_text_page()]
            };
            for va in pages {
                let leaf =
                    paging::translate(&k.mem, kernel_root, va).expect("kernel image is mapped");
                paging::map(
                    &mut k.mem,
                    user_root,
                    va,
                    leaf.page,
                    PageSize::Size2M,
                    leaf.flags,
                    0,
                );
            }
        }
        k.mms[mm].user_root = Some(user_root);
    }

    fn on_user_pgd_populated(&mut self, k: &mut Kernel, mm: MmId, slot: usize) {
        // The user half below the PGD is shared: mirror the new slot (pti_set_user_pgtbl).
        if let Some(user_root) = k.mms[mm].user_root {
            let root = k.mms[mm].root;
            paging::share_pml4_entry(&mut k.mem, user_root, root, slot);
        }
    }

    fn on_kernel_entry(&mut self, k: &mut Kernel, cpu: CpuId) {
        self.trampoline(k, cpu);
        let mm = k.current_mm(cpu);
        let pcide = k.cpus[cpu].mmu.pcide();
        let root = k.pgd(mm, cpu);
        k.write_cr3(cpu, root, k.kernel_pcid(cpu), pcide);
    }

    fn on_kernel_exit(&mut self, k: &mut Kernel, cpu: CpuId) {
        let mm = k.current_mm(cpu);
        let pcide = k.cpus[cpu].mmu.pcide();
        let user_root = k
            .user_pgd(mm, cpu)
            .expect("PTI address spaces have a user PGD");
        let flush_owed = std::mem::take(&mut self.deferred_user_flush[cpu]);
        k.write_cr3(
            cpu,
            user_root,
            Self::user_pcid(k, cpu),
            pcide && !flush_owed,
        );
        self.trampoline(k, cpu);
    }

    fn on_switch_mm(&mut self, k: &mut Kernel, cpu: CpuId, _mm: MmId, need_flush: bool) {
        // A recycled ASID's user half is stale too (Linux: invalidate_user_asid()).
        if need_flush && k.cpus[cpu].mmu.pcide() {
            self.deferred_user_flush[cpu] = true;
        }
    }

    fn on_user_tlb_flush(
        &mut self,
        k: &mut Kernel,
        cpu: CpuId,
        _mm: MmId,
        start: VirtAddr,
        pages: u64,
    ) {
        self.flush_user_pcid(k, cpu, start, pages);
    }

    fn on_kernel_page_flush(&mut self, k: &mut Kernel, cpu: CpuId, start: VirtAddr, pages: u64) {
        // Linux's __flush_tlb_one_kernel goes through flush_tlb_one_user, which under PTI
        // invalidates the address in the user PCID too (INVPCID type 0, or a deferred flush).
        if self.variant.is_linux() {
            self.flush_user_pcid(k, cpu, start, pages);
        }
    }

    fn check_user_mode(&self, k: &Kernel, cpu: CpuId) -> Option<Violation> {
        invariant::check(k, cpu, &self.name(), &self.allowed_in_user_mode(k))
    }
}

impl Pti {
    /// Invalidates [start, start + pages) in this CPU's user PCID: INVPCID type 0 per page
    /// where the CPU has it and the range is small, else a full user-PCID flush owed at the
    /// next return to user mode (Linux's user_pcid_flush_mask, FreeBSD's ucr3_load_mask).
    fn flush_user_pcid(&mut self, k: &mut Kernel, cpu: CpuId, start: VirtAddr, pages: u64) {
        if !k.cpus[cpu].mmu.pcide() || self.variant == Variant::BrokenNoUserFlush {
            return; // without PCID, the CR3 write at exit flushes every non-global entry anyway
        }
        let user_pcid = Self::user_pcid(k, cpu);
        if k.machine.cpu.features.invpcid && pages <= k.params.tlb_single_page_flush_ceiling {
            for p in 0..pages {
                k.invpcid(
                    cpu,
                    InvpcidType::Individual(user_pcid, start.offset(p * 4096)),
                );
            }
        } else {
            self.deferred_user_flush[cpu] = true;
            k.cpus[cpu].stats.count_owned(self.deferred_user_flushes);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::arch::x86::{paging, PageSize, VirtAddr};
    use crate::kernel::memory::layout::{cpu_entry_area, KERNEL_DATA, KERNEL_RODATA, KERNEL_TEXT};
    use crate::kernel::Kernel;
    use crate::{defense, machine};

    /// The kernel image's global bits and what the user tables map, per variant, as Linux
    /// 6.1 was measured to do it (tests/qemu/text_mapping.rs) and FreeBSD's pmap does it.
    #[test]
    fn each_variant_makes_global_and_clones_what_its_kernel_does() {
        // (defenses, text, rodata, entry text, cpu_entry_area global; user tables map rodata)
        for (d, text, rodata, entry, cea, user_rodata) in [
            ("none", true, true, true, true, false),
            ("pti:linux,nopcid", true, true, true, true, true),
            ("pti:linux", false, false, true, true, false),
            ("pti:linux-forced,nopcid", false, false, true, true, false),
            ("pti:freebsd", false, false, false, false, false),
            (
                "pti:broken-before-clear-global,nopcid",
                true,
                true,
                true,
                true,
                true,
            ),
            (
                "pti:broken-before-clear-global",
                false,
                false,
                true,
                true,
                false,
            ),
        ] {
            let m = machine::load("haswell-i7-4770").unwrap();
            let mut k = Kernel::boot(m, defense::parse_list(d).unwrap());
            let t = k.spawn("t", None);
            let mm = k.tasks[t].mm;
            let global = |k: &Kernel, va: u64| {
                paging::translate(&k.mem, k.kernel_root, VirtAddr(va))
                    .unwrap()
                    .flags
                    .global
            };
            // A text page that is not the entry text's.
            let other_text = (KERNEL_TEXT..KERNEL_RODATA)
                .step_by(PageSize::Size2M.bytes() as usize)
                .find(|&va| VirtAddr(va) != k.paths.entry_text_page())
                .unwrap();
            assert_eq!(global(&k, other_text), text, "{d}: text");
            assert_eq!(global(&k, KERNEL_RODATA), rodata, "{d}: rodata");
            let entry_text = k.paths.entry_text_page().0;
            assert_eq!(global(&k, entry_text), entry, "{d}: entry text");
            assert_eq!(global(&k, cpu_entry_area(0).0), cea, "{d}: cpu_entry_area");
            // Data is global without PTI, and in Linux without PCID before "x86/mm/pti:
            // Clear Global bit more aggressively".
            let data_global = d == "none" || d == "pti:broken-before-clear-global,nopcid";
            assert_eq!(global(&k, KERNEL_DATA), data_global, "{d}: data");
            if let Some(user_root) = k.mms[mm].user_root {
                let maps = |va: u64| paging::translate(&k.mem, user_root, VirtAddr(va)).is_some();
                assert_eq!(
                    maps(KERNEL_RODATA),
                    user_rodata,
                    "{d}: user tables map rodata"
                );
                assert!(maps(entry_text), "{d}: user tables map the entry text");
                assert!(!maps(KERNEL_DATA), "{d}: user tables map kernel data");
            }
        }
    }
}
