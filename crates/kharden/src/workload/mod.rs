//! Workloads: generators of what tasks do. Each drives the kernel model through the same
//! calls (user work, syscalls, faults).

pub mod bounds;
pub mod evict_fault;
pub mod fio;
pub mod kbuild;
pub mod kbuild_profile;
pub mod kbuild_run;
pub mod kernel_ops;
pub mod program;
pub mod run;
pub mod ssdd;
pub mod syscall_loop;

pub use syscall_loop::SyscallLoop;

/// The workloads' declared parameters.
pub use syscall_loop::PARAMS;

use crate::error::{Error, Result};

/// Names accepted by `--workload`.
pub const NAMES: &[(&str, &str)] = &[
    (
        "syscall-loop",
        "FreeBSD syscall_timing-style loop of one syscall (--syscall NAME)",
    ),
    (
        "kbuild",
        "make -jN of kernel compile jobs from the recorded profile (--jobs N)",
    ),
    (
        "ssdd",
        "rt-tests' ssdd in a KVM guest whose kernel toggles CR0.WP (--virt kvm --mmu M --kvm-variant V --guest-model path|kernel)",
    ),
    (
        "fio-randread",
        "fio --rw=randread --bs=4k on a tmpfs file through pread(), one process per job (--jobs N)",
    ),
    (
        "kernel-op",
        "one of seed 002's kernel operations, timed (--op fork-1|fork-1024|mmap-munmap|mmap-lock|open-close|kill|mount --caches hot|cold --node N)",
    ),
];

pub fn check_name(name: &str) -> Result<()> {
    if NAMES.iter().any(|(n, _)| *n == name) {
        Ok(())
    } else {
        let known: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
        Err(Error::new(format!(
            "--workload: unknown workload '{name}': expected one of {}",
            known.join(", ")
        )))
    }
}

/// The member of `all` that `name_of` calls `name`, or a one-line error listing every name
/// (`what` says what kind of thing was asked for).
pub(crate) fn by_name<T: Copy>(
    all: &[T],
    name_of: impl Fn(T) -> &'static str,
    name: &str,
    what: &str,
) -> Result<T> {
    all.iter()
        .copied()
        .find(|&o| name_of(o) == name)
        .ok_or_else(|| {
            let known: Vec<&str> = all.iter().map(|&o| name_of(o)).collect();
            Error::new(format!(
                "unknown {what} '{name}': expected one of {}",
                known.join(", ")
            ))
        })
}
