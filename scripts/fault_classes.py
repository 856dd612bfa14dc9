#!/usr/bin/env python3
"""The compile job's page faults by kind, from the fault tracepoint and the mappings.

Reads the `perf script --show-mmap-events --show-task-events -F comm,pid,tid,event,trace`
output of

    perf record -e exceptions:page_fault_user -d -m 16M -- make -j2 kernel/ mm/

and replays every process's mappings (MMAP2 events, inherited at fork, dropped at exec) to
tell what each fault of the job's processes was, by the mapping its address falls in and
its error code (bit 0 present, bit 1 write, bit 4 instruction fetch):

- file-read: a read or fetch of a file page not yet mapped; the kernel maps it and the
  other pages of its 16-page window (fault-around, mm/memory.c do_fault_around: the window
  aligned to 16 pages, clipped to the VMA and the page table) that are not mapped yet.
  The build's files are all in the page cache, so every page of the window is mapped;
  the script replays that to count the pages each file fault maps.
- file-cow: a write to a private file page not yet mapped (do_cow_fault: a new anonymous
  page, the file page copied into it).
- anon: a write to an anonymous page not yet mapped (do_anonymous_page: a zeroed page).
- zero-page: a read of an anonymous page not yet mapped (do_anonymous_page maps the shared
  zero page; nothing is allocated).
- write-protect: a write to a mapped page (copy-on-write after fork, a zero page, a file
  page mapped by fault-around: do_wp_page, which copies it into a new anonymous page).
- special: [vdso], [vvar] and other pseudo-files, and reads of mapped pages (spurious
  faults, PROT_NONE).

Addresses in no recorded mapping (the brk heap, which no MMAP2 event reports, and regions
moved by mremap) count as anonymous. Munmap is not recorded: a later mapping over the same
range replaces the old one and unmaps its pages.
"""
import collections
import re

from kbuild_job import JOB_COMMS, open_script, per_job_arguments

FAULT_AROUND_PAGES = 16      # mm/memory.c: fault_around_pages, 64 KiB by default
PTRS_PER_PTE = 512
KINDS = ["file-read", "file-cow", "anon", "zero-page", "write-protect", "special"]

MMAP2 = re.compile(r"PERF_RECORD_MMAP2 (\d+)/\d+: \[0x([0-9a-f]+)\(0x([0-9a-f]+)\) @ "
                   r"[^\]]*\]: (\S+) (.*)$")
FORK = re.compile(r"PERF_RECORD_FORK\((\d+):(\d+)\):\((\d+):(\d+)\)")
EXEC = re.compile(r"PERF_RECORD_COMM exec: .*:(\d+)/\d+")
FAULT = re.compile(r"^\s*(\S+)\s+(\d+)/\d+\s+exceptions:page_fault_user: address=0x([0-9a-f]+) "
                   r"ip=0x[0-9a-f]+ error_code=0x([0-9a-f]+)")


class Mapping:
    __slots__ = ("start", "end", "name")

    def __init__(self, start, length, name):
        self.start, self.end, self.name = start, start + length, name

    def kind(self):
        if self.name.startswith("/") and not self.name.startswith("//anon"):
            return "file"
        if self.name.startswith("[") and self.name not in ("[stack]", "[heap]"):
            return "special"
        return "anon"


class Process:
    """A process's mappings (newest first) and the user pages its page tables map."""

    def __init__(self, maps=None, mapped=None):
        self.maps = list(maps or [])
        self.mapped = set(mapped or ())

    def add(self, m):
        first, last = m.start >> 12, (m.end - 1) >> 12
        if last - first < 4 * len(self.mapped):
            self.mapped.difference_update(range(first, last + 1))
        else:
            self.mapped = {p for p in self.mapped if p < first or p > last}
        self.maps.insert(0, m)

    def find(self, addr):
        for m in self.maps:
            if m.start <= addr < m.end:
                return m
        return None


def fault_around(m, addr, mapped):
    """The pages a file read fault at `addr` maps: its 16-page window in the VMA and page
    table, less those already mapped (mm/memory.c do_fault_around, filemap_map_pages)."""
    page = addr >> 12
    pte_off = page % PTRS_PER_PTE
    vma_off = page - (m.start >> 12)
    vma_pages = (m.end - m.start) >> 12
    start = max(pte_off - pte_off % FAULT_AROUND_PAGES, pte_off - min(pte_off, vma_off))
    end = min(start + FAULT_AROUND_PAGES, PTRS_PER_PTE, pte_off + vma_pages - vma_off)
    base = page - pte_off
    return [base + i for i in range(start, end) if base + i not in mapped]


def classify(m, error, addr, mapped):
    """The fault's kind and the pages it maps."""
    page = addr >> 12
    present, write = error & 1, error & 2
    kind = m.kind() if m else "anon"
    if kind == "special":
        return "special", [page]
    if present:
        return ("write-protect" if write else "special"), []
    if kind == "file":
        if write:
            return "file-cow", [page]
        return "file-read", fault_around(m, addr, mapped)
    return ("anon" if write else "zero-page"), [page]


def replay(lines):
    """Per comm: fault counts by kind, and pages mapped by file-read faults."""
    procs = collections.defaultdict(Process)
    counts = collections.defaultdict(collections.Counter)
    for line in lines:
        f = FAULT.match(line)
        if f:
            comm, pid, addr, error = f.group(1), int(f.group(2)), int(f.group(3), 16), int(f.group(4), 16)
            p = procs[pid]
            kind, pages = classify(p.find(addr), error, addr, p.mapped)
            p.mapped.update(pages)
            counts[comm][kind] += 1
            if kind == "file-read":
                counts[comm]["file-read-pages"] += len(pages)
            continue
        mm = MMAP2.search(line)
        if mm:
            pid = int(mm.group(1))
            start, length = int(mm.group(2), 16), int(mm.group(3), 16)
            procs[pid].add(Mapping(start, length, mm.group(5).strip()))
            continue
        fk = FORK.search(line)
        if fk:
            child, parent = int(fk.group(1)), int(fk.group(3))
            if child != parent:
                p = procs[parent]
                procs[child] = Process(p.maps, p.mapped)
            continue
        ex = EXEC.search(line)
        if ex:
            procs[int(ex.group(1))] = Process()
    return counts


def main():
    a = per_job_arguments(__doc__).parse_args()
    counts = replay(open_script(a.script))
    job = collections.Counter()
    print(f"{'comm':10} " + " ".join(f"{k:>13}" for k in KINDS) + "  pages/file-read")
    for comm in sorted(counts, key=lambda c: -sum(counts[c][k] for k in KINDS)):
        c = counts[comm]
        reads = c["file-read"]
        per = c["file-read-pages"] / reads if reads else 0.0
        mark = f" x{JOB_COMMS[comm]:g}" if comm in JOB_COMMS else " (not the job's)"
        print(f"{comm:10} " + " ".join(f"{c[k]:>13}" for k in KINDS) + f"  {per:15.2f}{mark}")
        if comm in JOB_COMMS:
            for k in KINDS + ["file-read-pages"]:
                job[k] += c[k] * JOB_COMMS[comm]
    print(f"\n# per compile job ({a.jobs:g} jobs), the job's processes weighted as above")
    for k in KINDS:
        print(f"{k} = {job[k] / a.jobs:.2f}")
    total = sum(job[k] for k in KINDS)
    print(f"all = {total / a.jobs:.2f}")
    if job["file-read"]:
        print(f"file_read_pages_per_fault = {job['file-read-pages'] / job['file-read']:.2f}")


if __name__ == "__main__":
    main()
