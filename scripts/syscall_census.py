#!/usr/bin/env python3
"""The compile job's system calls per job, by number, from the raw syscall tracepoint.

Reads the `perf script -F comm,event,trace` output of

    perf record -e raw_syscalls:sys_enter -- make -j2 kernel/ mm/

and counts the calls of the job's processes (weighted as scripts/kernel_time_split.py
weighs them) per compile job. Two calls are told apart by their arguments:
newfstatat with AT_EMPTY_PATH in its flags (glibc's fstat, which Linux 6.11 and later
serve without a path walk) is `newfstatat-empty`, and clone3, clone and vfork are listed
with the process starts, which say whether the build forks or vforks.
"""
import collections
import re

from kbuild_job import JOB_COMMS, open_script, per_job_arguments

AT_EMPTY_PATH = 0x1000
# x86-64 numbers (arch/x86/entry/syscalls/syscall_64.tbl) of the calls a compile job makes.
NAMES = {0: "read", 1: "write", 3: "close", 4: "stat", 5: "fstat", 6: "lstat", 8: "lseek",
         9: "mmap", 10: "mprotect", 11: "munmap", 12: "brk", 13: "rt_sigaction",
         14: "rt_sigprocmask", 16: "ioctl", 17: "pread64", 18: "pwrite64", 21: "access",
         32: "dup", 33: "dup2", 39: "getpid", 56: "clone", 57: "fork", 58: "vfork",
         59: "execve", 61: "wait4", 72: "fcntl", 79: "getcwd", 89: "readlink", 102: "getuid",
         107: "geteuid", 110: "getppid", 158: "arch_prctl", 218: "set_tid_address",
         231: "exit_group", 257: "openat", 262: "newfstatat", 273: "set_robust_list",
         293: "pipe2", 302: "prlimit64", 318: "getrandom", 332: "statx", 334: "rseq",
         435: "clone3"}
STARTS = ("fork", "vfork", "clone", "clone3")
ENTER = re.compile(r"^\s*(\S+)\s+raw_syscalls:sys_enter: NR (\d+) \(([^)]*)\)")


def census(lines):
    """Per comm: calls by name."""
    counts = collections.defaultdict(collections.Counter)
    for line in lines:
        m = ENTER.match(line)
        if not m:
            continue
        comm, nr, args = m.group(1), int(m.group(2)), m.group(3).split(", ")
        name = NAMES.get(nr, str(nr))
        if name == "newfstatat" and int(args[3], 16) & AT_EMPTY_PATH:
            name = "newfstatat-empty"
        counts[comm][name] += 1
    return counts


def main():
    ap = per_job_arguments(__doc__)
    ap.add_argument("--top", type=int, default=25, help="calls to list")
    a = ap.parse_args()
    counts = census(open_script(a.script))
    job = collections.Counter()
    for comm, c in counts.items():
        for name, n in c.items():
            job[name] += n * JOB_COMMS.get(comm, 0.0)
    total = sum(job.values())
    print(f"# per compile job ({a.jobs:g} jobs): {total / a.jobs:.1f} calls")
    print(f"{'syscall':18} {'per job':>9} {'share':>7}")
    for name, n in job.most_common(a.top):
        print(f"{name:18} {n / a.jobs:9.2f} {n / total:7.4f}")
    print("\n# process starts, every process (make's and the job's)")
    for comm in sorted(counts):
        starts = {s: counts[comm][s] for s in STARTS if counts[comm][s]}
        if starts:
            print(f"{comm:16} " + ", ".join(f"{s} {n}" for s, n in starts.items()))


if __name__ == "__main__":
    main()
