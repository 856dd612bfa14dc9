//! The guest: a KERNEXEC kernel's address spaces in simulated guest-physical memory (real
//! 4-level tables), and the path of one `ssdd` step as explicit page touches, CR3 writes,
//! CR0.WP toggles and the debug trap. This is a guest *path model*, not the kernel model of
//! `kernel/` booted inside a VM: the kernel code each phase runs is the measured footprint of
//! its path (`guest_text.rs`), the kernel objects it uses are listed here (ESTIMATE, from
//! the Linux functions the step runs), and its instructions are one fitted cycle count.

use super::guest_text::{GuestText, TextPage};
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
    /// A share of the further toggle pairs per step, each around a write to `rodata`
    /// (fractional count, carried over between steps).
    OtherToggles(f64),
    /// The single-stepped instruction's debug trap (#DB).
    DebugTrap,
    /// Kernel code run from one text page: its lines (bit i = line i) fetched.
    Fetch { va: VirtAddr, lines: u64 },
    /// PaX per-CPU PGD: copy process `next`'s user PGD entries into the CPU's PGD.
    ClonePgd(usize),
}

const KERNEL_TEXT: u64 = 0xffff_ffff_8100_0000;
const DIRECT_MAP: u64 = 0xffff_8880_0000_0000;
/// Read-only kernel data: the GDT of each CPU, then the __read_only page written between
/// the other toggles.
const RO_DATA: u64 = 0xffff_fe00_0000_0000;
const USER_TEXT: u64 = 0x40_0000;
const USER_DATA: u64 = 0x60_1000;
const USER_STACK: u64 = 0x7fff_ffff_e000;
/// libc's text: the waitpid, ptrace and signal wrappers and the restorer, four pages.
const LIBC_TEXT: u64 = 0x7fff_f7dc_0000;
const LIBC_TEXT_PAGES: u64 = 4;
const LIBC_DATA: u64 = 0x7fff_f7fc_0000;
const VMALLOC: u64 = 0xffff_c900_0000_0000;
/// Guest-physical start of the kernel image (16 MiB, Linux's default physical start).
const IMAGE_GPA: u64 = 16 << 20;
/// PGD entries of the user half (x86-64 USER_PGD_PTRS), what __clone_user_pgds copies.
pub const USER_PGD_SLOTS: usize = 256;

/// The pages of one task the step's kernel paths touch (ESTIMATE of the objects named).
pub struct Process {
    pub root: Pfn,
    /// The vmalloc'd kernel stack (CONFIG_VMAP_STACK, 16 KiB): 4 KiB guest mappings.
    kstack: [VirtAddr; 2],
    /// task_struct (~9 KiB on x86-64 6.x: three pages).
    task: [VirtAddr; 3],
    /// signal_struct, sighand_struct, mm_struct, cred: a page each.
    signal: VirtAddr,
    sighand: VirtAddr,
    mm: VirtAddr,
    cred: VirtAddr,
    /// The process's own user pages: libc's data (COW after fork), ssdd's data, the stack.
    libc_data: VirtAddr,
}

pub struct Guest {
    pub mem: PhysMem,
    pub procs: Vec<Process>,
    pub gdt: VirtAddr,
    pub rodata: VirtAddr,
    runqueue: VirtAddr,
    /// This CPU's per-CPU area pages the paths touch (current task, preempt count, timers).
    percpu: [VirtAddr; 2],
    /// Every 2 MiB-aligned guest-physical region that holds RAM, and the guest-physical
    /// address the page tables start at (outside RAM, see `paging_gpa`).
    pub ram_bytes: u64,
    /// The kernel code of each phase of a step (measured footprints).
    pub text: GuestText,
    /// KERNEXEC toggle pairs per context switch in __switch_to
    /// (guest.wp_pairs_per_context_switch); pax_switch_mm's pair comes with `cpu_pgd`.
    switch_pairs: u64,
    /// The vCPU's own PGD when the guest runs PaX's per-CPU PGD (guest.per_cpu_pgd).
    pub cpu_pgd: Option<Pfn>,
}

impl Guest {
    /// A guest with `pairs` tracer/tracee pairs (processes 2p and 2p+1) on one vCPU.
    pub fn build(p: &GuestParams, pairs: u64, seed: u64) -> Guest {
        let mut mem = PhysMem::new(1);
        let ram_bytes = p.guest_ram_mib << 20;
        let mut rng = Pcg32::new(seed, 16);
        // Kernel objects and user pages come from the page allocator above the image:
        // consecutive frames (guest.packed_pages) or anywhere in RAM.
        let mut next_frame = 64u64 << 20;
        let packed = p.packed_pages;
        let mut scatter = || {
            if packed {
                next_frame += 4096;
                return PhysAddr(next_frame - 4096);
            }
            let frames = (ram_bytes - (64 << 20)) >> 12;
            PhysAddr((64 << 20) + ((rng.next_u64() % frames) << 12))
        };
        let kernel = mem.alloc_table(0);
        let text = GuestText::from(crate::kernel::footprint::Footprints::builtin())
            .expect("the committed footprint file records the ssdd paths (guest_text tests)");
        // The kernel image in 2 MiB pages as Linux maps it, or in 4 KiB pages.
        let text_2m_pages = text.bytes.div_ceil(1 << 21);
        let size = if p.kernel_text_4k {
            PageSize::Size4K
        } else {
            PageSize::Size2M
        };
        for off in (0..text_2m_pages << 21).step_by(size.bytes() as usize) {
            paging::map(
                &mut mem,
                kernel,
                VirtAddr(KERNEL_TEXT + off),
                PhysAddr(IMAGE_GPA + off),
                size,
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
        let image_end = IMAGE_GPA + (text_2m_pages << 21);
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
        let percpu = [direct(scatter()), direct(scatter())];
        let user_text = scatter();
        let libc_text: Vec<PhysAddr> = (0..LIBC_TEXT_PAGES).map(|_| scatter()).collect();
        // Kernel stacks first, so the vmalloc PML4 slot exists when the roots share it.
        let stacks: Vec<VirtAddr> = (0..2 * pairs)
            .map(|p| {
                let stack = VirtAddr(VMALLOC + p * (32 << 10));
                for i in 0..2 {
                    let pa = scatter();
                    let va = stack.offset(i * 4096);
                    let flags = PteFlags::KERNEL_DATA.with_global(true);
                    paging::map(&mut mem, kernel, va, pa, PageSize::Size4K, flags, 0);
                }
                stack
            })
            .collect();
        let mut procs = vec![];
        for stack in stacks {
            let root = mem.alloc_table(0);
            for slot in 256..512 {
                paging::share_pml4_entry(&mut mem, root, kernel, slot);
            }
            let mut user = vec![
                (USER_TEXT, user_text, PteFlags::USER_TEXT),
                (USER_DATA, scatter(), PteFlags::USER_DATA),
                (USER_STACK, scatter(), PteFlags::USER_DATA),
                (LIBC_DATA, scatter(), PteFlags::USER_DATA),
            ];
            for (i, &pa) in libc_text.iter().enumerate() {
                user.push((LIBC_TEXT + i as u64 * 4096, pa, PteFlags::USER_TEXT));
            }
            for (va, pa, flags) in user {
                paging::map(&mut mem, root, VirtAddr(va), pa, PageSize::Size4K, flags, 0);
            }
            procs.push(Process {
                root,
                kstack: [stack, stack.offset(4096)],
                task: [direct(scatter()), direct(scatter()), direct(scatter())],
                signal: direct(scatter()),
                sighand: direct(scatter()),
                mm: direct(scatter()),
                cred: direct(scatter()),
                libc_data: VirtAddr(LIBC_DATA),
            });
        }
        let cpu_pgd = p.per_cpu_pgd.then(|| {
            let pgd = mem.alloc_table(0);
            for slot in 256..512 {
                paging::share_pml4_entry(&mut mem, pgd, kernel, slot);
            }
            pgd
        });
        let mut g = Guest {
            mem,
            procs,
            gdt: VirtAddr(RO_DATA),
            rodata: VirtAddr(RO_DATA + 4096),
            runqueue,
            percpu,
            ram_bytes,
            text,
            switch_pairs: p.wp_pairs_per_context_switch.round() as u64,
            cpu_pgd,
        };
        if g.cpu_pgd.is_some() {
            for slot in 0..USER_PGD_SLOTS {
                g.clone_pgd_slot(0, slot);
            }
        }
        g
    }

    /// The page-table root the guest runs process `p` on: its own PGD, or the CPU's.
    pub fn root_of(&self, p: usize) -> Pfn {
        self.cpu_pgd.unwrap_or(self.procs[p].root)
    }

    /// One entry of __clone_user_pgds: the CPU's PGD slot `slot` := process `p`'s.
    pub fn clone_pgd_slot(&mut self, p: usize, slot: usize) {
        let pgd = self.cpu_pgd.expect("per-CPU PGD guest");
        let e = self.mem.read(self.procs[p].root, slot);
        self.mem.write(pgd, slot, e);
    }

    /// One ssdd step of pair `pair`: the tracer T resumes from waitpid, takes SIGCHLD,
    /// single-steps the tracee E and waits; E runs one instruction, traps, stops and
    /// notifies T (kernel/ptrace.c, kernel/signal.c ptrace_stop and
    /// do_notify_parent_cldstop, kernel/exit.c do_wait). The data pages are an ESTIMATE of
    /// the objects those functions use; the text is each path's measured footprint.
    pub fn step_ops(&self, pair: usize) -> Vec<GuestOp> {
        let (t, e) = (2 * pair, 2 * pair + 1);
        let fetch = |ops: &mut Vec<GuestOp>, pages: &[TextPage]| {
            ops.extend(pages.iter().map(|t| GuestOp::Fetch {
                va: VirtAddr(KERNEL_TEXT + t.offset),
                lines: t.lines,
            }))
        };
        let text = &self.text;
        let k = |va, write| GuestOp::Touch {
            va,
            write,
            user: false,
        };
        let u = |va: u64, write| GuestOp::Touch {
            va: VirtAddr(va),
            write,
            user: true,
        };
        let libc = |i: u64| u(LIBC_TEXT + i * 4096, false);
        let (pt, pe) = (&self.procs[t], &self.procs[e]);
        let mut ops = vec![];
        // Kernel entry and exit (entry_SYSCALL_64 / an exception): text, the stack top,
        // the per-CPU area, current's task_struct.
        // Where the step writes __read_only data between pax_open_kernel/pax_close_kernel is
        // not known: the pairs beyond the context switches' are spread evenly over the
        // step's six kernel phases (three syscalls, the trap, two switches), each share
        // taken where the phase starts.
        let share = GuestOp::OtherToggles(1.0 / 6.0);
        let entry = |ops: &mut Vec<GuestOp>, p: &Process| {
            ops.push(share);
            fetch(ops, &text.entry);
            ops.extend([
                k(p.kstack[1], true),
                k(self.percpu[0], true),
                k(p.task[0], true),
            ]);
        };
        // __schedule → context_switch(prev, next): run queue, both tasks, the next mm,
        // switch_mm (CR3), __switch_to's load_TLS into the read-only GDT, the next stack.
        let switch_to = |ops: &mut Vec<GuestOp>, prev: &Process, next: usize| {
            let n = &self.procs[next];
            ops.push(share);
            fetch(ops, &text.switch);
            ops.extend([
                k(self.runqueue, true),
                k(self.percpu[1], true),
                k(prev.task[0], true),
                k(prev.task[1], true),
                k(n.task[0], true),
                k(n.task[1], true),
                k(n.mm, false),
            ]);
            // pax_switch_mm (per-CPU PGD guests): the clone of the next mm's user PGD entries
            // in its own pax_open_kernel/pax_close_kernel pair, then the CR3 write (the
            // CPU's own PGD again where it has one).
            if self.cpu_pgd.is_some() {
                ops.extend([
                    GuestOp::OpenKernel,
                    GuestOp::ClonePgd(next),
                    GuestOp::CloseKernel,
                ]);
            }
            ops.push(GuestOp::Cr3(next));
            // __switch_to: the first pair around load_TLS's GDT writes, any further one
            // around another __read_only write.
            for i in 0..self.switch_pairs {
                let target = if i == 0 { self.gdt } else { self.rodata };
                ops.extend([GuestOp::OpenKernel, k(target, true), GuestOp::CloseKernel]);
            }
            ops.extend([k(n.kstack[1], true), k(n.kstack[0], true)]);
        };
        switch_to(&mut ops, pe, t);
        // T: do_wait finds E stopped (wait_task_stopped reads E's task and signal state)
        // and returns to user; SIGCHLD is delivered (get_signal, the rt frame on the user
        // stack), the handler sets got_sigchld, rt_sigreturn restores.
        fetch(&mut ops, &text.wait);
        ops.extend([
            k(pt.signal, true),
            k(pt.sighand, true),
            k(pe.task[2], false),
            k(pt.cred, false),
            u(USER_STACK, true),
            u(USER_TEXT, false),
            u(USER_DATA, true),
            libc(3),
        ]);
        entry(&mut ops, pt);
        ops.extend([k(pt.sighand, false), u(USER_STACK, false)]);
        // T: ptrace(PTRACE_SINGLESTEP) through libc: ptrace_check_attach,
        // user_enable_single_step sets TF in E's saved registers, wake_up_state(E).
        ops.extend([u(USER_TEXT, false), libc(1), u(pt.libc_data.0, false)]);
        entry(&mut ops, pt);
        fetch(&mut ops, &text.ptrace);
        ops.extend([
            k(pe.task[0], true),
            k(pe.task[2], true),
            k(pe.kstack[1], true),
            k(self.runqueue, true),
            u(USER_TEXT, false),
        ]);
        // T: waitpid through libc; do_wait finds nothing and sleeps.
        ops.extend([libc(0), u(pt.libc_data.0, false)]);
        entry(&mut ops, pt);
        fetch(&mut ops, &text.wait);
        ops.extend([k(pt.signal, true), k(pe.task[2], false)]);
        switch_to(&mut ops, pt, e);
        // E: back to user, one instruction of `while (1);`, #DB; exc_debug sends SIGTRAP,
        // ptrace_stop notifies T (SIGCHLD queued on T's sighand, wake-up) and schedules.
        ops.extend([
            k(pe.kstack[1], false),
            u(USER_TEXT, false),
            GuestOp::DebugTrap,
        ]);
        entry(&mut ops, pe);
        fetch(&mut ops, &text.trap);
        ops.extend([
            k(pe.task[2], true),
            k(pe.signal, true),
            k(pe.sighand, true),
            k(pt.signal, true),
            k(pt.sighand, true),
            k(pt.task[0], true),
            k(pt.task[2], true),
            k(self.runqueue, true),
        ]);
        ops
    }
}

/// The guest-physical frame of a guest page-table page (what CR3 holds).
pub fn root_gpa(root: Pfn) -> u64 {
    root.addr().0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 2 MiB guest-physical regions the processes' task_structs sit in.
    fn task_regions(packed: bool) -> std::collections::BTreeSet<u64> {
        let p = GuestParams {
            packed_pages: packed,
            ..GuestParams::default()
        };
        let g = Guest::build(&p, 10, 1);
        g.procs
            .iter()
            .flat_map(|pr| pr.task)
            .map(|va| (va.0 - DIRECT_MAP) >> 21)
            .collect()
    }

    #[test]
    fn packed_pages_share_a_few_regions_scattered_ones_do_not() {
        // 20 processes, 3 task_struct pages each, among ~15 pages per process.
        assert!(task_regions(true).len() <= 2, "{:?}", task_regions(true));
        assert!(
            task_regions(false).len() >= 40,
            "{}",
            task_regions(false).len()
        );
    }
}
