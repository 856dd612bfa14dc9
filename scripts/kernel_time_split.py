#!/usr/bin/env python3
"""Where a recorded compile job's kernel time goes, from perf's cpu-clock call chains.

Reads `perf script -F comm,ip,sym` output of `perf record -e cpu-clock -g` and classifies
every kernel sample of the compile job's processes by the operation it belongs to (the
outermost recognisable kernel frame: a syscall, a page fault by type, an interrupt),
then prints the shares as the TOML table workloads/kbuild-job.toml keeps.

Page-fault samples taken before the fault's type is known (exception entry, VMA lookup,
handle_mm_fault's common part) are shared out between anonymous and file faults in
proportion to the job's fault counts (--anon-faults, --file-faults), since that part is
paid once per fault whatever its type.

cpu-clock samples are deferred while interrupts are off, so time in interrupts-off code
lands on the instruction that turns them back on: still in the right operation, which is
all this split needs.
"""
import argparse
import collections
import sys

from kbuild_job import JOB_COMMS

# Kernel functions that name a syscall when no __x64_sys_* frame is on the stack
# (x64_sys_call inlines the small ones).
SYSCALL_FRAMES = [
    ("ksys_read", "read"),
    ("ksys_pread64", "read"),
    ("ksys_write", "write"),
    ("ksys_pwrite64", "write"),
    ("ksys_mmap_pgoff", "mmap"),
    ("vm_mmap_pgoff", "mmap"),
    ("kernel_wait4", "wait4"),
    ("do_exit", "exit"),
]
SYSCALL_ALIASES = {
    "pread64": "read", "pwrite64": "write", "exit_group": "exit", "vfork": "fork",
    "clone": "fork", "clone3": "fork",
}
KEEP = {"read", "write", "openat", "close", "newfstatat", "mmap", "mprotect", "munmap",
        "brk", "access", "readlink", "lseek", "rt_sigaction", "execve", "exit", "fork", "wait4"}

ANON = {"do_anonymous_page", "do_wp_page", "wp_page_copy"}
FILE = {"filemap_map_pages", "do_read_fault", "filemap_fault", "do_fault"}


def samples(lines):
    """(comm, [kernel frames, innermost first]) per sample."""
    comm, frames = None, []
    for line in lines:
        if not line.strip():
            if comm is not None:
                yield comm, frames
            comm, frames = None, []
        elif not line[0].isspace():
            comm, frames = line.split()[0], []
        else:
            parts = line.split(None, 1)
            if len(parts) == 2 and parts[0].startswith("ffffffff"):
                frames.append(parts[1].strip())
    if comm is not None:
        yield comm, frames


def classify(frames):
    if "asm_exc_page_fault" in frames:
        if ANON & set(frames):
            return "fault-anon"
        if FILE & set(frames):
            return "fault-file"
        return "fault-common"
    for f in reversed(frames):
        if f.startswith("__x64_sys_") or f.startswith("__do_sys_"):
            name = f.split("_sys_", 1)[1]
            name = SYSCALL_ALIASES.get(name, name)
            return name if name in KEEP else "other-syscalls"
    for frame, name in SYSCALL_FRAMES:
        if frame in frames:
            return name
    outer = frames[-1]
    if outer.startswith("asm_sysvec") or outer.startswith("asm_common_interrupt"):
        return "interrupts"
    if outer in ("ret_from_fork", "ret_from_fork_asm"):
        return "fork"
    if outer.startswith("entry_SYSCALL"):
        return "syscall-entry"
    return "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("script", help="perf script -F comm,ip,sym output (- for stdin)")
    ap.add_argument("--anon-faults", type=float, required=True)
    ap.add_argument("--file-faults", type=float, required=True)
    ap.add_argument("--jobs", type=float,
                    help="also print user and system seconds per job: the build's compile "
                         "jobs as the workload profile counts them (cc-option probes included)")
    ap.add_argument("--freq", type=float, default=4999, help="perf record -F (samples per second)")
    a = ap.parse_args()
    src = sys.stdin if a.script == "-" else open(a.script)
    counts = collections.Counter()
    user = 0.0
    for comm, frames in samples(src):
        if comm not in JOB_COMMS:
            continue
        if frames:
            counts[classify(frames)] += JOB_COMMS[comm]
        else:
            user += JOB_COMMS[comm]
    common = counts.pop("fault-common", 0)
    anon_share = a.anon_faults / (a.anon_faults + a.file_faults)
    counts["fault-anon"] += common * anon_share
    counts["fault-file"] += common * (1 - anon_share)
    total = sum(counts.values())
    names = ", ".join(f"{c} x{w:g}" if w != 1 else c for c, w in sorted(JOB_COMMS.items()))
    print(f"# {total:.0f} weighted kernel samples of {names}")
    if a.jobs:
        print(f"user_seconds = {user / a.freq / a.jobs:.4f}")
        print(f"system_seconds = {total / a.freq / a.jobs:.4f}")
    for name, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f'"{name}" = {n / total:.4f}')


if __name__ == "__main__":
    main()
