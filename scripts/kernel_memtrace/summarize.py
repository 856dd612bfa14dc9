#!/usr/bin/env python3
"""Per path, the kernel data lines the memtrace guest saw each operation touch.

    python3 scripts/kernel_memtrace/summarize.py OUT_DIR [FILE.toml]

OUT_DIR is what scripts/kernel_memtrace/run.sh wrote: console.txt (the driver's windows and the
image's section symbols) and lines.txt (the plugin's reads and writes per window and line).
Each line a kernel instruction read or wrote in a window is classed by where it lies (the
image's sections, the direct map, vmalloc, vmemmap, cpu_entry_area, user memory), and per path:

- recurring: lines touched by at least half the operations of a window (the path's fixed
  data: its rodata, globals, per-CPU lines, its task's own lines); the median over its windows.
  Where the driver's loop marks its operations (marker.rs), the plugin counts the operations
  that touched each line; elsewhere a line counts when its accesses reach half the window's
  operations (so lines written many times by one operation can pass). A window's other path
  (exit, the IPI handlers), marked by the children and threads that run it, counts against
  the window's own operations: one exit per fork, one interrupt per mprotect or membarrier;
- other per op: the window's remaining lines divided by its operations (objects that change
  from one operation to the next: new slab objects, page tables, pages);
- reads and writes per operation.

It prints a table and, with FILE.toml, writes the measurement with the recurring rodata and
data lines of every path as offsets from the section's start.
"""
import collections
import functools
import statistics
import sys

RECURRING = 0.5  # share of a window's operations that touch a line for it to be every one's
OTHERS = 32768  # a window's other path is marked this many slots further (marker.rs)
STACK_BYTES = 16 << 10  # THREAD_SIZE; vmap'd stacks are THREAD_SIZE aligned (kernel/fork.c)

# Linux x86-64, 4-level paging, no KASLR (the guest boots with nokaslr):
# Documentation/arch/x86/x86_64/mm.rst.
FIXED_REGIONS = [
    (0x0000_0000_0000_0000, 0x0000_8000_0000_0000, "user"),
    (0xFFFF_8880_0000_0000, 0xFFFF_C880_0000_0000, "direct_map"),
    (0xFFFF_C900_0000_0000, 0xFFFF_E900_0000_0000, "vmalloc"),
    (0xFFFF_EA00_0000_0000, 0xFFFF_EB00_0000_0000, "vmemmap"),
    (0xFFFF_FE00_0000_0000, 0xFFFF_FF00_0000_0000, "cpu_entry_area"),
    (0xFFFF_FFFF_C000_0000, 0xFFFF_FFFF_FF00_0000, "modules"),
]
# Image sections by their kallsyms boundary symbols.
SECTIONS = [
    ("_text", "_etext", "text"),
    ("__start_rodata", "__end_rodata", "rodata"),
    ("_sdata", "_edata", "data"),
    ("__init_begin", "__init_end", "init"),
    ("__bss_start", "__bss_stop", "bss"),
]
REGIONS = ["rodata", "data", "bss", "init", "text", "direct_map", "vmalloc", "vmemmap",
           "cpu_entry_area", "user", "modules", "other"]


def parse_console(path):
    windows, syms, release, scale = {}, {}, "?", "?"
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("memtrace-win: "):
                # scenario_index scenario window_index repeat own others tid start end ops
                w = line.split()[1:]
                if len(w) != 10:
                    continue
                slot = 1 + int(w[0]) * 65536 + int(w[2])
                windows[slot] = {"scenario": w[1], "own": w[4], "ops": int(w[9])}
                # The children and threads that run the other path mark it themselves, one
                # operation per child or per interrupted turn of a spin (marker.rs); it ran
                # once per operation of the window's own path.
                if w[5] not in ("-", w[4]):
                    windows[slot + OTHERS] = {"scenario": w[1], "own": w[5], "ops": int(w[9]),
                                              "others": True}
            elif line.startswith("memtrace-sym: "):
                addr, _kind, name = line.split()[1:4]
                syms[name] = int(addr, 16)
            elif line.startswith("memtrace-release: "):
                release = line.split()[1]
            elif line.startswith("memtrace-scale: "):
                scale = line.split()[1]
    return windows, syms, {"release": release, "scale": scale}


def classifier(syms):
    sections = [(syms[a], syms[b], name) for a, b, name in SECTIONS if a in syms and b in syms]

    @functools.lru_cache(maxsize=None)  # each line is classed while counting and again per window
    def region(addr):
        for lo, hi, name in sections:
            if lo <= addr < hi:
                return name, lo
        for lo, hi, name in FIXED_REGIONS:
            if lo <= addr < hi:
                return name, lo
        return "other", 0

    return region


def summarize(out_dir):
    windows, syms, info = parse_console(f"{out_dir}/console.txt")
    region = classifier(syms)
    # slot -> {line address: accesses}; reads and writes per slot and region
    # slot -> {line address: operations that touched it, or accesses without ticks}
    lines = collections.defaultdict(collections.Counter)
    raw = collections.defaultdict(list)
    rw = collections.defaultdict(lambda: [0, 0])
    ticks = collections.Counter()
    with open(f"{out_dir}/lines.txt") as f:
        for row in f:
            fields = row.split()
            if fields[0] == "T":
                ticks[int(fields[1])] += int(fields[2])
                continue
            if fields[0] == "I":  # instruction counts: scripts/kernel_memtrace/branches.py
                continue
            slot, addr, reads, writes, ops = fields
            slot = int(slot)
            if slot in windows:
                raw[slot].append((int(addr, 16), int(reads), int(writes), int(ops)))
    for slot, rows in raw.items():
        for addr, reads, writes, ops in rows:
            lines[slot][addr] += ops if ticks[slot] else reads + writes
            r = rw[(slot, region(addr)[0])]
            r[0] += reads
            r[1] += writes
    paths = collections.defaultdict(list)
    for slot, w in windows.items():
        if w["own"] != "-" and w["ops"] > 0 and slot in lines:
            paths[w["own"]].append(slot)
    result = {}
    for path, slots in sorted(paths.items()):
        ops = sum(windows[s]["ops"] for s in slots)
        per_region = {r: {"recurring": [], "other": [], "reads": 0, "writes": 0} for r in REGIONS}
        recurring_sets = collections.defaultdict(collections.Counter)
        for s in slots:
            n = windows[s]["ops"] if windows[s].get("others") else ticks[s] or windows[s]["ops"]
            counts = collections.Counter()
            other = collections.Counter()
            for addr, k in lines[s].items():
                name, base = region(addr)
                if k >= RECURRING * n:
                    counts[name] += 1
                    if name in ("rodata", "data", "bss", "direct_map"):
                        recurring_sets[name][(addr - base) // 64] += 1
                    elif name == "vmalloc":
                        recurring_sets["stack"][(addr % STACK_BYTES) // 64] += 1
                else:
                    other[name] += 1
            for r in REGIONS:
                per_region[r]["recurring"].append(counts[r])
                per_region[r]["other"].append(other[r] / windows[s]["ops"])
                per_region[r]["reads"] += rw[(s, r)][0]
                per_region[r]["writes"] += rw[(s, r)][1]
        summary = {}
        for r, v in per_region.items():
            summary[r] = {
                "recurring": statistics.median(v["recurring"]),
                "other_per_op": statistics.mean(v["other"]),
                "reads_per_op": v["reads"] / ops,
                "writes_per_op": v["writes"] / ops,
            }
        # A section's recurring lines: those recurring in at least half the path's windows.
        offsets = {name: sorted(o for o, c in counter.items() if 2 * c >= len(slots))
                   for name, counter in recurring_sets.items()}
        result[path] = {"windows": len(slots), "ops": ops, "regions": summary, "offsets": offsets}
    return result, syms, info


def print_table(result):
    cols = ["rodata", "data", "bss", "direct_map", "vmalloc", "vmemmap", "cpu_entry_area", "user"]
    print("recurring lines per operation (touched at least every other operation), by region;")
    print("other: further distinct lines per operation; r/w: accesses per operation")
    head = f"{'path':22} {'ops':>6} " + " ".join(f"{c[:10]:>10}" for c in cols) + \
        f" {'other/op':>9} {'r/op':>8} {'w/op':>8}"
    print(head)
    print("-" * len(head))
    for path, p in result.items():
        reg = p["regions"]
        other = sum(v["other_per_op"] for v in reg.values())
        reads = sum(v["reads_per_op"] for v in reg.values())
        writes = sum(v["writes_per_op"] for v in reg.values())
        print(f"{path:22} {p['ops']:>6} " +
              " ".join(f"{reg[c]['recurring']:>10.0f}" for c in cols) +
              f" {other:>9.1f} {reads:>8.0f} {writes:>8.0f}")


def write_toml(result, syms, info, dest):
    with open(dest, "w") as f:
        f.write(f"""# Kernel data lines per footprint path, measured on Debian's {info['release']} kernel under
# qemu TCG by the memtrace plugin (scripts/kernel_memtrace/): every data access of kernel
# code on the driver's vCPU inside the driver's windows (docs/design/kernel-data.md).
# Regenerate, do not edit. Per path and region: `recurring` lines are touched by at least
# `recurring_share` of a window's operations (median over the path's windows);
# `other_per_op` are the window's further distinct lines per operation; reads and writes are
# accesses per operation. `rodata_lines`, `data_lines` and `bss_lines` list the recurring
# lines as line offsets from the section's start (a line recurring in at least half the
# path's windows); `direct_map_lines` the recurring direct-map lines as guest physical
# addresses / 64 (slab objects, per-CPU areas, the task: one guest, so a line two paths
# share is one object); `stack_lines` the recurring vmalloc lines as offsets / 64 within
# their 16 KiB (THREAD_SIZE-aligned) kernel stack. The guest runs huge pages only where
# asked for (THP madvise), as the recording host does. Children and threads of the driver
# that run a window's other path mark it themselves on whichever vCPU they run: a child's
# exit (from its return from fork to the next marker on its vCPU), an interrupt of a
# spinning thread (the IPI handlers), and an image of the execve chain (from its markers to
# the next image's: the execve, with the old mm's teardown and the new image's first
# faults), one operation each. signal-deliver runs from before the unblocking
# rt_sigprocmask (whose own lines it includes) to the handler's end, rt_sigreturn from there
# to the return; the traced child of the ptrace scenario, stopped at every instruction,
# marks ptrace-stop once per instruction (from its trap to the tracer's next operation).
# What the trace leaves out: accesses by other tasks on the driver's vCPU inside a window
# are counted (a forked child that runs there without marking, interrupts).
kernel_release = "{info['release']}"
scale = {info['scale']}
commands = [
  "cargo build --release -p kharden-cli",
  "sh scripts/kernel_memtrace/run.sh OUT {info['scale']}",
  "python3 scripts/kernel_memtrace/summarize.py OUT {dest}",
]
recurring_share = {RECURRING}

[sections]
""")
        for a, b, name in SECTIONS:
            if a in syms and b in syms:
                f.write(f'{name} = {{ start = "{syms[a]:#x}", bytes = {syms[b] - syms[a]} }}\n')
        for path, p in result.items():
            f.write(f'\n[paths."{path}"]\nwindows = {p["windows"]}\nops = {p["ops"]}\n')
            for name in ("rodata", "data", "bss", "direct_map", "stack"):
                f.write(f"{name}_lines = {p['offsets'].get(name, [])}\n")
            for r, v in p["regions"].items():
                if any(v.values()):
                    f.write(f'regions.{r} = {{ recurring = {v["recurring"]:g}, '
                            f'other_per_op = {v["other_per_op"]:.3f}, '
                            f'reads_per_op = {v["reads_per_op"]:.2f}, '
                            f'writes_per_op = {v["writes_per_op"]:.2f} }}\n')


def main(argv):
    if len(argv) not in (2, 3):
        sys.exit("usage: summarize.py OUT_DIR [FILE.toml]")
    result, syms, info = summarize(argv[1])
    if not result:
        sys.exit(f"summarize.py: {argv[1]}: no window with kernel accesses")
    print_table(result)
    if len(argv) == 3:
        write_toml(result, syms, info, argv[2])


if __name__ == "__main__":
    main(sys.argv)
