//! Per-node replication of kernel text and rodata (seed 002: Artem Kuzin's RFC series for
//! Linux 6.5.5, "x86: enable per-NUMA node kernel text and rodata replication", Dec 2023).
//!
//! At boot every node other than the image's gets a 2 MiB aligned copy of text and rodata
//! in its own memory, read-only through every mapping, and its own copy of the kernel page
//! tables that map them: a PGD, the PUD of the image's PGD slot and the PMD of the image's
//! gigabyte. Every other entry points at the shared tables, so the direct map, vmalloc and
//! kernel data stay one (mutable kernel data needs no synchronisation, as the cover letter
//! says). Every address space then gets one PGD per node (pgd_alloc on every node, each
//! with its node's kernel half), switch_mm loads the PGD of the CPU's node, a new
//! top-level user entry is written into every node's PGD (the only user-space
//! synchronisation: below the PGD the user tables are shared), and text_poke writes every
//! copy. What it costs is modelled beside what it saves: a PGD page cleared and its kernel
//! half copied per extra node at every fork, freed at exit, and the memory of the copies.

use super::{CounterSlots, Defense, Family, Variant as Named};
use crate::arch::x86::{paging, PageSize, Pfn, PhysAddr, Pte, VirtAddr};
use crate::kernel::hooks::Violation;
use crate::kernel::memory::layout::{KERNEL_RODATA_BYTES, KERNEL_TEXT, KERNEL_TEXT_BYTES};
use crate::kernel::{CpuId, Kernel, MmId};
use crate::sim::{OwnedCounter, TimeCategory};

pub const FAMILY: Family = Family {
    name: "text-repl",
    boot_option: false,
    variants: &[
        Named::new(
            "text-repl",
            &["text-repl:on"],
            "kernel text and rodata replicated per NUMA node, with per-node kernel page tables and a PGD per node for every mm (Kuzin's RFC, Linux 6.5.5)",
            false,
            |s| Box::new(TextReplication::new(Variant::Correct, s)),
        ),
        Named::new(
            "text-repl:broken-one-replica",
            &[],
            "BROKEN: text_poke writes only the original image, so other nodes run stale text",
            true,
            |s| Box::new(TextReplication::new(Variant::PatchOneReplica, s)),
        ),
        Named::new(
            "text-repl:broken-writable",
            &[],
            "BROKEN: the copies are mapped writable in their node's page tables",
            true,
            |s| Box::new(TextReplication::new(Variant::WritableReplica, s)),
        ),
    ],
    params: &[],
    excludes: &[],
    counters: &[
        (PGD_COPIES, "PGDs allocated on other nodes for an mm (fork, exec's new mm)"),
        ("text_repl.pgd_entry_syncs", "top-level user entries written into the other nodes' PGDs"),
    ],
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Correct,
    PatchOneReplica,
    WritableReplica,
}

/// The counter of PGDs allocated on other nodes (the reproduction's breakdowns read it).
pub const PGD_COPIES: &str = "text_repl.pgd_copies";

/// Bytes replicated: text and rodata, 2 MiB aligned (the series aligns both to huge pages).
pub const REPLICATED_BYTES: u64 = KERNEL_TEXT_BYTES + KERNEL_RODATA_BYTES;
const M2: u64 = 2 << 20;

pub struct TextReplication {
    variant: Variant,
    /// Physical base of each node's copy of text and rodata (node 0: the original image).
    copies: Vec<PhysAddr>,
    pgd_copies: OwnedCounter,
    entry_syncs: OwnedCounter,
}

impl TextReplication {
    fn new(variant: Variant, slots: &CounterSlots) -> TextReplication {
        TextReplication {
            variant,
            copies: vec![],
            pgd_copies: slots.get(PGD_COPIES),
            entry_syncs: slots.get("text_repl.pgd_entry_syncs"),
        }
    }

    /// A PGD page written on `cpu` for another node: cleared and copied (a page's worth of
    /// stores, kernel.copy_page_cycles), its lines left in this CPU's caches.
    fn pgd_written(&self, k: &mut Kernel, cpu: CpuId, pgd: Pfn) {
        k.store_lines(cpu, pgd.addr().0, 64);
        k.compute(cpu, k.params.copy_page_cycles, TimeCategory::Kernel);
        k.cpus[cpu].stats.count_owned(self.pgd_copies);
    }

    /// `node`'s copy of PTI's user PGD `user_root`: the same entries (user half,
    /// cpu_entry_area), except that the kernel text PTI clones into it (the entry text, or
    /// all of it where Linux keeps it global) maps `node`'s replica.
    fn node_user_pgd(k: &mut Kernel, user_root: Pfn, node: u32) -> Pfn {
        let pgd = k.mem.alloc_table(node);
        let text_slot = VirtAddr(KERNEL_TEXT).index(4);
        for i in (0..512).filter(|&i| i != text_slot) {
            paging::share_pml4_entry(&mut k.mem, pgd, user_root, i);
        }
        let replica = k.kernel_pgd_of_node(node);
        for off in (0..KERNEL_TEXT_BYTES).step_by(M2 as usize) {
            let va = VirtAddr(KERNEL_TEXT + off);
            if let Some(cloned) = paging::translate(&k.mem, user_root, va) {
                let own =
                    paging::translate(&k.mem, replica, va).expect("the replica maps all text");
                paging::map(
                    &mut k.mem,
                    pgd,
                    va,
                    own.page,
                    PageSize::Size2M,
                    cloned.flags,
                    node,
                );
            }
        }
        pgd
    }

    /// init_mm's kernel half for `node`: a copy of the PGD, of the image's PUD and PMD,
    /// with the text and rodata leaves pointing at `copy`.
    fn node_kernel_root(&self, k: &mut Kernel, node: u32, copy: PhysAddr) -> Pfn {
        let image = VirtAddr(KERNEL_TEXT);
        let mut table = k.kernel_root;
        let pgd = k.mem.alloc_table(node);
        let mut own = pgd;
        // Copy the PGD, then the tables on the image's path down to its PMD.
        for level in (2..=4u8).rev() {
            let entries = *k.mem.table(table);
            *k.mem.table_mut(own) = entries;
            if level == 2 {
                break;
            }
            let idx = image.index(level);
            table = k.mem.read(table, idx).addr().pfn();
            let below = k.mem.alloc_table(node);
            k.mem.write(own, idx, Pte::table(below, false));
            own = below;
        }
        for off in (0..REPLICATED_BYTES).step_by(M2 as usize) {
            let va = VirtAddr(KERNEL_TEXT + off);
            let mut flags = k.mem.read(own, va.index(2)).flags();
            flags.writable = self.variant == Variant::WritableReplica;
            let leaf = Pte::leaf(PhysAddr(copy.0 + off), PageSize::Size2M, flags);
            k.mem.write(own, va.index(2), leaf);
        }
        pgd
    }
}

impl Defense for TextReplication {
    fn canon(&self, c: &mut crate::sim::Canon) {
        let TextReplication {
            variant: _,
            copies,
            pgd_copies: _,
            entry_syncs: _,
        } = self;
        c.debug(copies);
    }

    fn name(&self) -> String {
        match self.variant {
            Variant::Correct => "text-repl",
            Variant::PatchOneReplica => "text-repl:broken-one-replica",
            Variant::WritableReplica => "text-repl:broken-writable",
        }
        .into()
    }

    fn on_boot(&mut self, k: &mut Kernel) {
        let original = paging::translate(&k.mem, k.kernel_root, VirtAddr(KERNEL_TEXT))
            .expect("the kernel image is mapped")
            .page;
        self.copies = vec![original];
        k.kernel_node_roots = vec![k.kernel_root];
        for node in 1..k.mem.nodes() {
            let copy = k
                .mem
                .alloc_data_contiguous(node, REPLICATED_BYTES >> 12, M2 >> 12)
                .addr();
            k.cover_direct_map(node);
            for off in (0..REPLICATED_BYTES).step_by(M2 as usize) {
                k.protect_direct_map_2m(PhysAddr(copy.0 + off));
            }
            let root = self.node_kernel_root(k, node, copy);
            self.copies.push(copy);
            k.kernel_node_roots.push(root);
        }
        // CPUs came up on init_mm's original PGD: each loads its node's.
        for cpu in 0..k.cpus.len() {
            let root = k.kernel_pgd_of_node(k.cpus[cpu].mmu.node());
            let pcid = k.cpus[cpu].mmu.current_pcid();
            k.cpus[cpu].mmu.write_cr3(root, pcid, false);
        }
    }

    fn on_mm_created(&mut self, k: &mut Kernel, cpu: CpuId, mm: MmId) {
        let nodes = k.mem.nodes();
        if nodes < 2 {
            return;
        }
        let (root, home) = (k.mms[mm].root, k.mms[mm].node);
        let user_root = k.mms[mm].user_root;
        let mut roots = Vec::with_capacity(nodes as usize);
        let mut user_roots = Vec::new();
        for node in 0..nodes {
            if node == home {
                roots.push(root);
                user_roots.extend(user_root);
                continue;
            }
            // pgd_alloc() on `node`: a zeroed page there, its node's kernel half copied in
            // (pgd_ctor), the user half copied from the mm's PGD. The clear and copy are
            // a page's worth of stores (kernel.copy_page_cycles); the lines end up in this
            // CPU's caches.
            let pgd = k.mem.alloc_table(node);
            let kernel_half = k.kernel_pgd_of_node(node);
            for i in 0..512 {
                let from = if i < 256 { root } else { kernel_half };
                paging::share_pml4_entry(&mut k.mem, pgd, from, i);
            }
            self.pgd_written(k, cpu, pgd);
            roots.push(pgd);
            // Under PTI the PGD is two pages (PGD_ALLOCATION_ORDER 1): the node's user PGD
            // comes with it, its entry text mapped from the node's own copy.
            if let Some(user_root) = user_root {
                let user_pgd = Self::node_user_pgd(k, user_root, node);
                self.pgd_written(k, cpu, user_pgd);
                user_roots.push(user_pgd);
            }
        }
        k.mms[mm].node_roots = roots;
        k.mms[mm].node_user_roots = user_roots;
    }

    fn on_user_pgd_populated(&mut self, k: &mut Kernel, mm: MmId, slot: usize) {
        let (root, user_root) = (k.mms[mm].root, k.mms[mm].user_root);
        let m = &k.mms[mm];
        let copies: Vec<Pfn> = m
            .node_roots
            .iter()
            .chain(&m.node_user_roots)
            .copied()
            .collect();
        for pgd in copies {
            if pgd != root && Some(pgd) != user_root {
                paging::share_pml4_entry(&mut k.mem, pgd, root, slot);
                k.cpus[0].stats.count_owned(self.entry_syncs);
            }
        }
    }

    fn on_text_poke(&mut self, k: &mut Kernel, cpu: CpuId, va: VirtAddr, version: u64) {
        if self.variant == Variant::PatchOneReplica {
            return;
        }
        let off = va.0 - KERNEL_TEXT;
        for copy in self.copies.clone().into_iter().skip(1) {
            k.write_text_line(cpu, copy.0 + off, version);
        }
    }

    fn check_user_mode(&self, k: &Kernel, cpu: CpuId) -> Option<Violation> {
        writable_copy(k, &self.copies).map(|what| Violation {
            defense: self.name(),
            cpu,
            what,
        })
    }
}

/// The first mapping that lets a write reach a copy of text or rodata: in any node's kernel
/// page tables, or through the direct map.
fn writable_copy(k: &Kernel, copies: &[PhysAddr]) -> Option<String> {
    for (node, &root) in k.kernel_node_roots.iter().enumerate() {
        for off in (0..REPLICATED_BYTES).step_by(M2 as usize) {
            let va = VirtAddr(KERNEL_TEXT + off);
            if paging::translate(&k.mem, root, va).is_some_and(|l| l.flags.writable) {
                return Some(format!(
                    "node {node}'s kernel page tables map kernel text/rodata at {va} writable"
                ));
            }
        }
    }
    for (node, copy) in copies.iter().enumerate() {
        for off in (0..REPLICATED_BYTES).step_by(M2 as usize) {
            let alias = k.direct_map_addr(PhysAddr(copy.0 + off).pfn());
            if paging::translate(&k.mem, k.kernel_root, alias).is_some_and(|l| l.flags.writable) {
                return Some(format!("node {node}'s copy of kernel text/rodata is writable through its direct-map alias {alias}"));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use crate::arch::x86::{paging, PhysAddr, VirtAddr};
    use crate::kernel::memory::layout::{KERNEL_TEXT, USER_MMAP};
    use crate::kernel::Kernel;
    use crate::sim::Counter;
    use crate::workload::kernel_ops::{self, Caches, Op};
    use crate::{defense, machine};

    fn boot(m: &str, d: &str) -> Kernel {
        Kernel::boot(machine::load(m).unwrap(), defense::parse_list(d).unwrap())
    }

    fn first_cpu_of(k: &Kernel, node: u32) -> usize {
        (0..k.cpus.len())
            .find(|&c| k.cpus[c].mmu.node() == node)
            .unwrap()
    }

    /// The first CPU of each of the two nodes, and an address space created on node 1.
    fn mm_made_on_node_1(k: &mut Kernel) -> (usize, usize, super::MmId) {
        let (c0, c1) = (first_cpu_of(k, 0), first_cpu_of(k, 1));
        let t = k.spawn_on(c1, "t", None);
        (c0, c1, k.tasks[t].mm)
    }

    /// Maps a user page after `mm` was created: a new top-level user entry.
    fn map_user_page_later(k: &mut Kernel, mm: super::MmId) {
        let flags = crate::arch::x86::PteFlags::USER_DATA;
        k.map_user(mm, VirtAddr(USER_MMAP), PhysAddr(0x1000), flags);
    }

    #[test]
    fn each_node_executes_its_own_copy_and_every_mm_has_a_pgd_per_node() {
        let mut k = boot("xeon-e5-2690v3-2s", "text-repl");
        let (c0, c1, mm) = mm_made_on_node_1(&mut k);
        assert_eq!(k.mms[mm].node_roots.len(), 2);
        let text = |k: &Kernel, cpu| {
            let root = k.pgd(mm, cpu);
            paging::translate(&k.mem, root, VirtAddr(KERNEL_TEXT))
                .unwrap()
                .page
        };
        let (p0, p1) = (text(&k, c0), text(&k, c1));
        assert_eq!(k.mem.node_of(p0.pfn()), 0);
        assert_eq!(k.mem.node_of(p1.pfn()), 1);
        // A user page mapped after the mm was created is seen through both PGDs.
        map_user_page_later(&mut k, mm);
        for cpu in [c0, c1] {
            assert!(paging::translate(&k.mem, k.pgd(mm, cpu), VirtAddr(USER_MMAP)).is_some());
        }
    }

    #[test]
    fn under_pti_every_node_has_a_user_pgd_whose_entry_text_is_its_own_copy() {
        let mut k = boot("xeon-e5-2690v3-2s", "pti:linux,text-repl");
        let (c0, c1, mm) = mm_made_on_node_1(&mut k);
        assert_eq!(k.mms[mm].node_user_roots.len(), 2);
        let entry = k.paths.entry_text_page();
        for (cpu, node) in [(c0, 0), (c1, 1)] {
            let user = k.user_pgd(mm, cpu).unwrap();
            assert_eq!(k.mem.node_of(user), node, "the user PGD is node-local");
            let text = paging::translate(&k.mem, user, entry).unwrap().page;
            assert_eq!(
                k.mem.node_of(text.pfn()),
                node,
                "entry text from the node's copy"
            );
        }
        // The mm's home is node 1 (created there): its user PGD is PTI's own.
        assert_eq!(k.user_pgd(mm, c1), k.mms[mm].user_root);
        // A new top-level user entry reaches every user PGD.
        map_user_page_later(&mut k, mm);
        for cpu in [c0, c1] {
            let user = k.user_pgd(mm, cpu).unwrap();
            assert!(paging::translate(&k.mem, user, VirtAddr(USER_MMAP)).is_some());
        }
    }

    #[test]
    fn a_cold_fork_on_the_far_node_fetches_text_remotely_only_without_replication() {
        let m = machine::load("xeon-e5-2690v3-2s").unwrap();
        let remote = |d: &str| {
            let mut k = Kernel::boot(m.clone(), defense::parse_list(d).unwrap());
            let r = kernel_ops::run(&mut k, Op::Fork1, Caches::Cold, 1, false).unwrap();
            (
                r.stats.counter(Counter::KernelTextFromRemoteMemory),
                r.stats.counter(Counter::KernelTextFromMemory),
                r.elapsed,
            )
        };
        let (base_remote, base_dram, base_t) = remote("pti:linux");
        let (repl_remote, repl_dram, repl_t) = remote("pti:linux,text-repl");
        assert!(
            base_remote > 1000 && base_remote == base_dram,
            "{base_remote} {base_dram}"
        );
        assert_eq!(repl_remote, 0);
        assert_eq!(repl_dram, base_dram);
        assert!(repl_t < base_t);
    }

    /// The image's rodata lines a path reads (measured under qemu, kernel/footprints/image_data.rs)
    /// come from the node's replica; its data and bss lines stay on node 0 either way.
    #[test]
    fn a_cold_mount_on_the_far_node_reads_rodata_from_its_replica_and_data_from_node_0() {
        let m = machine::load("xeon-e5-2690v3-2s").unwrap();
        let remote_data = |d: &str| {
            let mut k = Kernel::boot(m.clone(), defense::parse_list(d).unwrap());
            let r = kernel_ops::run(&mut k, Op::Mount, Caches::Cold, 1, false).unwrap();
            r.stats.counter(Counter::KernelLinesFromRemoteMemory)
                - r.stats.counter(Counter::KernelTextFromRemoteMemory)
        };
        let measured = crate::kernel::footprints::image_data::ImageData::builtin()
            .path("mount-proc")
            .unwrap();
        let rodata = measured.rodata_lines.len() as u64;
        let data_bss = (measured.data_lines.len() + measured.bss_lines.len()) as u64;
        let (base, repl) = (remote_data("pti:linux"), remote_data("pti:linux,text-repl"));
        assert!(rodata > 0 && repl >= data_bss, "{repl} {data_bss}");
        assert_eq!(base - repl, rodata);
    }

    #[test]
    fn one_node_has_nothing_to_replicate() {
        let mut k = boot("haswell-i7-4770", "text-repl");
        let t = k.spawn("t", None);
        assert!(k.mms[k.tasks[t].mm].node_roots.is_empty());
        assert_eq!(k.kernel_node_roots, vec![k.kernel_root]);
    }

    #[test]
    fn the_oracle_catches_both_broken_variants() {
        let m = machine::load("xeon-e5-2690v3-2s").unwrap();
        let params = crate::params::Params::linux();
        let run = |d: &str| {
            crate::oracle::scenario::text_poke(&m, defense::parse_list(d).unwrap(), &params)
                .unwrap()
        };
        assert!(run("text-repl").is_empty());
        assert!(run("none").is_empty());
        let stale = run("text-repl:broken-one-replica");
        assert!(
            stale.iter().any(|v| v.what.contains("executes version 0")),
            "{stale:?}"
        );
        let writable = run("text-repl:broken-writable");
        assert!(
            writable.iter().any(|v| v.what.contains("writable")),
            "{writable:?}"
        );
    }
}
