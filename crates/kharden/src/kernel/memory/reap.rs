//! Freeing what dead tasks leave behind, for long runs (trace replay) whose memory must be
//! bounded by the live tasks: a dead task's kernel stack and task_struct (release_task), an
//! address space nobody uses any more (mmdrop: its user page tables, image frames, PGD and
//! the second PGD a defense made), and their slots in `tasks` and `mms`, which the next
//! fork takes again (a reaped task's id is reused like a pid; a reused mm gets a new
//! ctx_id, so no TLB tag outlives it).
//!
//! Opt-in: trace replay, and seed 002's fork loops (workload/kernel_ops.rs), whose children
//! die on the partner core and whose next fork gets their memory back hot, as the slab and
//! per-CPU page lists hand it back in Linux. The kbuild windows do not reap.

use super::layout::USER_TEXT;
use super::layout::{DIRECT_MAP, KERNEL_STACK_BYTES, USER_DATA, USER_LIBC, USER_STACK_TOP};
use crate::arch::x86::{paging, Pfn, VirtAddr};
use crate::kernel::sched::scheduler::TaskState;
use crate::kernel::{CpuId, Kernel, MmId, TaskId};

/// The address ranges spawn() maps with frames of their own (text, data, libc, stack).
const IMAGE: [(u64, u64); 4] = [
    (USER_TEXT, 4),
    (USER_DATA, 2),
    (USER_LIBC, 8),
    (USER_STACK_TOP - 4 * 4096, 4),
];

/// Which slots of `tasks` or `mms` are free to take again (reaped), most recent first.
#[derive(Debug, Default)]
pub struct Slots {
    free: Vec<usize>,
    is_free: Vec<bool>,
    /// Slots ever filled (tasks created; for address spaces, the last ctx_id given).
    pub created: u64,
}

impl Slots {
    /// The slot the next allocation takes, in a table of `len` slots.
    pub fn next(&self, len: usize) -> usize {
        self.free.last().copied().unwrap_or(len)
    }

    /// Puts `item` in the next slot of `items`; returns the slot.
    pub fn fill<T>(&mut self, items: &mut Vec<T>, item: T) -> usize {
        self.created += 1;
        match self.free.pop() {
            Some(slot) => {
                self.is_free[slot] = false;
                items[slot] = item;
                slot
            }
            None => {
                items.push(item);
                items.len() - 1
            }
        }
    }

    fn release(&mut self, slot: usize) {
        if self.is_free.len() <= slot {
            self.is_free.resize(slot + 1, false);
        }
        self.is_free[slot] = true;
        self.free.push(slot);
    }

    pub fn is_free(&self, slot: usize) -> bool {
        self.is_free.get(slot).copied().unwrap_or(false)
    }

    /// Slots in use in a table of `len` slots.
    pub fn in_use(&self, len: usize) -> usize {
        len - self.free.len()
    }
}

impl Kernel {
    /// Frees every dead task no CPU still runs, then every address space left without
    /// users; their slots are taken again by the next fork. Takes no simulated time (the
    /// model's exit path already charged exit). Returns the tasks freed.
    pub fn reap(&mut self) -> usize {
        let was = std::mem::replace(&mut self.fast_forward, true);
        let mut freed = 0;
        for t in 0..self.tasks.len() {
            if !self.task_slots.is_free(t) && self.reap_task(t) {
                self.task_slots.release(t);
                freed += 1;
            }
        }
        if freed > 0 {
            // Orphans of a freed parent are nobody's children (reparented to init, which
            // reaps them): the parent's slot may go to a new task.
            for t in 0..self.tasks.len() {
                if let Some(p) = self.tasks[t].parent {
                    if self.task_slots.is_free(p) {
                        self.tasks[t].parent = None;
                    }
                }
            }
        }
        for mm in 0..self.mms.len() {
            if !self.mm_slots.is_free(mm) && self.reap_mm(mm) {
                self.mm_slots.release(mm);
            }
        }
        self.fast_forward = was;
        freed
    }

    /// Tasks alive or dead but not yet freed.
    pub fn tasks_in_use(&self) -> usize {
        self.task_slots.in_use(self.tasks.len())
    }

    /// Frees dead `task`'s kernel stack and task_struct (into the page allocator of the CPU
    /// it last ran on); false (nothing done) while it is not dead or a CPU still has it as
    /// current.
    fn reap_task(&mut self, task: TaskId) -> bool {
        if self.tasks[task].state != TaskState::Dead
            || self.cpus.iter().any(|c| c.current == Some(task))
        {
            return false;
        }
        let cpu: CpuId = self.tasks[task].last_cpu.unwrap_or(0);
        let stack = self.tasks[task].stack;
        for p in 0..KERNEL_STACK_BYTES / 4096 {
            let va = stack.offset(p * 4096);
            if let Some(leaf) = paging::unmap(&mut self.mem, self.kernel_root, va) {
                self.free_page(cpu, leaf.page.pfn());
            }
            // The slot's next task maps its stack at the same address (vfree's lazy purge
            // flushes before a vmalloc range is reused).
            self.invalidate_page_everywhere(va);
        }
        let ts = self.tasks[task].task_struct;
        self.free_page(cpu, Pfn((ts.0 - DIRECT_MAP) >> 12));
        self.tasks[task].name = String::new();
        true
    }

    /// Frees address space `mm`'s user page tables, image frames and PGDs once no task uses
    /// it and no CPU has it loaded (a lazy-TLB CPU keeps it until it switches away); false
    /// (nothing done) until then.
    fn reap_mm(&mut self, mm: MmId) -> bool {
        let root = self.mms[mm].root;
        let user_root = self.mms[mm].user_root;
        let pgds = self.kernel_pgds(mm);
        let node_user_roots = self.mms[mm].node_user_roots.clone();
        let loaded = |c: &crate::kernel::Cpu| {
            c.asid.loaded_mm == Some(mm)
                || pgds.contains(&c.mmu.root())
                || Some(c.mmu.root()) == user_root
                || node_user_roots.contains(&c.mmu.root())
        };
        if self.mms[mm].users > 0 || self.cpus.iter().any(loaded) {
            return false;
        }
        for (base, pages) in IMAGE {
            for p in 0..pages {
                if let Some(leaf) = paging::unmap(&mut self.mem, root, VirtAddr(base + p * 4096)) {
                    self.mem.free_data(leaf.page.pfn());
                }
            }
        }
        for i in 0..256 {
            let e = self.mem.read(root, i);
            if e.present() {
                self.free_tables_below(e.addr().pfn(), 3);
            }
        }
        if let Some(user_root) = user_root {
            self.free_own_kernel_half(user_root, root);
        }
        for &pgd in node_user_roots.iter().filter(|&&p| Some(p) != user_root) {
            self.free_own_kernel_half(pgd, root);
        }
        // The other nodes' PGDs: their user halves mirror `root`'s, their kernel halves are
        // their node's init_mm entries.
        for &pgd in pgds.iter().filter(|&&p| p != root) {
            self.mem.free_table(pgd);
        }
        self.mem.free_table(root);
        // The slab pages of its objects go back through the page allocator they came from
        // (CPU 0's lists: the time of freeing is not modelled here).
        for page in self.mms[mm].objects {
            self.free_page(0, Pfn((page.0 - DIRECT_MAP) >> 12));
        }
        let m = &mut self.mms[mm];
        m.vmas = Vec::new();
        m.anon = Vec::new();
        true
    }

    /// Frees a second PGD (PTI's user PGD): its user half mirrors `root`'s (freed with it);
    /// in its kernel half, the tables it does not share with `root` are its own.
    fn free_own_kernel_half(&mut self, user_root: Pfn, root: Pfn) {
        for i in 256..512 {
            let e = self.mem.read(user_root, i);
            if e.present() && e.addr() != self.mem.read(root, i).addr() {
                self.free_tables_below(e.addr().pfn(), 3);
            }
        }
        self.mem.free_table(user_root);
    }

    /// Frees table `table` (at `level`, 3 = PDPT) and every table below it.
    fn free_tables_below(&mut self, table: Pfn, level: u8) {
        if level > 1 {
            for i in 0..512 {
                let e = self.mem.read(table, i);
                if e.present() && !e.large() {
                    self.free_tables_below(e.addr().pfn(), level - 1);
                }
            }
        }
        self.mem.free_table(table);
    }
}
