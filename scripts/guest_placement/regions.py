#!/usr/bin/env python3
"""Where a freshly booted guest's kernel put what an ssdd run allocated, from the serial
log of run.sh: a summary by object and 2 MiB guest-physical region, or (--toml) the
placement file the model reads (workloads/ssdd-guest-placement.toml).

    python3 scripts/guest_placement/regions.py LOG [--toml]

Every address is guest-physical. Slab objects come from kmem_cache_alloc (ptr is a
direct-map address: nokaslr, no_hash_pointers), kernel stacks from the kprobes on
__vmap_pages_range_noflush (their struct pages) and copy_process's return (the new task and
its stack), user pages from the run's own /proc/self/pagemap lines, page-table pages from
mm_page_alloc's stack (pgd_alloc, __pud_alloc, __pmd_alloc, pte_alloc_one), the image's
ranges from /proc/iomem. copy_process allocates in the parent's context; each allocation
made under it goes to the child whose fork event follows it."""
import re
import sys
from collections import defaultdict

PAGE_OFFSET = 0xFFFF888000000000  # x86-64 4-level direct map (nokaslr)
VMEMMAP = 0xFFFFEA0000000000  # struct page array (nokaslr), 64 bytes each
# copy_process's slab objects on this kernel, by requested size (Debian 6.1, x86_64)
COPY_PROCESS_SIZES = {8392: "task", 2080: "sighand", 1152: "signal", 1096: "mm"}

# functions on mm_page_alloc's stack that allocate a page-table page
TABLE_ALLOCATORS = ("pgd_alloc", "__p4d_alloc", "__pud_alloc", "__pmd_alloc", "pte_alloc_one")

LINE = re.compile(r"^\s*(\S+)-(\d+)\s+\[\d+\]\s+\S+\s+[\d.]+: (\w+): (.*)$")


def fields(text):
    return dict(kv.split("=", 1) for kv in text.split() if "=" in kv)


def parse(path):
    run = {"children": defaultdict(list), "objects": defaultdict(dict), "user": defaultdict(dict),
           "percpu": {}, "unit": None, "hold": 0, "vmap": {}, "iomem": {},
           "tables": defaultdict(list), "kernel_tables": {}}
    pending = defaultdict(dict)  # parent pid -> objects of the child being forked
    page = None  # the mm_page_alloc whose stack trace follows: (pid, address, stack)
    in_run = False
    for line in open(path, errors="replace"):
        if line.startswith(" => "):
            if page is not None:
                page[2].append(line[4:].strip().split("+")[0])
            continue
        if page is not None and "<stack trace>" not in line:
            pid, addr, stack = page
            page = None
            if any(f in TABLE_ALLOCATORS for f in stack):
                if "copy_process" in stack:  # the child's tables, made by its parent's fork
                    pending[pid].setdefault("page_tables", []).append(addr)
                else:
                    run["tables"][pid].append(addr)
        m = re.match(r"^\s*([0-9a-f]+)-([0-9a-f]+) : Kernel (code|rodata|data|bss)$", line)
        if m:
            run["iomem"][m.group(3)] = (int(m.group(1), 16), int(m.group(2), 16))
            continue
        if line.startswith("placement-kernel-table:"):
            kind, _va, *tables = line.split()[1:]
            for level, t in enumerate(tables):
                found = run["kernel_tables"].setdefault(kind, [[], [], []])[level]
                if int(t, 16) not in found:
                    found.append(int(t, 16))
            continue
        if "placement-percpu:" in line:
            addr, _, name = line.split("placement-percpu:")[1].split()
            run["percpu"][name] = int(addr, 16)
            continue
        m = re.search(r"memblock_phys_free: \[0x([0-9a-f]+)-0x[0-9a-f]+\] pcpu_embed_first_chunk\+0x216", line)
        if m:  # the unused tail of CPU 0's 2 MiB unit is given back: the unit is its 2 MiB
            run["unit"] = int(m.group(1), 16) >> 21 << 21
            continue
        m = re.search(r"placement-run: hold=(\d+)", line)
        if m:
            run["hold"] = int(m.group(1))
            continue
        m = re.search(r"placement-user: pid=(\d+) (\w+) pfn=0x([0-9a-f]+)", line)
        if m:
            pid, what, pfn = int(m.group(1)), m.group(2), int(m.group(3), 16) << 12
            if what == "libc_text":  # shared frames, the same in every tracer
                run["user"][pid].setdefault("libc_text", []).append(pfn)
            else:
                run["user"][pid][what] = pfn
            continue
        m = LINE.match(line)
        if not m:
            continue
        comm, pid, event, rest = m.group(1), int(m.group(2)), m.group(3), m.group(4)
        if event == "kstack":  # every vmap is recorded: a stack may be mapped before the run
            f = fields(rest)
            run["vmap"][int(f["addr"], 16)] = [((int(f[f"p{i}"]) - VMEMMAP) // 64) << 12 for i in range(4)]
            continue
        if event == "tracing_mark_write":
            in_run = "placement: start" in rest
            continue
        if not in_run or comm != "ssdd_steps":
            continue
        f = fields(rest)
        if event == "mm_page_alloc":
            page = (pid, int(f["pfn"], 16) << 12, [])
        elif event == "kmem_cache_alloc":
            site = f["call_site"].split("+")[0]
            kind = COPY_PROCESS_SIZES.get(int(f["bytes_req"])) if site == "copy_process" else (
                "cred" if site == "prepare_creds" else None)
            if kind:
                pending[pid][kind] = int(f["ptr"], 16) - PAGE_OFFSET
        elif event == "forked":
            pending[pid]["task_check"] = int(f["task"], 16) - PAGE_OFFSET
            pending[pid]["stack_va"] = int(f["stack"])
        elif event == "sched_process_fork":
            child = int(f["child_pid"])
            run["children"][pid].append(child)
            run["objects"][child] = pending.pop(pid)
    return run


def processes(run):
    """The pairs in the model's order: (tracer pid, tracee pid), by fork order."""
    parents = [p for p, c in run["children"].items() if len(c) > 1]
    if len(parents) != 1:
        sys.exit(f"expected one ssdd main process forking the pairs, found {parents}")
    tracers = run["children"][parents[0]][run["hold"]:]
    pairs = []
    for t in tracers:
        tracee = run["children"].get(t, [])
        if len(tracee) != 1:
            sys.exit(f"tracer {t}: expected one tracee, found {tracee}")
        pairs.append((t, tracee[0]))
    return pairs


def task_pages(run, pid):
    o = run["objects"][pid]
    if o.get("task") != o.get("task_check"):
        sys.exit(f"pid {pid}: copy_process returned {o.get('task_check')}, the task_struct alloc was {o.get('task')}")
    stack = run["vmap"].get(o["stack_va"])
    if stack is None:
        sys.exit(f"pid {pid}: no vmap of its kernel stack {o['stack_va']:#x} in the trace")
    d = {k: o[k] for k in ("task", "signal", "sighand", "mm", "cred")}
    d["kstack"] = stack
    # Made at fork, then any the process faulted in itself.
    d["page_tables"] = o.get("page_tables", []) + run["tables"][pid]
    if not d["page_tables"]:
        sys.exit(f"pid {pid}: no page-table pages in the trace")
    return d


def toml_value(v):
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return f"{v:#x}"


def main():
    run = parse(sys.argv[1])
    pairs = processes(run)
    libc_text = run["user"][pairs[0][0]].get("libc_text", [])
    if run["unit"] is None or len(libc_text) != 4:
        sys.exit("expected the per-CPU unit (memblock=debug) and four libc text frames in the log")
    procs = []
    for tracer, tracee in pairs:
        t = task_pages(run, tracer)
        t.update({k: v for k, v in run["user"][tracer].items() if k not in ("text", "libc_text")})
        procs.append(("tracer", t))
        procs.append(("tracee", task_pages(run, tracee)))
    if "--toml" in sys.argv:
        print(f"ram_mib = {int(sys.argv[sys.argv.index('--toml') + 1])}")
        print(f"kernel_data = {run['iomem']['data'][0]:#x}")
        print(f"kernel_bss = {run['iomem']['bss'][0]:#x}")
        print(f"percpu_unit = {run['unit']:#x}")
        for name in ("current_task", "__preempt_count", "runqueues"):
            print(f"percpu_{name.strip('_')} = {run['percpu'][name]:#x}")
        print(f"user_text = {run['user'][pairs[0][0]]['text']:#x}")
        print(f"libc_text = {toml_value(libc_text)}")
        if set(run["kernel_tables"]) != {"image", "direct_map", "vmalloc"}:
            sys.exit(f"expected the monitor's walks of the image, direct map and vmalloc tables, found {sorted(run['kernel_tables'])}")
        print("\n[kernel_tables] # on the step's walks, below the PGD: PUDs, PMDs, PTE tables")
        for kind, levels in run["kernel_tables"].items():
            print(f"{kind} = {toml_value(levels)}")
        for role, d in procs:
            print(f"\n[[process]] # {role}")
            for k, v in d.items():
                print(f"{k} = {toml_value(v)}")
        return
    regions = defaultdict(set)
    for role, d in procs:
        for k, v in d.items():
            for pa in v if isinstance(v, list) else [v]:
                regions[pa >> 21].add(k)
    regions[run["unit"] >> 21].add("percpu")
    regions[run["user"][pairs[0][0]]["text"] >> 21].add("text")
    for pa in libc_text:
        regions[pa >> 21].add("libc_text")
    print(f"{len(pairs)} pairs: the step's objects lie in {len(regions)} 2 MiB regions")
    for r in sorted(regions):
        print(f"  {r * 2:>5} MiB: {', '.join(sorted(regions[r]))}")


main()
