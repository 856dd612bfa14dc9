//! What tasks do: a closed set of operations, produced one at a time by each task's program.
//! Every workload (generators, trace replay) speaks this language to the runner.

use crate::kernel::paths::entry::UserL1Lines;
use crate::kernel::paths::process::PageCacheFs;
use crate::kernel::paths::syscall::{Effect, SyscallSpec};
use crate::sim::Pcg32;

/// A task's program: the operations it does, one at a time (a make, a compile job's
/// process, a replayed trace's task).
pub trait Program {
    /// The next operation; `rng` is the run's, for programs that make random choices.
    fn next(&mut self, rng: &mut Pcg32) -> Op;
    /// The task's name (its command).
    fn name(&self) -> &str;
}

impl std::fmt::Debug for dyn Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Program({})", self.name())
    }
}

#[derive(Debug)]
pub enum Op {
    /// User-mode computation of `cycles`, touching `touches` pages of the heap at random
    /// (plus its text and stack).
    User {
        cycles: f64,
        touches: u32,
        /// The L1 lines the user code brings in meanwhile, displacing the kernel's.
        l1_lines: UserL1Lines,
    },
    /// First touches of `n` new heap pages: anonymous page faults.
    AnonFaults(u32),
    /// `n` read faults on file mappings served from the page cache.
    FileFaults(u32),
    /// `n` reads of anonymous pages not yet mapped (the zero page).
    ZeroPageFaults(u32),
    /// `n` writes to private pages mapped read-only: copy-on-write faults.
    CowFaults(u32),
    /// An operation whose kernel part did `cycles` more than the model's path for it: a
    /// replayed execve of a dynamically linked program, whose recording measured more than
    /// the footprints' execve of a minimal static one. The work is charged when the
    /// operation returns, as kernel time.
    WithKernelWork {
        op: Box<Op>,
        cycles: f64,
    },
    /// An operation that happened before the simulation began (make's first jobs and the
    /// heaps of tasks that start mid-life): it changes state (mappings, allocations,
    /// flushes) but takes no simulated time, so a short warm-up does not have to cover a
    /// start-up that a steady-state build never sees.
    History(Box<Op>),
    /// read() of file data: `pages` copied out, `misses` of them first allocated in the page cache.
    FileRead {
        fs: PageCacheFs,
        pages: u32,
        misses: u32,
    },
    /// write() of `pages` pages (object files, temporaries), `new_pages` of them newly
    /// allocated in the page cache.
    FileWrite {
        fs: PageCacheFs,
        pages: u32,
        new_pages: u32,
    },
    /// pread() of 4 KiB at page `page` of file `file` (Kernel::pread).
    Pread {
        file: u32,
        page: u32,
    },
    /// Any other system call from the table, `count` times, each with `extra_cycles` of
    /// kernel work beyond the table's path (a replayed syscall carries its measured work here).
    Syscall {
        spec: SyscallSpec,
        count: u32,
        extra_cycles: f64,
        /// What each call does instead of the table's effect, when the workload knows better
        /// (a replayed munmap's recorded TLB flush).
        effect: Option<Effect>,
    },
    /// fork() a child that runs `program`.
    Fork(Box<dyn Program>),
    /// vfork() (posix_spawn) a child that runs `program`, which it starts with an exec: how
    /// make, sh and gcc start every process of a compile job (raw_syscalls census of the
    /// profile's build: clone3 with CLONE_VFORK from make, vfork from sh and gcc).
    Vfork(Box<dyn Program>),
    /// clone(CLONE_VM | CLONE_THREAD): a thread of this task's process that runs `program`.
    /// Nobody waits for it; the process's memory goes when its last thread exits.
    SpawnThread(Box<dyn Program>),

    /// execve() a new image.
    Exec,
    /// wait() for one child to exit (blocks while none has).
    WaitChild,
    Exit,
}

impl Op {
    /// The operation's name in a breakdown of kernel time: the syscall's name (without the
    /// table's variant suffix: "mmap-file" is mmap), the fault's kind, or what the kernel does.
    pub fn label(&self) -> &'static str {
        match self {
            Op::User { .. } => "interrupts",
            Op::AnonFaults(_) => "fault-anon",
            Op::FileFaults(_) => "fault-file",
            // do_anonymous_page's: the recorded kernel time split counts it there too.
            Op::ZeroPageFaults(_) => "fault-anon",
            Op::CowFaults(_) => "fault-cow",
            Op::History(op) => op.label(),
            Op::WithKernelWork { op, .. } => op.label(),
            Op::FileRead { .. } => "read",
            Op::FileWrite { .. } => "write",
            Op::Pread { .. } => "pread64",
            Op::Syscall { spec, .. } => spec.name.split('-').next().unwrap_or(spec.name),
            Op::Fork(_) | Op::Vfork(_) | Op::SpawnThread(_) => "fork",
            Op::Exec => "execve",
            Op::WaitChild => "wait4",
            Op::Exit => "exit",
        }
    }
}
