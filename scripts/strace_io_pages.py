#!/usr/bin/env python3
"""Pages a compile job copies through read() and write(), from an strace of a kernel build.

    strace -f -qq -e trace=read,pread64,write,pwrite64,execve -e signal=none -o st.txt \\
        make -j2 kernel/ mm/
    python3 scripts/strace_io_pages.py st.txt --jobs 317

Sums the bytes each call returned for the compile job's programs (the ones and weights
scripts/kernel_time_split.py counts as the job's: cc1, as, gcc, objtool, fixdep, rm and half
of sh's), over 4096, divided by the jobs. A process is named by the last program it
executed (strace -f prints the pid first on every line).
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_time_split import JOB_COMMS  # noqa: E402

CALL = re.compile(r"^(\d+)\s+(\w+)\((.*)")
RESULT = re.compile(r"= (-?\d+)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("strace", help="strace -f output (- for stdin)")
    ap.add_argument("--jobs", type=float, required=True, help="compile jobs of the build")
    a = ap.parse_args()
    src = sys.stdin if a.strace == "-" else open(a.strace, errors="replace")
    program = {}
    pending = {}
    read = write = 0.0
    for n, line in enumerate(src, 1):
        resumed = re.match(r"^(\d+)\s+<\.\.\. (\w+) resumed>", line)
        if resumed:
            pid, call = resumed.groups()
            args = pending.pop(pid, "")
        else:
            m = CALL.match(line)
            if not m:
                continue
            pid, call, args = m.groups()
            if "<unfinished ...>" in line:
                pending[pid] = args
                continue
        if call == "execve":
            if "= -1" not in line:
                path = re.match(r'"([^"]*)"', args)
                if path:
                    program[pid] = os.path.basename(path.group(1))
            continue
        r = RESULT.search(line)
        if not r or int(r.group(1)) <= 0:
            continue
        w = JOB_COMMS.get(program.get(pid, ""), 0.0)
        if call in ("read", "pread64"):
            read += w * int(r.group(1))
        elif call in ("write", "pwrite64"):
            write += w * int(r.group(1))
    print(f"read_pages = {read / 4096 / a.jobs:.0f}")
    print(f"write_pages = {write / 4096 / a.jobs:.0f}")


if __name__ == "__main__":
    main()
