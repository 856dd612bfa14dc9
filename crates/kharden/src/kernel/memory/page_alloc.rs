//! The page allocator: frames by NUMA node with per-CPU lists of recently freed frames
//! (Linux's pcp lists), each allocation tagged with its GFP class. Defenses hear of every
//! allocation and free (XPFO unmaps user pages from the direct map there).

use super::struct_page::Reach;
use crate::arch::x86::Pfn;
use crate::kernel::{CpuId, Kernel, TaskId};
use crate::sim::Counter;

/// What an allocation is for, from its GFP flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Gfp {
    /// GFP_HIGHUSER_MOVABLE for anonymous memory (page faults, COW).
    UserAnon,
    /// The mapping's GFP (GFP_HIGHUSER_MOVABLE for regular files): page-cache pages.
    PageCache,
    /// GFP_KERNEL: slab, page tables, kernel stacks.
    Kernel,
}

impl Gfp {
    /// Whether the allocation carries all of GFP_HIGHUSER's bits (what XPFO tests).
    pub fn is_highuser(self) -> bool {
        matches!(self, Gfp::UserAnon | Gfp::PageCache)
    }
}

/// Frames a per-CPU list keeps before giving back to the node (Linux pcp->high is larger;
/// only the LIFO reuse of hot frames matters here).
const PCP_HIGH: usize = 64;
/// Frames moved from the node to an empty per-CPU list at once (zone_batchsize() gives 31
/// for any zone over ~128 MiB; docs/design/xpfo.md section 1.8).
const PCP_BATCH: usize = 31;

#[derive(Debug, Clone, Copy)]
pub struct PageInfo {
    pub gfp: Gfp,
    pub owner: Option<TaskId>,
}

impl Kernel {
    /// The per-CPU free list frames of class `gfp` come from and go back to.
    fn pcp_of(&mut self, cpu: CpuId, gfp: Gfp) -> &mut Vec<Pfn> {
        if self.config.sensitive_freelists && gfp.is_highuser() {
            &mut self.cpus[cpu].pcp_sensitive
        } else {
            &mut self.cpus[cpu].pcp
        }
    }

    /// Allocates one order-0 page on `cpu`'s node.
    pub fn alloc_page(&mut self, cpu: CpuId, gfp: Gfp, owner: Option<TaskId>) -> Pfn {
        if self.pcp_of(cpu, gfp).is_empty() {
            self.refill_pcp(cpu, gfp);
        }
        let list = self.pcp_of(cpu, gfp);
        let pfn = list.pop().expect("refilled");
        // list_del() off the per-CPU list: this page's links, then the next page's
        let next = list.last().copied();
        let pair = [pfn, next.unwrap_or(pfn)];
        self.touch_struct_pages(cpu, &pair[..1 + next.is_some() as usize], Reach::Linked);
        self.pages.insert(pfn, PageInfo { gfp, owner });
        self.cpus[cpu].stats.count(Counter::PagesAllocated);
        self.with_defenses(|d, k| d.on_page_alloc(k, cpu, pfn, gfp));
        pfn
    }

    /// rmqueue_bulk(): refill an empty per-CPU list with a batch of frames from the node;
    /// defenses see the batch (XPFO's batched policy unmaps it there, with one flush).
    fn refill_pcp(&mut self, cpu: CpuId, gfp: Gfp) {
        let node = self.cpus[cpu].mmu.node();
        let batch = self.take_frames(node, PCP_BATCH as u64);
        // __rmqueue() walks the buddy free list under the zone lock, link by link
        self.touch_struct_pages(cpu, &batch, Reach::Linked);
        self.with_defenses(|d, k| d.on_pcp_refill(k, cpu, &batch));
        // Hand them out lowest first, as a fresh buddy block would be.
        self.pcp_of(cpu, gfp).extend(batch.into_iter().rev());
    }

    /// Takes `n` data frames from `node`, with the direct map covering every one of them.
    fn take_frames(&mut self, node: u32, n: u64) -> Vec<Pfn> {
        let frames = (0..n).map(|_| self.mem.alloc_data(node)).collect();
        self.cover_direct_map(node);
        frames
    }

    /// Puts `frames` data frames per node on the node's free list as a long-running
    /// workload leaves them: each was a user page before and was freed, and the defenses set
    /// up what that history left behind (XPFO: a direct map split over them). A measurement
    /// of a steady state then recycles them, as Linux's allocator recycles freed pages,
    /// instead of reaching fresh memory the build would have touched once at its start.
    pub fn recycle_frames(&mut self, frames: u64) {
        let was = std::mem::replace(&mut self.fast_forward, true);
        for node in 0..self.mem.nodes() {
            let recycled = self.take_frames(node, frames);
            self.with_defenses(|d, k| d.on_frames_recycled(k, &recycled));
            // Lowest frame on top: handed out in ascending order, as fresh frames are.
            for &pfn in recycled.iter().rev() {
                self.mem.free_data(pfn);
            }
        }
        self.fast_forward = was;
    }

    /// Frees one page back to `cpu`'s list.
    pub fn free_page(&mut self, cpu: CpuId, pfn: Pfn) {
        let Some(info) = self.pages.remove(&pfn) else {
            return;
        };
        self.with_defenses(|d, k| d.on_page_free(k, cpu, pfn, info.gfp));
        self.cpus[cpu].stats.count(Counter::PagesFreed);
        // the refcount and flags of a page freed among others (release_pages() of a batch)
        self.touch_struct_pages(cpu, &[pfn], Reach::Stream);
        let list = self.pcp_of(cpu, info.gfp);
        if list.len() < PCP_HIGH {
            list.push(pfn);
        } else {
            self.mem.free_data(pfn);
        }
    }

    pub fn page_info(&self, pfn: Pfn) -> Option<PageInfo> {
        self.pages.get(&pfn).copied()
    }
}
