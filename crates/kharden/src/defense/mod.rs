//! Hardening mechanisms as plug-ins. Each implements the hooks it needs of one trait; the
//! kernel calls hooks at named events and never knows which defense is plugged in. A
//! defense acts only through the kernel's mechanism API (write_cr3, invlpg, invpcid, touch,
//! compute, page-table maps) and states its security property as an oracle check.

pub mod boot_options;
pub mod pti;
pub mod xpfo;

use crate::arch::x86::{Pfn, VirtAddr};
use crate::error::{Error, Result};
use crate::kernel::page_alloc::Gfp;
use crate::kernel::TaskId;
use crate::kernel::{BootConfig, CpuId, Kernel, MmId};
use crate::machine::MachineProfile;
use crate::oracle::Violation;

/// The hooks. All default to doing nothing.
pub trait Defense {
    /// Name as given on the command line, e.g. "pti:linux".
    fn name(&self) -> String;

    /// Before boot: adjust boot choices (global kernel mappings, PCID use, ...).
    fn configure(&mut self, _config: &mut BootConfig, _machine: &MachineProfile) {}

    /// After the kernel half is mapped and the CPUs are up.
    fn on_boot(&mut self, _k: &mut Kernel) {}

    /// A new address space exists (its kernel half is shared, its user half empty).
    fn on_mm_created(&mut self, _k: &mut Kernel, _mm: MmId) {}

    /// A user-half PGD slot of `mm` went from empty to populated (a new PUD/P4D).
    fn on_user_pgd_populated(&mut self, _k: &mut Kernel, _mm: MmId, _slot: usize) {}

    /// Just after entering the kernel from user mode (syscall, exception, interrupt).
    fn on_kernel_entry(&mut self, _k: &mut Kernel, _cpu: CpuId) {}

    /// Just before returning to user mode.
    fn on_kernel_exit(&mut self, _k: &mut Kernel, _cpu: CpuId) {}

    /// `cpu` switched to `mm`; `need_flush` when its ASID's TLB contents were stale.
    fn on_switch_mm(&mut self, _k: &mut Kernel, _cpu: CpuId, _mm: MmId, _need_flush: bool) {}

    /// The kernel flushed user addresses [start, start + pages) of `mm` from this CPU's TLB
    /// in the kernel's context (`pages` = kernel::tlbflush::FLUSH_ALL for a full flush).
    fn on_user_tlb_flush(
        &mut self,
        _k: &mut Kernel,
        _cpu: CpuId,
        _mm: MmId,
        _start: VirtAddr,
        _pages: u64,
    ) {
    }

    /// A page was allocated (after the allocator's own work) / is being freed.
    fn on_page_alloc(&mut self, _k: &mut Kernel, _cpu: CpuId, _pfn: Pfn, _gfp: Gfp) {}
    fn on_page_free(&mut self, _k: &mut Kernel, _cpu: CpuId, _pfn: Pfn, _gfp: Gfp) {}

    /// An empty per-CPU free list was refilled with `batch` from the node.
    fn on_pcp_refill(&mut self, _k: &mut Kernel, _cpu: CpuId, _batch: &[Pfn]) {}

    /// Before a measurement: every frame of `frames` was handed to user space and freed
    /// earlier in the workload's life (a long-running build recycles its frames). Set up the
    /// state that history leaves; nothing is charged.
    fn on_frames_recycled(&mut self, _k: &mut Kernel, _frames: &[Pfn]) {}

    /// A kernel path did `n` refcount_t operations (half increments, half decrements).
    fn on_refcount_ops(&mut self, _k: &mut Kernel, _cpu: CpuId, _n: u32) {}

    /// The kernel maps a page for a copy (kmap/kmap_atomic) and unmaps it afterwards.
    fn on_kmap(&mut self, _k: &mut Kernel, _cpu: CpuId, _pfn: Pfn) {}
    fn on_kunmap(&mut self, _k: &mut Kernel, _cpu: CpuId, _pfn: Pfn) {}

    /// fork() created `child` from `parent` (dup_task_struct copies the parent's task_struct,
    /// so per-task state is inherited).
    fn on_task_forked(&mut self, _k: &mut Kernel, _cpu: CpuId, _parent: TaskId, _child: TaskId) {}

    /// `task` was just switched in on `cpu` (after switch_mm; Linux's switch_mm_irqs_off
    /// runs with the incoming task known).
    fn on_task_switched_in(&mut self, _k: &mut Kernel, _cpu: CpuId, _task: TaskId) {}

    /// The kernel flushed kernel addresses [start, start + pages) from this CPU's TLB page by
    /// page (Linux __flush_tlb_one_kernel, which also calls flush_tlb_one_user for them).
    fn on_kernel_page_flush(
        &mut self,
        _k: &mut Kernel,
        _cpu: CpuId,
        _start: VirtAddr,
        _pages: u64,
    ) {
    }

    /// The security property, checked in user mode right after a return from the kernel.
    fn check_user_mode(&self, _k: &Kernel, _cpu: CpuId) -> Option<Violation> {
        None
    }
}

/// Stands in for a defense while its own hook runs (see Kernel::with_defenses).
pub struct Running;

impl Defense for Running {
    fn name(&self) -> String {
        "(running)".into()
    }
}

/// One line per defense name: (name, what it is, whether it is a deliberately broken variant).
pub const CATALOGUE: &[(&str, &str, bool)] = &[
    ("none", "no hardening", false),
    ("nopcid", "boot option: do not use PCIDs even where the CPU has them", false),
    ("pti:freebsd", "PTI as FreeBSD does it: no global kernel mappings, user PCID = kernel PCID | bit 11, no-flush CR3 switches with PCID", false),
    ("pti:linux", "PTI as Linux does it: global kernel text only without PCID, deferred user-PCID flushes or INVPCID", false),
    ("pti:broken-global-text", "BROKEN: PTI with PCID that leaves kernel text global (its TLB entries survive into user mode)", true),
    ("pti:broken-user-maps-kernel", "BROKEN: user page tables that still map the whole kernel half", true),
    ("xpfo:immediate", "XPFO (v7 + xpfotlbflush): user pages leave the direct map; every flush IPIs every CPU", false),
    ("xpfo:deferred", "XPFO with deferred flushes (v7 16/16): local flush, per-task pending full flush on other CPUs", false),
    ("xpfo:deferred-global", "XPFO with a global pending mask (v8/v9): local flush, every other CPU flushes at its next switch to a user task", false),
    ("xpfo:batched", "XPFO batched (v9 13/13): pages unmapped at per-CPU-list refill with one flush per batch, freed pages stay unmapped; global pending mask", false),
    ("xpfo:batched-v8", "XPFO batched (v8 13/14): refilled movable pages marked user and unmapped with one flush per batch (still mapped until their first kunmap), freed pages mapped back; global pending mask", false),
    ("xpfo:noflush", "XPFO without TLB flushes (v7 default): cheap, and stale aliases stay usable", false),
    ("xpfo:broken-deferred-no-switch-flush", "BROKEN: deferred XPFO that never runs the pending flush at context switch", true),
    ("xpfo:broken-pending-cleared-early", "BROKEN: deferred XPFO whose pending mask is cleared as soon as it is posted", true),
    ("pti:broken-no-user-flush", "BROKEN: PTI with PCID that never flushes user-PCID entries after a user-address invalidation", true),
];

const BOOT_OPTIONS: &[&str] = &["nopcid"];

/// Defenses that live in other crates (they may need the machine to set themselves up),
/// so a new mechanism plugs in without touching this file.
pub struct Extension {
    /// Names it answers to, with one line each for `kharden defenses`.
    pub catalogue: &'static [(&'static str, &'static str, bool)],
    pub make: MakeDefense,
}

/// Builds the named defense for a machine; `None` when the name is not this extension's.
pub type MakeDefense = fn(name: &str, machine: &MachineProfile) -> Option<Result<Box<dyn Defense>>>;

/// Parses a comma-separated defense list, e.g. "pti:linux,nopcid" or "none".
pub fn parse_list(spec: &str) -> Result<Vec<Box<dyn Defense>>> {
    parse_list_with(spec, None, &[])
}

/// parse_list() that also knows the defenses of `extensions`, built for `machine`.
pub fn parse_list_with(
    spec: &str,
    machine: Option<&MachineProfile>,
    extensions: &[Extension],
) -> Result<Vec<Box<dyn Defense>>> {
    let mut out: Vec<Box<dyn Defense>> = vec![];
    for item in spec.split(',').map(str::trim) {
        let extended = machine.and_then(|m| extensions.iter().find_map(|e| (e.make)(item, m)));
        if let Some(d) = extended {
            out.push(d?);
            continue;
        }
        let d: Box<dyn Defense> = match item {
            "none" | "" => continue,
            "nopcid" => Box::new(boot_options::NoPcid),
            "pti:freebsd" => Box::new(pti::Pti::new(pti::Variant::FreeBsd)),
            "pti:linux" | "pti" | "pti=on" => Box::new(pti::Pti::new(pti::Variant::Linux)),
            "pti:broken-global-text" => Box::new(pti::Pti::new(pti::Variant::BrokenGlobalText)),
            "pti:broken-user-maps-kernel" => {
                Box::new(pti::Pti::new(pti::Variant::BrokenUserMapsKernel))
            }
            "pti:broken-no-user-flush" => Box::new(pti::Pti::new(pti::Variant::BrokenNoUserFlush)),
            "xpfo:immediate" | "xpfo" => Box::new(xpfo::Xpfo::new(xpfo::Policy::Immediate)),
            "xpfo:deferred" => Box::new(xpfo::Xpfo::new(xpfo::Policy::Deferred)),
            "xpfo:noflush" => Box::new(xpfo::Xpfo::new(xpfo::Policy::NoFlush)),
            "xpfo:deferred-global" => Box::new(xpfo::Xpfo::new(xpfo::Policy::DeferredGlobal)),
            "xpfo:batched" => Box::new(xpfo::Xpfo::new(xpfo::Policy::Batched)),
            "xpfo:batched-v8" => Box::new(xpfo::Xpfo::new(xpfo::Policy::BatchedV8)),
            "xpfo:broken-deferred-no-switch-flush" => {
                Box::new(xpfo::Xpfo::new(xpfo::Policy::BrokenDeferredNoSwitchFlush))
            }
            "xpfo:broken-pending-cleared-early" => {
                Box::new(xpfo::Xpfo::new(xpfo::Policy::BrokenPendingClearedEarly))
            }
            other => {
                let extra = extensions.iter().flat_map(|e| e.catalogue.iter());
                let known: Vec<&str> = CATALOGUE.iter().chain(extra).map(|(n, _, _)| *n).collect();
                return Err(Error::new(format!(
                    "--defense: unknown defense '{other}': expected a comma-separated list of {}",
                    known.join(", ")
                )));
            }
        };
        if out.iter().any(|o| o.name() == d.name()) {
            return Err(Error::new(format!("--defense: '{item}' given twice")));
        }
        out.push(d);
    }
    // Boot options first, so defenses configure against the final boot choices.
    out.sort_by_key(|d| !BOOT_OPTIONS.contains(&d.name().as_str()));
    for family in ["pti", "xpfo"] {
        if out.iter().filter(|d| d.name().starts_with(family)).count() > 1 {
            return Err(Error::new(format!(
                "--defense: at most one {family} variant"
            )));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn parses_lists_and_rejects_unknown_names() {
        assert_eq!(parse_list("none").unwrap().len(), 0);
        let v = parse_list("pti:linux, nopcid").unwrap();
        assert_eq!(
            v.iter().map(|d| d.name()).collect::<Vec<_>>(),
            vec!["nopcid", "pti:linux"]
        );
        let e = parse_list("pti:bogus").err().unwrap().to_string();
        assert!(
            e.contains("unknown defense 'pti:bogus'") && e.contains("pti:freebsd"),
            "{e}"
        );
        assert!(parse_list("pti:linux,pti:freebsd").is_err());
        assert!(parse_list("nopcid,nopcid").is_err());
    }
}
