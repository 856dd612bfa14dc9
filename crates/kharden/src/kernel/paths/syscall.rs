//! The syscall table: for each syscall, the recorded kernel path it runs (its text, kernel
//! data and work come from kernels/linux-*.toml through kernel/paths/table.rs), what it touches
//! beyond its own objects (a user buffer, the parent's task_struct) and what it does to the
//! address space.

use super::table::{KernelPaths, PathId};

/// A memory access of a path beyond its own kernel objects (kernel/paths/table.rs), resolved
/// against the current task and CPU at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KTouch {
    /// The parent task's task_struct.
    ParentTaskStruct,
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
    /// mmap(MAP_ANONYMOUS | MAP_LOCKED) of `pages` pages: a new VMA whose pages are
    /// allocated, zeroed and mapped inside the call (__mm_populate).
    MmapPopulate {
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
    /// A replayed munmap: the newest VMA goes, `freed_pages` pages its recording freed are
    /// torn down (kernel.exit_page_cycles each, as at exit), and `flush_pages` are flushed
    /// (its recorded flush; 0: none).
    Munmap {
        flush_pages: u64,
        freed_pages: u64,
    },
}

#[derive(Debug, Clone, Copy)]
pub struct SyscallSpec {
    pub name: &'static str,
    /// The recorded kernel path it runs.
    pub path: PathId,
    /// The handler's own work in cycles beyond entry/exit: the path's measured work, unless
    /// an experiment sets it (FreeBSD's getppid in seed 003 is not the recorded kernel's).
    pub work_cycles: f64,
    /// Whether `work_cycles` is the target's own (an experiment's fit), run as it is; else it
    /// is the recording host's, which loses the mitigations the kernel does not run
    /// (kernel/mitigations.rs).
    pub work_is_given: bool,
    /// Memory the path touches beyond its own kernel objects.
    pub touches: &'static [KTouch],
    pub effect: Effect,
}

use KTouch::*;

/// A syscall of the table: the footprint path it runs (same name unless noted), extra
/// touches, effect.
struct Entry(&'static str, &'static str, &'static [KTouch], Effect);

const TABLE: &[Entry] = &[
    Entry("getppid", "getppid", &[ParentTaskStruct], Effect::None),
    Entry("getpid", "getpid", &[], Effect::None),
    Entry("lseek", "lseek", &[], Effect::None),
    Entry("read-1", "read-1", &[UserBufferWrite(0)], Effect::None),
    Entry(
        "read-8k",
        "read-8k",
        &[UserBufferWrite(0), UserBufferWrite(1)],
        Effect::None,
    ),
    Entry("write-1", "write-1", &[UserBufferRead(0)], Effect::None),
    Entry(
        "getrusage",
        "getrusage",
        &[UserBufferWrite(0)],
        Effect::None,
    ),
    Entry(
        "open-close",
        "open-close",
        &[UserBufferRead(0)],
        Effect::None,
    ),
    Entry("mmap", "mmap", &[], Effect::MmapAnon { pages: 1 }),
    Entry("munmap", "munmap", &[], Effect::MunmapLast),
    Entry("mprotect", "mprotect", &[], Effect::MprotectLast),
    // Seed 002's operations (workload/kernel_ops.rs).
    Entry(
        "mmap-locked",
        "mmap-locked",
        &[],
        Effect::MmapPopulate { pages: 1 },
    ),
    Entry("kill", "kill", &[], Effect::None),
    Entry(
        "rt_sigreturn",
        "rt_sigreturn",
        &[UserBufferRead(0)],
        Effect::None,
    ),
    Entry(
        "mount-proc",
        "mount-proc",
        &[UserBufferRead(0)],
        Effect::None,
    ),
    // The rest of a compile job's mix (workloads/kbuild.toml), whose effects on the address
    // space the job's own events model (faults, exit): here only their kernel path runs.
    Entry("openat", "openat", &[UserBufferRead(0)], Effect::None),
    Entry(
        "newfstatat",
        "newfstatat",
        &[UserBufferWrite(0)],
        Effect::None,
    ),
    // glibc's fstat: newfstatat with AT_EMPTY_PATH and an empty name (kernel/footprints/derived.rs).
    Entry(
        "newfstatat-empty",
        "fstat",
        &[UserBufferWrite(0)],
        Effect::None,
    ),
    Entry("close", "close", &[], Effect::None),
    Entry(
        "rt_sigaction",
        "rt_sigaction",
        &[UserBufferRead(0)],
        Effect::None,
    ),
    Entry("brk", "brk", &[], Effect::None),
    Entry("access", "access", &[UserBufferRead(0)], Effect::None),
    Entry("readlink", "readlink", &[UserBufferWrite(0)], Effect::None),
    Entry("mmap-file", "mmap", &[], Effect::None),
    Entry("mprotect-noflush", "mprotect", &[], Effect::None),
    // A replayed syscall no variant describes: a generic path (getpid's text and objects)
    // whose work is the call's recorded kernel time.
    Entry("syscall-recorded", "getpid", &[], Effect::None),
    // The rest of the small calls the footprints record (a replayed trace's mix).
    Entry(
        "rt_sigprocmask",
        "rt_sigprocmask",
        &[UserBufferRead(0)],
        Effect::None,
    ),
    Entry("getcwd", "getcwd", &[UserBufferWrite(0)], Effect::None),
    Entry("fcntl", "fcntl", &[], Effect::None),
    Entry("set_robust_list", "set_robust_list", &[], Effect::None),
    Entry("futex", "futex", &[UserBufferRead(0)], Effect::None),
    Entry("wait4", "wait4", &[UserBufferWrite(0)], Effect::None),
    // The variants a replayed trace tells apart by what the call touched (docs/design/
    // replay.md): a pipe's reads and writes, walks of one component and lookups that fail,
    // getdents64 (its work interpolated by the bytes it returns).
    Entry(
        "read-pipe-4k",
        "read-pipe-4k",
        &[UserBufferWrite(0)],
        Effect::None,
    ),
    Entry(
        "write-pipe-4k",
        "write-pipe-4k",
        &[UserBufferRead(0)],
        Effect::None,
    ),
    Entry("openat-1", "openat-1", &[UserBufferRead(0)], Effect::None),
    Entry(
        "newfstatat-1",
        "newfstatat-1",
        &[UserBufferWrite(0)],
        Effect::None,
    ),
    Entry(
        "openat-enoent",
        "openat-enoent",
        &[UserBufferRead(0)],
        Effect::None,
    ),
    Entry(
        "getdents64-small",
        "getdents64-small",
        &[UserBufferWrite(0)],
        Effect::None,
    ),
];

/// Bytes getdents64 returns for the footprint driver's small and large directories (8 and
/// 256 entries named f000.., each record 24 bytes with "." and ".."): the two points the
/// model interpolates a replayed getdents64 between (the driver checks them).
pub const GETDENTS_SMALL: u64 = 10 * 24;
pub const GETDENTS_LARGE: u64 = 258 * 24;

/// Syscall `name` as it runs on `paths` (the recording of the kernel it will run on: its
/// path ids are that recording's).
pub fn lookup(paths: &KernelPaths, name: &str) -> Option<SyscallSpec> {
    let e = TABLE.iter().find(|e| e.0 == name)?;
    let path = paths
        .id(e.1)
        .unwrap_or_else(|| panic!("syscall {name}: path {} is not in the footprints", e.1));
    Some(SyscallSpec {
        name: e.0,
        path,
        work_cycles: paths.get(path).work_cycles.unwrap_or(0.0),
        work_is_given: false,
        touches: e.2,
        effect: e.3,
    })
}

/// Whether the syscall table has `name` (every recording runs it: recording.rs checks that a
/// recording has every path).
pub fn is_known(name: &str) -> bool {
    TABLE.iter().any(|e| e.0 == name)
}

/// The syscalls a `--syscall` flag may name (the kernel-path variants a build's mix uses
/// internally are left out).
pub fn names() -> Vec<&'static str> {
    TABLE
        .iter()
        .map(|e| e.0)
        .filter(|n| {
            !n.contains("-file")
                && !n.contains("-noflush")
                && !n.contains("-empty")
                && !n.contains("-recorded")
        })
        .collect()
}

/// The measured work cycles of recorded path `name` (for a path no table entry runs as it
/// is: a replay interpolates between two of them).
pub fn path_work(paths: &KernelPaths, name: &str) -> Option<f64> {
    paths.get(paths.id(name)?).work_cycles
}
