//! PaX/grsecurity KERNEXEC's CR0.WP toggles: kernel data that must change at run time but is
//! read-only to everything else (the GDT, `__read_only` variables) is written between
//! pax_open_kernel() (CR0.WP cleared) and pax_close_kernel() (set again). The plug-in makes
//! the toggles of every context switch, around the switch's writes to the CPU's read-only
//! GDT (load_TLS in __switch_to); what they cost is the MOV to CR0 (free on bare metal beyond
//! the path's measured work, an exit under KVM unless the guest owns CR0.WP: virt/).

use super::{Defense, Family, Variant as Named};
use crate::arch::x86::{paging, Access, VirtAddr};
use crate::kernel::memory::layout::KERNEL_RODATA;
use crate::kernel::{BootConfig, CpuId, Kernel, TaskId, Violation};
use crate::machine::MachineProfile;
use crate::params::Params;

pub const FAMILY: Family = Family {
    name: "kernexec",
    boot_option: false,
    variants: &[
        Named::new(
            "kernexec",
            &[],
            "KERNEXEC's CR0.WP toggles around the read-only GDT writes of every context switch (guest.wp_pairs_per_context_switch pairs)",
            false,
            |_| Box::new(Kernexec { close: true, pairs: 0 }),
        ),
        Named::new(
            "kernexec:broken-open",
            &[],
            "BROKEN: the last pax_close_kernel() of a switch is missing, so user mode runs with CR0.WP clear",
            true,
            |_| Box::new(Kernexec { close: false, pairs: 0 }),
        ),
    ],
    params: &[],
    excludes: &[],
    counters: &[],
};

pub struct Kernexec {
    /// Whether the last pair closes (the broken variant leaves CR0.WP clear).
    close: bool,
    /// Open/close pairs per context switch.
    pairs: u32,
}

/// The read-only GDT of `cpu` (PaX's cpu_gdt_table is __read_only): a page of rodata each.
pub fn read_only_gdt(cpu: CpuId) -> VirtAddr {
    VirtAddr(KERNEL_RODATA + cpu as u64 * 4096)
}

impl Defense for Kernexec {
    fn name(&self) -> String {
        if self.close {
            "kernexec".into()
        } else {
            "kernexec:broken-open".into()
        }
    }

    fn configure(&mut self, _config: &mut BootConfig, _machine: &MachineProfile, params: &Params) {
        self.pairs = params.num("guest.wp_pairs_per_context_switch").round() as u32;
    }

    fn on_task_switched_in(&mut self, k: &mut Kernel, cpu: CpuId, _task: TaskId) {
        for pair in 0..self.pairs {
            k.write_cr0_wp(cpu, false);
            // load_TLS: the TLS descriptors of the next task into the read-only GDT.
            if let Err(f) = k.touch(cpu, read_only_gdt(cpu), Access::Write) {
                panic!("KERNEXEC write to the GDT faulted with CR0.WP clear: {f:?}");
            }
            if self.close || pair + 1 < self.pairs {
                k.write_cr0_wp(cpu, true);
            }
        }
    }

    /// In user mode CR0.WP is set and the GDT is read-only, so no kernel bug reached from
    /// user mode can write it.
    fn check_user_mode(&self, k: &Kernel, cpu: CpuId) -> Option<Violation> {
        let gdt = read_only_gdt(cpu);
        let root = k.cpus[cpu].mmu.root();
        let writable = paging::translate(&k.mem, root, gdt).is_some_and(|l| l.flags.writable);
        let what = if !k.cpus[cpu].mmu.wp() {
            "user mode runs with CR0.WP clear: supervisor writes ignore read-only pages"
        } else if writable {
            "the GDT is mapped writable"
        } else {
            return None;
        };
        Some(Violation {
            defense: self.name(),
            cpu,
            what: what.into(),
        })
    }

    fn canon(&self, _c: &mut crate::sim::Canon) {} // no state beyond its configuration
}
