//! What a recorded syscall did, told apart by what it touched (the descriptor's kind, the
//! bytes it moved, the path's depth, whether the lookup failed), and the operation the
//! model runs for it: the recorded footprint path of that variant with its measured work
//! (docs/design/replay.md). A call no variant describes runs a generic path with the
//! kernel time the recording measured, less the recorder's own cost.

use crate::format::{FdKind, Target};
use kharden::kernel::paths::process::PageCacheFs;
use kharden::kernel::paths::syscall::{self, Effect, SyscallSpec, GETDENTS_LARGE, GETDENTS_SMALL};
use kharden::kernel::paths::table::KernelPaths;
use kharden::workload::program::Op;

/// Calls that run a path of the syscall table as they are (kernel/paths/syscall.rs's names).
pub const CALLS: &[&str] = &[
    "getpid",
    "getppid",
    "lseek",
    "getrusage",
    "rt_sigaction",
    "rt_sigprocmask",
    "getcwd",
    "fcntl",
    "set_robust_list",
    "futex",
    "brk",
    "close",
    "access",
    "readlink",
    "mprotect-noflush",
    "kill",
    "rt_sigreturn",
    "wait4",
    "newfstatat",
    "newfstatat-empty",
    "newfstatat-1",
    "openat-enoent",
    "mmap-file",
];

/// The table's depth of the `openat` path: the footprint driver opens
/// /tmp/kharden-footprint-PID/include/linux/sub/header.h by its absolute name.
pub const OPENAT_DEPTH: u16 = 6;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Variant {
    /// No variant describes it: a generic path whose work is the recorded kernel time.
    Recorded,
    /// A path of the table as it is: CALLS[i].
    Call(u8),
    ReadZero {
        bytes: u64,
    },
    WriteNull,
    /// read() or write() of a regular file's page-cache pages (`misses` pages allocated
    /// into the page cache during a read; `new_pages` during a write).
    ReadCache {
        tmpfs: bool,
        bytes: u64,
        misses: u32,
    },
    WriteCache {
        tmpfs: bool,
        bytes: u64,
        new_pages: u32,
    },
    ReadPipe {
        bytes: u64,
    },
    WritePipe {
        bytes: u64,
    },
    /// An open that walked `depth` components (0: not known).
    Open {
        depth: u16,
    },
    /// An open of a character device or FIFO.
    OpenDevice,
    Getdents {
        bytes: u64,
    },
    MmapAnon {
        pages: u64,
    },
    /// munmap, with the pages it freed (PageFree events inside it).
    Munmap {
        freed: u32,
    },
    /// Modelled by another operation: fork/clone/vfork (the child's start), execve (the
    /// exec), exit.
    Omitted,
}

/// What happened inside the call, from the events between its enter and exit.
#[derive(Debug, Clone, Copy, Default)]
pub struct Inside {
    pub page_cache_allocs: u32,
    pub pages_freed: u32,
}

/// An open that may create or truncate its file, which the footprint's open path (an
/// existing file opened to read) does not do: a new inode and dentry, or the file's cached
/// pages freed and a journal transaction. It costs what the recording measured.
fn creates_or_truncates(name: &str, args: &[u64; 6]) -> bool {
    const O_CREAT: u64 = 0o100;
    const O_TRUNC: u64 = 0o1000;
    let flags = match name {
        "open" => args[1],
        "openat" => args[2],
        "creat" => return true,
        _ => return false, // openat2's flags are behind a pointer
    };
    flags & (O_CREAT | O_TRUNC) != 0
}

fn call(name: &str) -> Variant {
    let i = CALLS
        .iter()
        .position(|&c| c == name)
        .expect("a name of CALLS");
    Variant::Call(i as u8)
}

const ENOENT: i64 = -2;
const ENOTDIR: i64 = -20;
const AT_FDCWD: i32 = -100;
const AT_EMPTY_PATH: u64 = 0x1000;
const MAP_ANONYMOUS: u64 = 0x20;

/// The variant of syscall `name` with `args`, its return value, its descriptor's kind, and
/// what happened inside it.
pub fn classify(name: &str, args: &[u64; 6], ret: i64, target: Target, inside: Inside) -> Variant {
    let lookup = matches!(
        name,
        "open"
            | "openat"
            | "openat2"
            | "creat"
            | "stat"
            | "lstat"
            | "newfstatat"
            | "statx"
            | "access"
            | "faccessat"
            | "faccessat2"
            | "readlink"
            | "readlinkat"
            | "execve"
            | "execveat"
    );
    if ret < 0 {
        return if lookup && (ret == ENOENT || ret == ENOTDIR) {
            call("openat-enoent")
        } else {
            Variant::Recorded
        };
    }
    let bytes = ret as u64;
    let tmpfs = target.kind == FdKind::Tmpfs;
    match name {
        "read" | "pread64" | "readv" | "preadv" | "preadv2" => match target.kind {
            FdKind::DevZero => Variant::ReadZero { bytes },
            FdKind::File | FdKind::Tmpfs => Variant::ReadCache {
                tmpfs,
                bytes,
                misses: inside.page_cache_allocs,
            },
            FdKind::Pipe => Variant::ReadPipe { bytes },
            _ => Variant::Recorded,
        },
        "write" | "pwrite64" | "writev" | "pwritev" | "pwritev2" => match target.kind {
            FdKind::DevNull => Variant::WriteNull,
            FdKind::File | FdKind::Tmpfs => Variant::WriteCache {
                tmpfs,
                bytes,
                new_pages: inside.page_cache_allocs,
            },
            FdKind::Pipe => Variant::WritePipe { bytes },
            _ => Variant::Recorded,
        },
        "open" | "openat" | "openat2" | "creat" => match target.kind {
            FdKind::DevZero | FdKind::DevNull | FdKind::Device | FdKind::Pipe => {
                Variant::OpenDevice
            }
            _ if creates_or_truncates(name, args) => Variant::Recorded,
            _ => Variant::Open {
                depth: target.depth,
            },
        },
        "close" => call("close"),
        "fstat" => call("newfstatat-empty"),
        "newfstatat" | "statx" => {
            let flags = if name == "statx" { args[2] } else { args[3] };
            if flags & AT_EMPTY_PATH != 0 {
                call("newfstatat-empty")
            } else if args[0] as i32 != AT_FDCWD && target.kind == FdKind::Dir {
                call("newfstatat-1")
            } else {
                call("newfstatat")
            }
        }
        "stat" | "lstat" => call("newfstatat"),
        "access" | "faccessat" | "faccessat2" => call("access"),
        "readlink" | "readlinkat" => call("readlink"),
        "getdents64" | "getdents" => Variant::Getdents { bytes },
        "mmap" if args[3] & MAP_ANONYMOUS != 0 => Variant::MmapAnon {
            pages: args[1].div_ceil(4096),
        },
        "mmap" => call("mmap-file"),
        "munmap" => Variant::Munmap {
            freed: inside.pages_freed,
        },
        "mprotect" => call("mprotect-noflush"),
        "wait4" | "waitid" => call("wait4"),
        "clone" | "clone3" | "fork" | "vfork" | "execve" | "execveat" | "exit" | "exit_group" => {
            Variant::Omitted
        }
        n => match CALLS.iter().position(|&c| c == n) {
            Some(i) => Variant::Call(i as u8),
            None => Variant::Recorded,
        },
    }
}

impl Variant {
    /// The op file's encoding: a code and two numbers.
    pub fn encode(self) -> (u8, u64, u32) {
        match self {
            Variant::Recorded => (0, 0, 0),
            Variant::Call(i) => (1, i as u64, 0),
            Variant::ReadZero { bytes } => (2, bytes, 0),
            Variant::WriteNull => (3, 0, 0),
            Variant::ReadCache {
                tmpfs,
                bytes,
                misses,
            } => (4 + tmpfs as u8, bytes, misses),
            Variant::WriteCache {
                tmpfs,
                bytes,
                new_pages,
            } => (6 + tmpfs as u8, bytes, new_pages),
            Variant::ReadPipe { bytes } => (8, bytes, 0),
            Variant::WritePipe { bytes } => (9, bytes, 0),
            Variant::Open { depth } => (10, depth as u64, 0),
            Variant::OpenDevice => (11, 0, 0),
            Variant::Getdents { bytes } => (12, bytes, 0),
            Variant::MmapAnon { pages } => (13, pages, 0),
            Variant::Munmap { freed } => (14, 0, freed),
            Variant::Omitted => (15, 0, 0),
        }
    }

    pub fn decode(code: u8, a: u64, b: u32) -> Option<Variant> {
        Some(match code {
            0 => Variant::Recorded,
            1 if (a as usize) < CALLS.len() => Variant::Call(a as u8),
            2 => Variant::ReadZero { bytes: a },
            3 => Variant::WriteNull,
            4 | 5 => Variant::ReadCache {
                tmpfs: code == 5,
                bytes: a,
                misses: b,
            },
            6 | 7 => Variant::WriteCache {
                tmpfs: code == 7,
                bytes: a,
                new_pages: b,
            },
            8 => Variant::ReadPipe { bytes: a },
            9 => Variant::WritePipe { bytes: a },
            10 => Variant::Open {
                depth: a.min(u16::MAX as u64) as u16,
            },
            11 => Variant::OpenDevice,
            12 => Variant::Getdents { bytes: a },
            13 => Variant::MmapAnon { pages: a },
            14 => Variant::Munmap { freed: b },
            15 => Variant::Omitted,
            _ => return None,
        })
    }

    /// The variant's name in a breakdown.
    pub fn name(self) -> String {
        match self {
            Variant::Recorded => "recorded time".into(),
            Variant::Call(i) => CALLS[i as usize].into(),
            Variant::ReadZero { .. } => "read /dev/zero".into(),
            Variant::WriteNull => "write /dev/null".into(),
            Variant::ReadCache { tmpfs, .. } => {
                format!("read {}", if tmpfs { "tmpfs" } else { "file" })
            }
            Variant::WriteCache { tmpfs, .. } => {
                format!("write {}", if tmpfs { "tmpfs" } else { "file" })
            }
            Variant::ReadPipe { .. } => "read pipe".into(),
            Variant::WritePipe { .. } => "write pipe".into(),
            Variant::Open { depth: 0 } => "openat".into(),
            Variant::Open { .. } => "openat by depth".into(),
            Variant::OpenDevice => "openat device".into(),
            Variant::Getdents { .. } => "getdents64".into(),
            Variant::MmapAnon { .. } => "mmap anon".into(),
            Variant::Munmap { .. } => "munmap".into(),
            Variant::Omitted => "fork/exec/exit".into(),
        }
    }
}

/// The table's spec `name` on `paths` (every recording has the table's paths).
fn spec(paths: &KernelPaths, name: &str) -> SyscallSpec {
    syscall::lookup(paths, name).unwrap_or_else(|| panic!("{name} is in the syscall table"))
}

/// `spec` with `work` cycles.
fn with_work(mut s: SyscallSpec, work: f64) -> SyscallSpec {
    s.work_cycles = work.max(0.0);
    s
}

/// Linear between (x0, y0) and (x1, y1) at x.
fn between(x0: f64, y0: f64, x1: f64, y1: f64, x: f64) -> f64 {
    y0 + (y1 - y0) * (x - x0) / (x1 - x0)
}

/// Cycles per byte a user copy adds: read of /dev/zero's 8 KiB against its 1 byte.
fn copy_cycles_per_byte(paths: &KernelPaths) -> f64 {
    (spec(paths, "read-8k").work_cycles - spec(paths, "read-1").work_cycles) / 8191.0
}

/// The operation the model runs on `paths` (the recording of the kernel it will run on) for
/// a call of `variant`, with `recorded_ns` of kernel time
/// measured (tracer removed), at `ghz` recorded cycles per ns; `effect` is its recorded
/// flush, which replaces the path's own effect (munmap's goes into its own).
///
/// A call whose recorded time exceeds its variant's work by more than `band_ns` (what the
/// recorder's cost is uncertain by) did more than the variant's loop does (an execve of a
/// dynamically linked program, an mmap that splits a mapping, a wait4 that reaps), and the
/// excess beyond the band is added to the path's work; within the band, the variant's
/// measured work stands (a short call's recorded time is mostly the recorder's). Opens
/// keep their variant's work: the recorder's watch of opens runs inside them. Without a
/// band (no measured recorder cost) the variants stand.
pub fn to_op(
    paths: &KernelPaths,
    variant: Variant,
    recorded_ns: f64,
    ghz: f64,
    effect: Option<Effect>,
    band_ns: Option<f64>,
) -> Option<Op> {
    let excess = |work: f64| match (variant, band_ns) {
        // /dev/zero and /dev/null do nothing the bytes do not say: time beyond their work
        // is the recorder's, left over when its per-event cost was measured low.
        (
            Variant::Open { .. }
            | Variant::OpenDevice
            | Variant::ReadZero { .. }
            | Variant::WriteNull,
            _,
        )
        | (_, None) => 0.0,
        (_, Some(band)) => (recorded_ns * ghz - work - band * ghz).max(0.0),
    };
    let syscall = |spec: SyscallSpec, effect: Option<Effect>| Op::Syscall {
        spec,
        count: 1,
        extra_cycles: excess(spec.work_cycles),
        effect,
    };
    Some(match variant {
        Variant::Omitted => return None,
        Variant::Recorded => syscall(
            with_work(spec(paths, "syscall-recorded"), recorded_ns * ghz),
            effect,
        ),
        Variant::Call(i) => syscall(spec(paths, CALLS[i as usize]), effect),
        Variant::ReadZero { bytes } => {
            let (one, eight) = (spec(paths, "read-1"), spec(paths, "read-8k"));
            let work = between(
                1.0,
                one.work_cycles,
                8192.0,
                eight.work_cycles,
                bytes as f64,
            );
            syscall(
                with_work(if bytes > 4096 { eight } else { one }, work),
                effect,
            )
        }
        Variant::WriteNull => syscall(spec(paths, "write-1"), effect),
        Variant::ReadCache {
            tmpfs,
            bytes,
            misses,
        } => {
            let pages = bytes.div_ceil(4096).min(u32::MAX as u64) as u32;
            Op::FileRead {
                fs: fs(tmpfs),
                pages,
                misses: misses.min(pages),
            }
        }
        Variant::WriteCache {
            tmpfs,
            bytes,
            new_pages,
        } => {
            let pages = bytes.div_ceil(4096).min(u32::MAX as u64) as u32;
            Op::FileWrite {
                fs: fs(tmpfs),
                pages,
                new_pages: new_pages.min(pages),
            }
        }
        Variant::ReadPipe { bytes } | Variant::WritePipe { bytes } => {
            let s = spec(
                paths,
                if matches!(variant, Variant::ReadPipe { .. }) {
                    "read-pipe-4k"
                } else {
                    "write-pipe-4k"
                },
            );
            let work = s.work_cycles + (bytes as f64 - 4096.0) * copy_cycles_per_byte(paths);
            syscall(with_work(s, work), effect)
        }
        Variant::Open { depth: 0 } => syscall(spec(paths, "openat"), effect),
        Variant::Open { depth } => {
            let (one, six) = (spec(paths, "openat-1"), spec(paths, "openat"));
            let d = OPENAT_DEPTH as f64;
            let work = between(1.0, one.work_cycles, d, six.work_cycles, depth as f64);
            let s = if depth <= OPENAT_DEPTH / 2 { one } else { six };
            syscall(with_work(s, work), effect)
        }
        Variant::OpenDevice => {
            let work = spec(paths, "open-close").work_cycles - spec(paths, "close").work_cycles;
            syscall(with_work(spec(paths, "open-close"), work), effect)
        }
        Variant::Getdents { bytes } => {
            let small = spec(paths, "getdents64-small");
            let large = syscall::path_work(paths, "getdents64-large").expect("recorded");
            let work = between(
                GETDENTS_SMALL as f64,
                small.work_cycles,
                GETDENTS_LARGE as f64,
                large,
                bytes as f64,
            );
            syscall(with_work(small, work), effect)
        }
        Variant::MmapAnon { pages } => syscall(
            spec(paths, "mmap"),
            Some(effect.unwrap_or(Effect::MmapAnon { pages })),
        ),
        Variant::Munmap { freed } => {
            let flush_pages = match effect {
                Some(Effect::FlushUserRange { pages }) => pages,
                _ => 0,
            };
            syscall(
                spec(paths, "munmap"),
                Some(Effect::Munmap {
                    flush_pages,
                    freed_pages: freed as u64,
                }),
            )
        }
    })
}

/// The cycles by which `recorded_ns` of a call exceed recorded path `path`'s work by more
/// than `band_ns` (0 without a band): see `to_op`.
pub fn beyond(
    paths: &KernelPaths,
    recorded_ns: f64,
    ghz: f64,
    path: &str,
    band_ns: Option<f64>,
) -> f64 {
    match (band_ns, syscall::path_work(paths, path)) {
        (Some(band), Some(work)) => (recorded_ns * ghz - work - band * ghz).max(0.0),
        _ => 0.0,
    }
}

fn fs(tmpfs: bool) -> PageCacheFs {
    if tmpfs {
        PageCacheFs::Tmpfs
    } else {
        PageCacheFs::Disk
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(kind: FdKind) -> Target {
        Target::of(kind)
    }

    /// Each syscall goes to the variant of what its descriptor referred to.
    #[test]
    fn reads_and_writes_go_by_descriptor_kind() {
        let none = Inside::default();
        let a = [0u64; 6];
        assert_eq!(
            classify("read", &a, 4096, t(FdKind::DevZero), none),
            Variant::ReadZero { bytes: 4096 }
        );
        assert_eq!(
            classify("write", &a, 4096, t(FdKind::DevNull), none),
            Variant::WriteNull
        );
        let cached = Inside {
            page_cache_allocs: 2,
            ..none
        };
        assert_eq!(
            classify("pread64", &a, 8192, t(FdKind::File), cached),
            Variant::ReadCache {
                tmpfs: false,
                bytes: 8192,
                misses: 2
            }
        );
        assert_eq!(
            classify("write", &a, 100, t(FdKind::Tmpfs), none),
            Variant::WriteCache {
                tmpfs: true,
                bytes: 100,
                new_pages: 0
            }
        );
        assert_eq!(
            classify("read", &a, 10, t(FdKind::Pipe), none),
            Variant::ReadPipe { bytes: 10 }
        );
        assert_eq!(
            classify("read", &a, 10, t(FdKind::Socket), none),
            Variant::Recorded
        );
        assert_eq!(
            classify("read", &a, 10, t(FdKind::Unknown), none),
            Variant::Recorded,
            "a descriptor of unknown kind keeps its recorded time"
        );
    }

    /// Path lookups: failed ones by ENOENT, stats by flag and base, opens by depth and kind.
    #[test]
    fn lookups_go_by_flags_base_and_result() {
        let none = Inside::default();
        let at = (-100i64) as u64;
        let name = |v: Variant| v.name();
        assert_eq!(
            name(classify(
                "openat",
                &[at, 1, 0, 0, 0, 0],
                -2,
                t(FdKind::Unknown),
                none
            )),
            "openat-enoent"
        );
        assert_eq!(
            name(classify(
                "execve",
                &[1, 2, 3, 0, 0, 0],
                -2,
                Target::default(),
                none
            )),
            "openat-enoent"
        );
        assert_eq!(
            classify("openat", &[at, 1, 0, 0, 0, 0], -13, Target::default(), none),
            Variant::Recorded,
            "EACCES"
        );
        assert_eq!(
            name(classify(
                "newfstatat",
                &[3, 1, 2, 0x1000, 0, 0],
                0,
                t(FdKind::File),
                none
            )),
            "newfstatat-empty"
        );
        assert_eq!(
            name(classify(
                "newfstatat",
                &[3, 1, 2, 0x100, 0, 0],
                0,
                t(FdKind::Dir),
                none
            )),
            "newfstatat-1"
        );
        assert_eq!(
            name(classify(
                "newfstatat",
                &[at, 1, 2, 0, 0, 0],
                0,
                Target::default(),
                none
            )),
            "newfstatat"
        );
        assert_eq!(
            name(classify(
                "fstat",
                &[3, 1, 0, 0, 0, 0],
                0,
                t(FdKind::File),
                none
            )),
            "newfstatat-empty"
        );
        assert_eq!(
            classify(
                "openat",
                &[at, 1, 0, 0, 0, 0],
                3,
                Target {
                    kind: FdKind::File,
                    depth: 4
                },
                none
            ),
            Variant::Open { depth: 4 }
        );
        assert_eq!(
            classify("openat", &[at, 1, 0, 0, 0, 0], 3, t(FdKind::DevNull), none),
            Variant::OpenDevice
        );
        // O_WRONLY|O_CREAT|O_TRUNC (a shell's `> file`) and creat(): the recorded time
        for (name, args) in [
            ("openat", [at, 1, 0o1101, 0o666, 0, 0]),
            ("creat", [1, 0o644, 0, 0, 0, 0]),
        ] {
            assert_eq!(
                classify(name, &args, 3, t(FdKind::File), none),
                Variant::Recorded,
                "{name}"
            );
        }
        assert_eq!(
            classify("clone3", &a0(), 1234, Target::default(), none),
            Variant::Omitted
        );
        assert_eq!(
            classify(
                "munmap",
                &a0(),
                0,
                Target::default(),
                Inside {
                    pages_freed: 5,
                    ..none
                }
            ),
            Variant::Munmap { freed: 5 }
        );
        assert_eq!(
            classify(
                "mmap",
                &[0, 10000, 3, 0x22, u64::MAX, 0],
                0x7f00_0000,
                Target::default(),
                none
            ),
            Variant::MmapAnon { pages: 3 }
        );
        assert_eq!(
            classify("ioctl", &a0(), 0, t(FdKind::Device), none),
            Variant::Recorded
        );
    }

    fn a0() -> [u64; 6] {
        [0; 6]
    }

    /// A call recorded longer than its variant's work by more than the band did more
    /// (the excess joins its work), except a device read or write, whose bytes say it all.
    #[test]
    fn only_calls_that_can_do_more_take_the_recorded_excess() {
        let committed = &kharden::kernel::paths::recording::Recording::committed().paths;
        let extra = |v: Variant| match to_op(committed, v, 10_000.0, 1.0, None, Some(100.0)) {
            Some(Op::Syscall { extra_cycles, .. }) => extra_cycles,
            other => panic!("{other:?}"),
        };
        assert!(extra(call("close")) > 0.0);
        assert_eq!(extra(Variant::ReadZero { bytes: 4096 }), 0.0);
        assert_eq!(extra(Variant::WriteNull), 0.0);
    }

    #[test]
    fn every_variant_encodes_and_decodes() {
        let all = [
            Variant::Recorded,
            Variant::Call(3),
            Variant::ReadZero { bytes: 7 },
            Variant::WriteNull,
            Variant::ReadCache {
                tmpfs: true,
                bytes: 9,
                misses: 2,
            },
            Variant::WriteCache {
                tmpfs: false,
                bytes: 9,
                new_pages: 1,
            },
            Variant::ReadPipe { bytes: 5 },
            Variant::WritePipe { bytes: 6 },
            Variant::Open { depth: 3 },
            Variant::OpenDevice,
            Variant::Getdents { bytes: 240 },
            Variant::MmapAnon { pages: 4 },
            Variant::Munmap { freed: 8 },
            Variant::Omitted,
        ];
        for v in all {
            let (c, a, b) = v.encode();
            assert_eq!(Variant::decode(c, a, b), Some(v));
        }
        assert_eq!(Variant::decode(1, CALLS.len() as u64, 0), None);
        assert_eq!(Variant::decode(16, 0, 0), None);
    }
}
