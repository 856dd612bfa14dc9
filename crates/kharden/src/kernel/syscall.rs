//! The syscall table: for each syscall, the kernel work it does and the memory it touches.
//!
//! Footprints follow the Linux 6.1 paths (entry_SYSCALL_64 -> do_syscall_64 -> the handler ->
//! syscall_exit_to_user_mode): which text, which kernel data, which user buffer pages. Work
//! cycles are ESTIMATES of the handler's own path length on a ~3.5 GHz Intel core, from the
//! order of magnitude lmbench `lat_syscall` and LEBench (Ren et al., SOSP'19) report; they
//! are workload facts that no reproduction in this repository is fitted to, and experiments
//! that need one exactly (the FreeBSD getppid path of seed 003) fit it and say so.

/// Where in the kernel image functions of a subsystem sit, as byte offsets into the 16 MiB
/// text. Assumed from the link order (core kernel, mm, fs, drivers, then .entry.text near
/// the end); only which 2 MiB page a path touches matters to the TLB.
pub mod text {
    pub const CORE: u64 = 0x0010_0000;
    pub const SCHED: u64 = 0x0018_0000;
    pub const MM: u64 = 0x0030_0000;
    pub const FS: u64 = 0x0048_0000;
    pub const DRIVERS_CHAR: u64 = 0x0090_0000;
    pub const ENTRY: u64 = 0x00e0_0000;
}

/// A kernel memory access of a path, resolved against the current task and CPU at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KTouch {
    /// Instruction fetch at this offset into kernel text.
    Text(u64),
    /// Read of kernel rodata at this offset (e.g. sys_call_table).
    Rodata(u64),
    /// Read/write of kernel global data at this offset.
    Data(u64),
    /// The current task's task_struct (slab, direct map).
    TaskStruct,
    /// The parent task's task_struct.
    ParentTaskStruct,
    /// Page n (0 = top) of the current kernel stack.
    Stack(u64),
    /// This CPU's per-CPU area (current_task, cpu_tss, ...).
    PerCpu,
    /// Kernel writes a user buffer (copy_to_user / clear_user): page n of the buffer.
    UserBufferWrite(u64),
    /// Kernel reads a user buffer (copy_from_user): page n of the buffer.
    UserBufferRead(u64),
}

/// What a syscall does to the address space beyond its footprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    None,
    /// mmap(MAP_ANONYMOUS) of `pages` pages: a new VMA, no page-table change yet.
    MmapAnon {
        pages: u64,
    },
    /// munmap of the newest VMA: clears its PTEs, frees the frames, flushes the range.
    MunmapLast,
    /// mprotect of the newest VMA, alternating read-only and read-write; flushes the range.
    MprotectLast,
    /// A TLB flush of `pages` pages of the address space, whatever changed them (a replayed
    /// syscall whose recording shows one): flush_tlb_mm_range() over the heap's first pages.
    FlushUserRange {
        pages: u64,
    },
}

#[derive(Debug, Clone, Copy)]
pub struct SyscallSpec {
    pub name: &'static str,
    /// Handler work in cycles (beyond entry/exit and translation costs).
    pub work_cycles: f64,
    pub source: &'static str,
    pub touches: &'static [KTouch],
    pub effect: Effect,
}

use KTouch::*;

/// Every syscall path starts and ends in entry code and do_syscall_64 (core kernel), on the
/// kernel stack and the per-CPU area, and reads sys_call_table.
pub const COMMON_TOUCHES: &[KTouch] = &[
    Text(text::ENTRY),
    PerCpu,
    Stack(0),
    Text(text::CORE),
    Rodata(0x1000),
    TaskStruct,
];

pub const SYSCALLS: &[SyscallSpec] = &[
    SyscallSpec {
        name: "getppid",
        work_cycles: 60.0,
        source: "estimate: rcu_dereference(current->real_parent) + task_tgid_vnr, a few dozen instructions",
        touches: &[ParentTaskStruct],
        effect: Effect::None,
    },
    SyscallSpec {
        name: "getpid",
        work_cycles: 40.0,
        source: "estimate: task_tgid_vnr(current), a few dozen instructions",
        touches: &[],
        effect: Effect::None,
    },
    SyscallSpec {
        name: "lseek",
        work_cycles: 250.0,
        source: "estimate: fdget_pos + vfs_llseek on /dev/zero (lmbench-scale ~70 ns)",
        touches: &[Text(text::FS), Data(0x2000)],
        effect: Effect::None,
    },
    SyscallSpec {
        name: "read-1",
        work_cycles: 400.0,
        source: "estimate: ksys_read -> read_iter_zero, 1 byte (lmbench lat_syscall read ~100 ns)",
        touches: &[Text(text::FS), Text(text::DRIVERS_CHAR), Data(0x2000), UserBufferWrite(0)],
        effect: Effect::None,
    },
    SyscallSpec {
        name: "read-8k",
        work_cycles: 700.0,
        source: "estimate: read-1 plus iov_iter_zero of 8 KiB at ~32 B/cycle",
        touches: &[Text(text::FS), Text(text::DRIVERS_CHAR), Data(0x2000), UserBufferWrite(0), UserBufferWrite(1)],
        effect: Effect::None,
    },
    SyscallSpec {
        name: "write-1",
        work_cycles: 350.0,
        source: "estimate: ksys_write -> write_null, 1 byte (lmbench lat_syscall write ~90 ns)",
        touches: &[Text(text::FS), Text(text::DRIVERS_CHAR), Data(0x2000), UserBufferRead(0)],
        effect: Effect::None,
    },
    SyscallSpec {
        name: "getrusage",
        work_cycles: 500.0,
        source: "estimate: getrusage(RUSAGE_SELF) walks thread group times, copies 144 bytes out",
        touches: &[Text(text::SCHED), UserBufferWrite(0)],
        effect: Effect::None,
    },
    SyscallSpec {
        name: "open-close",
        work_cycles: 3000.0,
        source: "estimate: openat(\"/dev/zero\") path walk + file allocation + close (lmbench lat_syscall open ~0.8-1 us)",
        touches: &[Text(text::FS), Text(text::DRIVERS_CHAR), Data(0x2000), Data(0x4000), UserBufferRead(0)],
        effect: Effect::None,
    },
    SyscallSpec {
        name: "mmap",
        work_cycles: 1200.0,
        source: "estimate: do_mmap of one anonymous page: VMA allocation and insertion (LEBench mmap ~0.3-0.5 us)",
        touches: &[Text(text::MM), Data(0x3000)],
        effect: Effect::MmapAnon { pages: 1 },
    },
    SyscallSpec {
        name: "munmap",
        work_cycles: 1500.0,
        source: "estimate: do_vmi_munmap: unmap_region, free the page, VMA removal (LEBench munmap ~0.5 us)",
        touches: &[Text(text::MM), Data(0x3000)],
        effect: Effect::MunmapLast,
    },
    SyscallSpec {
        name: "mprotect",
        work_cycles: 1000.0,
        source: "estimate: mprotect_fixup + change_protection of one page (LEBench-scale ~0.3 us)",
        touches: &[Text(text::MM), Data(0x3000)],
        effect: Effect::MprotectLast,
    },
];

/// What the page-fault handler for an anonymous page touches (its work is the parameter
/// kernel.anon_fault_cycles).
pub const ANON_FAULT_TOUCHES: &[KTouch] = &[
    Text(text::ENTRY),
    PerCpu,
    Stack(0),
    Text(text::MM),
    TaskStruct,
    Data(0x3000),
];

pub fn lookup(name: &str) -> Option<&'static SyscallSpec> {
    SYSCALLS.iter().find(|s| s.name == name)
}

pub fn names() -> Vec<&'static str> {
    SYSCALLS.iter().map(|s| s.name).collect()
}
