//! The guest: a KERNEXEC kernel's address spaces in simulated guest-physical memory (real
//! 4-level tables), and the path of one `ssdd` step as explicit page touches, CR3 writes,
//! CR0.WP toggles and the debug trap. This is a guest *path model*, not the kernel model of
//! `kernel/` booted inside a VM: what each step touches is listed here (ESTIMATE, from the
//! Linux functions the step runs), and its instructions are one fitted cycle count.

use super::params::GuestParams;
use crate::arch::x86::{paging, PageSize, Pfn, PhysAddr, PhysMem, PteFlags, VirtAddr};
use crate::sim::rng::Pcg32;

/// One thing the guest does, in order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GuestOp {
    /// A data access by the kernel (supervisor) or by user space.
    Touch {
        va: VirtAddr,
        write: bool,
        user: bool,
    },
    /// MOV to CR3: switch to process `proc`'s page tables (a context switch).
    Cr3(usize),
    /// KERNEXEC's pax_open_kernel: clear CR0.WP.
    OpenKernel,
    /// pax_close_kernel: set CR0.WP.
    CloseKernel,
    /// Further toggle pairs per step, each around a write to `rodata` (fractional count,
    /// carried over between steps).
    OtherToggles,
    /// The single-stepped instruction's debug trap (#DB).
    DebugTrap,
}

const KERNEL_TEXT: u64 = 0xffff_ffff_8100_0000;
const DIRECT_MAP: u64 = 0xffff_8880_0000_0000;
/// Read-only kernel data: the GDT of each CPU, then the __read_only page written between
/// the other toggles.
const RO_DATA: u64 = 0xffff_fe00_0000_0000;
const USER_TEXT: u64 = 0x40_0000;
const USER_DATA: u64 = 0x60_1000;
const USER_STACK: u64 = 0x7fff_ffff_e000;
/// Guest-physical start of the kernel image (16 MiB, Linux's default physical start).
const IMAGE_GPA: u64 = 16 << 20;
const TEXT_2M_PAGES: u64 = 4;

pub struct Process {
    pub root: Pfn,
    kstack: [VirtAddr; 2],
    task: VirtAddr,
    signal: VirtAddr,
}

pub struct Guest {
    pub mem: PhysMem,
    pub procs: Vec<Process>,
    pub gdt: VirtAddr,
    pub rodata: VirtAddr,
    runqueue: VirtAddr,
    /// Every 2 MiB-aligned guest-physical region that holds RAM, and the guest-physical
    /// address the page tables start at (outside RAM, see `paging_gpa`).
    pub ram_bytes: u64,
}

impl Guest {
    /// A guest with `pairs` tracer/tracee pairs (processes 2p and 2p+1) on one vCPU.
    pub fn build(p: &GuestParams, pairs: u64, seed: u64) -> Guest {
        let mut mem = PhysMem::new(1);
        let ram_bytes = p.guest_ram_mib << 20;
        let mut rng = Pcg32::new(seed, 16);
        // Kernel objects land anywhere in RAM above the image (slab, page allocator).
        let mut scatter = || {
            let frames = (ram_bytes - (64 << 20)) >> 12;
            PhysAddr((64 << 20) + ((rng.next_u64() % frames) << 12))
        };
        let kernel = mem.alloc_table(0);
        for i in 0..TEXT_2M_PAGES {
            let off = i << 21;
            paging::map(
                &mut mem,
                kernel,
                VirtAddr(KERNEL_TEXT + off),
                PhysAddr(IMAGE_GPA + off),
                PageSize::Size2M,
                PteFlags::KERNEL_TEXT.with_global(true),
                0,
            );
        }
        // The direct map in 2 MiB pages, as Linux maps RAM.
        for off in (0..ram_bytes).step_by(1 << 21) {
            paging::map(
                &mut mem,
                kernel,
                VirtAddr(DIRECT_MAP + off),
                PhysAddr(off),
                PageSize::Size2M,
                PteFlags::KERNEL_DATA.with_global(true),
                0,
            );
        }
        // KERNEXEC: the GDT and __read_only data are mapped read-only.
        let image_end = IMAGE_GPA + (TEXT_2M_PAGES << 21);
        for (i, gpa) in [image_end, image_end + 4096].into_iter().enumerate() {
            paging::map(
                &mut mem,
                kernel,
                VirtAddr(RO_DATA + i as u64 * 4096),
                PhysAddr(gpa),
                PageSize::Size4K,
                PteFlags::KERNEL_RODATA.with_global(true),
                0,
            );
        }
        let direct = |pa: PhysAddr| VirtAddr(DIRECT_MAP + pa.0);
        let runqueue = direct(scatter());
        let user_text = scatter();
        let mut procs = vec![];
        for _ in 0..2 * pairs {
            let root = mem.alloc_table(0);
            for slot in 256..512 {
                paging::share_pml4_entry(&mut mem, root, kernel, slot);
            }
            for (va, pa, flags) in [
                (USER_TEXT, user_text, PteFlags::USER_TEXT),
                (USER_DATA, scatter(), PteFlags::USER_DATA),
                (USER_STACK, scatter(), PteFlags::USER_DATA),
            ] {
                paging::map(&mut mem, root, VirtAddr(va), pa, PageSize::Size4K, flags, 0);
            }
            procs.push(Process {
                root,
                kstack: [direct(scatter()), direct(scatter())],
                task: direct(scatter()),
                signal: direct(scatter()),
            });
        }
        Guest {
            mem,
            procs,
            gdt: VirtAddr(RO_DATA),
            rodata: VirtAddr(RO_DATA + 4096),
            runqueue,
            ram_bytes,
        }
    }

    /// One ssdd step of pair `pair`: the tracer T resumes from waitpid, takes SIGCHLD,
    /// single-steps the tracee E and waits; E runs one instruction, traps, stops and
    /// notifies T (kernel/ptrace.c, kernel/signal.c ptrace_stop and
    /// do_notify_parent_cldstop, kernel/exit.c do_wait).
    pub fn step_ops(&self, pair: usize) -> Vec<GuestOp> {
        let (t, e) = (2 * pair, 2 * pair + 1);
        let text = |i: u64| VirtAddr(KERNEL_TEXT + (i << 21) + 0x1000);
        let k = |va, write| GuestOp::Touch {
            va,
            write,
            user: false,
        };
        let u = |va, write| GuestOp::Touch {
            va: VirtAddr(va),
            write,
            user: true,
        };
        let (pt, pe) = (&self.procs[t], &self.procs[e]);
        let mut ops = vec![];
        // __schedule → context_switch(prev, next): run queue, both tasks, the next
        // task's stack, switch_mm (CR3), __switch_to's load_TLS into the read-only GDT.
        let switch_to = |ops: &mut Vec<GuestOp>, prev: &Process, next: usize| {
            let n = &self.procs[next];
            ops.extend([
                k(text(0), false),
                k(self.runqueue, true),
                k(prev.task, true),
                k(n.task, true),
                k(n.kstack[1], true),
                GuestOp::Cr3(next),
                GuestOp::OpenKernel,
                k(self.gdt, true),
                GuestOp::CloseKernel,
                k(n.kstack[0], true),
            ]);
        };
        switch_to(&mut ops, pe, t);
        // T: do_wait finds E stopped, returns; SIGCHLD is delivered (rt frame on the user
        // stack), the handler sets got_sigchld, rt_sigreturn.
        ops.extend([
            k(text(1), false),
            k(pt.signal, true),
            k(pe.task, false),
            u(USER_STACK, true),
            u(USER_TEXT, false),
            u(USER_DATA, true),
            k(text(0), false),
            k(pt.kstack[1], true),
            u(USER_STACK, false),
        ]);
        // T: ptrace(PTRACE_SINGLESTEP): ptrace_check_attach, user_enable_single_step sets
        // TF in E's saved registers, wake_up_state(E); then waitpid sleeps.
        ops.extend([
            k(text(2), false),
            k(pe.task, true),
            k(pe.kstack[1], true),
            k(self.runqueue, true),
            GuestOp::OtherToggles,
            k(text(1), false),
            k(pt.signal, true),
            k(pt.kstack[1], true),
        ]);
        switch_to(&mut ops, pt, e);
        // E: back to user, one instruction of `while (1);`, #DB; exc_debug sends SIGTRAP,
        // ptrace_stop notifies T (SIGCHLD, wake-up) and schedules away.
        ops.extend([
            k(pe.kstack[1], false),
            u(USER_TEXT, false),
            GuestOp::DebugTrap,
            k(text(0), false),
            k(pe.kstack[1], true),
            k(text(1), false),
            k(pe.task, true),
            k(pe.signal, true),
            k(pt.signal, true),
            k(pt.task, true),
            k(self.runqueue, true),
        ]);
        ops
    }
}

/// The guest-physical frame of a guest page-table page (what CR3 holds).
pub fn root_gpa(root: Pfn) -> u64 {
    root.addr().0
}
