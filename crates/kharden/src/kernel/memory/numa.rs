//! NUMA and the kernel's page tables: which PGD a CPU loads for an address space (its own
//! node's copy, when a defense gives every node one), and text patching, which must reach
//! every copy of the kernel text some CPU executes.

use crate::arch::x86::{paging, Pfn, VirtAddr};
use crate::error::{Error, Result};
use crate::kernel::hooks::Violation;
use crate::kernel::tlb::ipi::IpiWork;
use crate::kernel::{CpuId, Kernel, MmId};
use crate::sim::CpuSet;
use crate::sim::{Counter, TimeCategory};

/// Bytes of a text line (what one patch rewrites: an alternative, a static key's jump).
const LINE: u64 = 64;

impl Kernel {
    /// The PGD `cpu` loads for `mm`: its node's copy when the mm has one per node.
    pub fn pgd(&self, mm: MmId, cpu: CpuId) -> Pfn {
        let m = &self.mms[mm];
        let node = self.cpus[cpu].mmu.node() as usize;
        m.node_roots.get(node).copied().unwrap_or(m.root)
    }

    /// The PGD user mode runs `mm` on from `cpu` under PTI: its node's user PGD when the
    /// PGDs are per node, else the mm's one; `None` without PTI.
    pub fn user_pgd(&self, mm: MmId, cpu: CpuId) -> Option<Pfn> {
        let m = &self.mms[mm];
        let node = self.cpus[cpu].mmu.node() as usize;
        m.node_user_roots.get(node).copied().or(m.user_root)
    }

    /// init_mm's PGD on `node`: its own copy when the kernel half is replicated.
    pub fn kernel_pgd_of_node(&self, node: u32) -> Pfn {
        self.kernel_node_roots
            .get(node as usize)
            .copied()
            .unwrap_or(self.kernel_root)
    }

    /// The PGD whose kernel half `cpu` executes through: its mm's (per node), or init_mm's
    /// of its node when idle.
    pub fn kernel_half_of(&self, cpu: CpuId) -> Pfn {
        match self.cpus[cpu].current {
            Some(t) => self.pgd(self.tasks[t].mm, cpu),
            None => self.kernel_pgd_of_node(self.cpus[cpu].mmu.node()),
        }
    }

    /// Every PGD of `mm` with a kernel half: `root` and the per-node copies.
    pub fn kernel_pgds(&self, mm: MmId) -> Vec<Pfn> {
        let m = &self.mms[mm];
        let mut all = vec![m.root];
        all.extend(m.node_roots.iter().filter(|&&r| r != m.root));
        all
    }

    /// text_poke() of the kernel text line at `va` from `cpu` (an alternative, a static key,
    /// a kprobe): the new bytes are written through a temporary mapping in poking_mm (two
    /// CR3 writes), into the original image; defenses that keep other copies write theirs
    /// (on_text_poke); then text_poke_sync() interrupts every other CPU to serialise it.
    /// The oracle checks afterwards that every CPU would execute the new bytes.
    pub fn text_poke(&mut self, cpu: CpuId, va: VirtAddr) -> Result<()> {
        let va = VirtAddr(va.0 & !(LINE - 1));
        let leaf = paging::translate(&self.mem, self.kernel_root, va)
            .filter(|l| super::layout::in_kernel_text(va) && !l.flags.no_exec)
            .ok_or_else(|| Error::new(format!("text_poke at {va}: not kernel text")))?;
        self.text_version += 1;
        let version = self.text_version;
        self.write_text_line(cpu, leaf.translate(va).0, version);
        self.with_defenses(|d, k| d.on_text_poke(k, cpu, va, version));
        self.text_patches.insert(va.0, version);
        let mut others = CpuSet::all(self.cpus.len());
        others.remove(cpu);
        if !others.is_empty() {
            self.smp_call_function_many(cpu, &others, IpiWork::SyncCore);
        }
        if self.config.oracle != crate::kernel::hooks::OracleMode::Off {
            if let Some(v) = self.stale_text(va) {
                self.violations.push(v);
            }
        }
        Ok(())
    }

    /// Writes content `version` into the text line at physical `pa` from `cpu`, through the
    /// poking_mm alias: the CR3 switch there and back, and the line's store through the
    /// caches (the line lives on its frame's node).
    pub fn write_text_line(&mut self, cpu: CpuId, pa: u64, version: u64) {
        let (root, pcid, pcide) = {
            let m = &self.cpus[cpu].mmu;
            (m.root(), m.current_pcid(), m.pcide())
        };
        self.write_cr3(cpu, root, pcid, pcide);
        let h = self.load_line(cpu, pa);
        let stall = self.caches.stall_cycles(h);
        self.compute(cpu, stall, TimeCategory::KernelCacheMiss);
        self.write_cr3(cpu, root, pcid, pcide);
        self.text_contents.insert(pa / LINE, version);
        self.cpus[cpu].stats.count(Counter::TextLineWrites);
    }

    /// The first CPU that would execute an old version of patched line `va`: the line its
    /// kernel half maps holds another version than the last patch wrote.
    pub fn stale_text(&self, va: VirtAddr) -> Option<Violation> {
        let want = *self.text_patches.get(&va.0)?;
        (0..self.cpus.len()).find_map(|cpu| {
            let root = self.kernel_half_of(cpu);
            let pa = paging::translate(&self.mem, root, va)?.translate(va).0;
            let have = self.text_contents.get(&(pa / LINE)).copied().unwrap_or(0);
            (have != want).then(|| Violation {
                defense: self.defense_names().join(","),
                cpu,
                what: format!(
                    "kernel text at {va} patched to version {want}; CPU {cpu} (node {}) executes version {have} at physical {pa:#x}",
                    self.cpus[cpu].mmu.node()
                ),
            })
        })
    }
}
