//! Freeing what dead tasks leave behind, for long runs (trace replay) whose memory must be
//! bounded by the live tasks: a dead task's kernel stack and task_struct (release_task), and
//! an address space nobody uses any more, its user page tables and image frames (mmdrop).
//!
//! Opt-in: nothing calls these during the reproductions, whose frame numbers (and so cache
//! behaviour) stay as they were. Task and mm ids are never reused; a reaped task keeps its
//! (small) entry in `tasks`, a reaped mm its entry in `mms`. PTI's second user PGD, when a
//! defense made one, is not freed.

use super::layout::USER_TEXT;
use super::layout::{DIRECT_MAP, KERNEL_STACK_BYTES, USER_DATA, USER_LIBC, USER_STACK_TOP};
use super::sched::TaskState;
use super::{CpuId, Kernel, MmId, TaskId};
use crate::arch::x86::{paging, Pfn, VirtAddr};

/// The address ranges spawn() maps with frames of their own (text, data, libc, stack).
const IMAGE: [(u64, u64); 4] = [
    (USER_TEXT, 4),
    (USER_DATA, 2),
    (USER_LIBC, 8),
    (USER_STACK_TOP - 4 * 4096, 4),
];

impl Kernel {
    /// Frees dead `task`'s kernel stack and task_struct; false (nothing done) while it is not
    /// dead or a CPU still has it as current.
    pub fn reap_task(&mut self, cpu: CpuId, task: TaskId) -> bool {
        if self.tasks[task].state != TaskState::Dead
            || self.cpus.iter().any(|c| c.current == Some(task))
        {
            return false;
        }
        let stack = self.tasks[task].stack;
        for p in 0..KERNEL_STACK_BYTES / 4096 {
            if let Some(leaf) =
                paging::unmap(&mut self.mem, self.kernel_root, stack.offset(p * 4096))
            {
                self.free_page(cpu, leaf.page.pfn());
            }
        }
        let ts = self.tasks[task].task_struct;
        self.free_page(cpu, Pfn((ts.0 - DIRECT_MAP) >> 12));
        self.tasks[task].name = String::new();
        true
    }

    /// Frees address space `mm`'s user page tables, image frames and PGD once no task uses
    /// it and no CPU has it loaded (a lazy-TLB CPU keeps it until it switches away); false
    /// (nothing done) until then.
    pub fn reap_mm(&mut self, mm: MmId) -> bool {
        let root = self.mms[mm].root;
        let user_root = self.mms[mm].user_root;
        let loaded = |c: &super::Cpu| c.mmu.root() == root || Some(c.mmu.root()) == user_root;
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
