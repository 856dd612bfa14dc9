//! The guest: a KERNEXEC kernel's address spaces in simulated guest-physical memory (real
//! 4-level tables), and the path of one `ssdd` step as explicit page touches, CR3 writes,
//! CR0.WP toggles and the debug trap. This is a guest *path model*, not the kernel model of
//! `kernel/` booted inside a VM: the kernel code each phase runs is the measured footprint of
//! its path (`guest_text.rs`), the kernel objects it uses are listed here (ESTIMATE, from
//! the Linux functions the step runs), and its instructions are one fitted cycle count.

use super::guest_text::{GuestText, TextPage};
use super::params::GuestParams;
use super::placement::{MeasuredPlacement, Placement};
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
    /// An instruction that exits and that KVM emulates, storing to `va` as the guest's
    /// supervisor: LTR marking the TSS descriptor busy in the read-only GDT, when KVM
    /// intercepts descriptor-table instructions to emulate UMIP (Mathias Krause's trace
    /// of the guest-owned CR0.WP bug, kvm list, 30 March 2023). No ssdd step has one.
    EmulatedStore(VirtAddr),
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
    /// Guest-physical addresses of page-table pages placed by the layout; the others sit at
    /// their own frame numbers, above RAM.
    table_gpas: std::collections::BTreeMap<Pfn, u64>,
}

/// Where the measured guest had the kernel half's page tables: those on the step's walks at
/// their measured addresses, the rest consecutively from `rest`.
struct KernelTablePlaces {
    on_walks: crate::virt::placement::KernelTables,
    rest: PhysAddr,
}

/// The guest-physical pages of what a step touches outside the image and the page tables.
struct Layout {
    /// Where the kernel half's page tables go (None: their own frames).
    kernel_tables: Option<KernelTablePlaces>,
    /// Where PaX's per-CPU PGD is (None: a frame of its own).
    cpu_pgd: Option<PhysAddr>,
    runqueue: PhysAddr,
    percpu: [PhysAddr; 2],
    user_text: PhysAddr,
    libc_text: [PhysAddr; LIBC_TEXT_PAGES as usize],
    procs: Vec<ProcLayout>,
}

struct ProcLayout {
    /// The process's page-table pages in allocation order, PGD first (empty: own frames).
    page_tables: Vec<PhysAddr>,
    /// The stack's top two pages, lower first.
    kstack: [PhysAddr; 2],
    task: [PhysAddr; 3],
    signal: PhysAddr,
    sighand: PhysAddr,
    mm: PhysAddr,
    cred: PhysAddr,
    data: PhysAddr,
    stack: PhysAddr,
    libc_data: PhysAddr,
}

impl Layout {
    fn new(p: &GuestParams, pairs: u64, seed: u64) -> Layout {
        match p.placement {
            Placement::Measured => Layout::measured(MeasuredPlacement::builtin(), pairs),
            Placement::Packed | Placement::Scattered => Layout::allocated(p, pairs, seed),
        }
    }

    /// Each object at the address the trace found (run_ssdd checks that the measurement
    /// has the run's RAM and enough pairs). A tracee's user pages are its tracer's: it
    /// forks from the tracer and, spinning, writes none of them.
    fn measured(m: &MeasuredPlacement, pairs: u64) -> Layout {
        let page = MeasuredPlacement::page;
        let procs: Vec<ProcLayout> = m.process[..2 * pairs as usize]
            .chunks(2)
            .flat_map(|pair| {
                let user = |a: Option<u64>| page(a.expect("tracers have user pages (parse)"));
                let tracer = &pair[0];
                let (data, stack, libc_data) = (
                    user(tracer.data),
                    user(tracer.stack),
                    user(tracer.libc_data),
                );
                pair.iter().map(move |q| ProcLayout {
                    page_tables: q.page_tables.iter().map(|&a| page(a)).collect(),
                    kstack: [page(q.kstack[2]), page(q.kstack[3])],
                    task: [0, 1, 2].map(|i| page(q.task + i * 4096)),
                    signal: page(q.signal),
                    sighand: page(q.sighand),
                    mm: page(q.mm),
                    cred: page(q.cred),
                    data,
                    stack,
                    libc_data,
                })
            })
            .collect();
        Layout {
            kernel_tables: Some(KernelTablePlaces {
                on_walks: m.kernel_tables.clone(),
                rest: page(m.kernel_data),
            }),
            cpu_pgd: Some(page(m.kernel_bss)),
            runqueue: page(m.percpu_unit + m.percpu_runqueues),
            percpu: [
                page(m.percpu_unit + m.percpu_current_task),
                page(m.percpu_unit + m.percpu_preempt_count),
            ],
            user_text: page(m.user_text),
            libc_text: m.libc_text.map(page),
            procs,
        }
    }

    /// Pages from the page allocator above the image, in the order the guest was first
    /// modelled with: consecutive frames (packed) or anywhere in RAM (scattered).
    fn allocated(p: &GuestParams, pairs: u64, seed: u64) -> Layout {
        let ram_bytes = p.guest_ram_mib << 20;
        let mut rng = Pcg32::new(seed, 16);
        let mut next_frame = 64u64 << 20;
        let packed = p.placement == Placement::Packed;
        let mut frame = || {
            if packed {
                next_frame += 4096;
                return PhysAddr(next_frame - 4096);
            }
            let frames = (ram_bytes - (64 << 20)) >> 12;
            PhysAddr((64 << 20) + ((rng.next_u64() % frames) << 12))
        };
        let runqueue = frame();
        let percpu = [frame(), frame()];
        let user_text = frame();
        let libc_text = [(); LIBC_TEXT_PAGES as usize].map(|_| frame());
        let kstacks: Vec<[PhysAddr; 2]> = (0..2 * pairs).map(|_| [frame(), frame()]).collect();
        let procs = kstacks
            .into_iter()
            .map(|kstack| {
                let (data, stack, libc_data) = (frame(), frame(), frame());
                ProcLayout {
                    page_tables: vec![],
                    kstack,
                    task: [frame(), frame(), frame()],
                    signal: frame(),
                    sighand: frame(),
                    mm: frame(),
                    cred: frame(),
                    data,
                    stack,
                    libc_data,
                }
            })
            .collect();
        Layout {
            kernel_tables: None,
            cpu_pgd: None,
            runqueue,
            percpu,
            user_text,
            libc_text,
            procs,
        }
    }
}

impl Guest {
    /// A guest with `pairs` tracer/tracee pairs (processes 2p and 2p+1) on one vCPU.
    pub fn build(p: &GuestParams, pairs: u64, seed: u64) -> Guest {
        let mut mem = PhysMem::new(1);
        let ram_bytes = p.guest_ram_mib << 20;
        let layout = Layout::new(p, pairs, seed);
        let kernel = mem.alloc_table(0);
        let text = GuestText::from(&p.recording.footprints).expect(
            "every recording has the ssdd paths (Recording::read checks, guest_text tests)",
        );
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
        let mut table_gpas = std::collections::BTreeMap::new();
        // The page tables allocated since the last call (`done` so far) get the addresses `at`
        // yields, in order; when it runs out the rest keep their own frames.
        let mut place = |mem: &PhysMem, done: &mut usize, at: &mut dyn Iterator<Item = u64>| {
            for t in mem.tables_allocated(0).skip(*done) {
                if let Some(gpa) = at.next() {
                    table_gpas.insert(t, gpa);
                }
                *done += 1;
            }
        };
        // The model's kernel tables that a walk of `vas` reads, by level below the PGD.
        let on_walks = |mem: &PhysMem, vas: &[VirtAddr]| {
            let mut levels: [Vec<Pfn>; 3] = Default::default();
            for &va in vas {
                for (level, t) in paging::tables_on_walk(mem, kernel, va)
                    .into_iter()
                    .enumerate()
                {
                    if !levels[level].contains(&t) {
                        levels[level].push(t);
                    }
                }
            }
            levels
        };
        let runqueue = direct(layout.runqueue);
        let percpu = layout.percpu.map(direct);
        // Kernel stacks first, so the vmalloc PML4 slot exists when the roots share it.
        let stacks: Vec<VirtAddr> = (0..2 * pairs)
            .map(|p| {
                let stack = VirtAddr(VMALLOC + p * (32 << 10));
                for i in 0..2 {
                    let pa = layout.procs[p as usize].kstack[i as usize];
                    let va = stack.offset(i * 4096);
                    let flags = PteFlags::KERNEL_DATA.with_global(true);
                    paging::map(&mut mem, kernel, va, pa, PageSize::Size4K, flags, 0);
                }
                stack
            })
            .collect();
        // The kernel half's tables so far (the image, the direct map, read-only data and the
        // stacks' vmalloc range): those on the step's walks where the measured guest had
        // them, level by level in the order its walks met them; the rest in the image,
        // consecutively, as Linux builds its boot tables there.
        let mut measured = std::collections::BTreeMap::new();
        if let Some(KernelTablePlaces { on_walks: t, .. }) = &layout.kernel_tables {
            let direct_map: Vec<VirtAddr> = (0..ram_bytes)
                .step_by(1 << 30)
                .map(|o| VirtAddr(DIRECT_MAP + o))
                .collect();
            for (vas, gpas) in [
                (&[VirtAddr(KERNEL_TEXT)][..], &t.image),
                (&direct_map[..], &t.direct_map),
                (&stacks[..], &t.vmalloc),
            ] {
                for (model, found) in on_walks(&mem, vas).iter().zip(gpas) {
                    measured.extend(model.iter().copied().zip(found.iter().copied()));
                }
            }
        }
        let mut next = layout.kernel_tables.as_ref().map(|k| k.rest.0);
        let kernel_tables: Vec<u64> = mem
            .tables_allocated(0)
            .map_while(|t| {
                measured.get(&t).copied().or_else(|| {
                    let gpa = next?;
                    next = Some(gpa + 4096);
                    Some(gpa)
                })
            })
            .collect();
        let mut done = 0;
        place(&mem, &mut done, &mut kernel_tables.into_iter());
        let mut procs = vec![];
        for (stack, at) in stacks.into_iter().zip(&layout.procs) {
            let root = mem.alloc_table(0);
            for slot in 256..512 {
                paging::share_pml4_entry(&mut mem, root, kernel, slot);
            }
            let mut user = vec![
                (USER_TEXT, layout.user_text, PteFlags::USER_TEXT),
                (USER_DATA, at.data, PteFlags::USER_DATA),
                (USER_STACK, at.stack, PteFlags::USER_DATA),
                (LIBC_DATA, at.libc_data, PteFlags::USER_DATA),
            ];
            for (i, &pa) in layout.libc_text.iter().enumerate() {
                user.push((LIBC_TEXT + i as u64 * 4096, pa, PteFlags::USER_TEXT));
            }
            for (va, pa, flags) in user {
                paging::map(&mut mem, root, VirtAddr(va), pa, PageSize::Size4K, flags, 0);
            }
            // The model maps libc's data in a PMD slot of its own, so it has one PTE page
            // more than the traced process: extras follow the process's last traced table.
            let last = at.page_tables.last().map(|a| a.0);
            let after = (1..).map_while(|k| last.map(|a| a + k * 4096));
            place(
                &mem,
                &mut done,
                &mut at.page_tables.iter().map(|a| a.0).chain(after),
            );
            procs.push(Process {
                root,
                kstack: [stack, stack.offset(4096)],
                task: at.task.map(direct),
                signal: direct(at.signal),
                sighand: direct(at.sighand),
                mm: direct(at.mm),
                cred: direct(at.cred),
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
        place(
            &mem,
            &mut done,
            &mut layout.cpu_pgd.map(|a| a.0).into_iter(),
        );
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
            table_gpas,
        };
        if let Some(pgd) = g.cpu_pgd {
            for slot in 0..USER_PGD_SLOTS {
                g.clone_pgd_slot(0, slot);
            }
            // The direct map covers RAM. A layout that leaves the per-CPU PGD's frame above
            // RAM (packed, scattered: a model artifact, Linux's tables are in RAM) maps that
            // frame's 2 MiB too, so KVM's software walks of the PGD's address find it.
            let gpa = g.table_gpa(pgd);
            if gpa >= ram_bytes {
                let region = gpa & !((1 << 21) - 1);
                paging::map(
                    &mut g.mem,
                    kernel,
                    VirtAddr(DIRECT_MAP + region),
                    PhysAddr(region),
                    PageSize::Size2M,
                    PteFlags::KERNEL_DATA.with_global(true),
                    0,
                );
            }
        }
        g
    }

    /// The page-table root the guest runs process `p` on: its own PGD, or the CPU's.
    pub fn root_of(&self, p: usize) -> Pfn {
        self.cpu_pgd.unwrap_or(self.procs[p].root)
    }

    /// The address the guest kernel stores the per-CPU PGD's entries through: the direct
    /// map's (ESTIMATE: PaX's cpu_pgd is a .bss array reached through the image's mapping;
    /// Linux maps the image and the direct map with 2 MiB pages alike, so a walk of either
    /// reads three levels).
    pub fn cpu_pgd_va(&self) -> Option<VirtAddr> {
        self.cpu_pgd
            .map(|t| VirtAddr(DIRECT_MAP + self.table_gpa(t)))
    }

    /// The store instruction of __clone_user_pgds (pax_switch_mm): ESTIMATE, a line of the
    /// context switch's measured text (every text page is under the same 2 MiB mapping, so
    /// only the line it fetches depends on the choice).
    pub fn clone_code_va(&self) -> VirtAddr {
        let page = self.text.switch.first().map_or(0, |p| p.offset);
        VirtAddr(KERNEL_TEXT + page)
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

impl Guest {
    /// The guest-physical address of a guest page-table page (what CR3 or an entry holds).
    pub fn table_gpa(&self, table: Pfn) -> u64 {
        self.table_gpas
            .get(&table)
            .copied()
            .unwrap_or(table.addr().0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 2 MiB guest-physical regions the processes' task_structs sit in.
    fn task_regions(placement: Placement) -> std::collections::BTreeSet<u64> {
        let p = GuestParams {
            placement,
            ..GuestParams::from(&crate::params::Params::linux())
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
        let packed = task_regions(Placement::Packed);
        assert!(packed.len() <= 2, "{packed:?}");
        let scattered = task_regions(Placement::Scattered);
        assert!(scattered.len() >= 40, "{}", scattered.len());
    }

    #[test]
    fn measured_objects_sit_where_the_trace_found_them() {
        let m = MeasuredPlacement::builtin();
        let expected: std::collections::BTreeSet<u64> = m
            .process
            .iter()
            .flat_map(|q| [q.task, q.task + 4096, q.task + 8192])
            .map(|a| a >> 21)
            .collect();
        assert_eq!(task_regions(Placement::Measured), expected);
        let g = Guest::build(&GuestParams::from(&crate::params::Params::linux()), 10, 1);
        assert_eq!(
            g.procs[3].kstack[1],
            VirtAddr(VMALLOC + 3 * (32 << 10) + 4096),
            "the stack's top page is mapped where the step touches it"
        );
        for (pr, q) in g.procs.iter().zip(&m.process) {
            assert_eq!(
                g.table_gpa(pr.root),
                q.page_tables[0],
                "the PGD where fork put it"
            );
        }
    }
}
