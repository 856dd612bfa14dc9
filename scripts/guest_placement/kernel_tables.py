"""After the traced run, walks the guest's kernel page tables through QEMU's monitor for
the addresses the ssdd step's kernel uses (the image's text, the direct map of the run's
task_structs and of CPU 0's run queue, the vmalloc'd kernel stacks) and prints the guest-
physical address of every table on those walks, then quits the VM. The kernel half's
tables are built at boot or on first use, before the trace starts, so the trace cannot
see them.
    python3 kernel_tables.py MONITOR_SOCKET LOG
Prints lines `placement-kernel-table: KIND VA TABLE...` (the PUD, PMD and PTE tables down
to the leaf) for regions.py."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from qemu_monitor import Monitor, wait_for  # noqa: E402

sock_path, log_path = sys.argv[1:3]
PAGE_OFFSET = 0xFFFF888000000000
ADDRESS = 0x000F_FFFF_FFFF_F000
text = wait_for(log_path, "=== end")
monitor = Monitor(sock_path)
cr3 = int(re.search(r"CR3=([0-9a-f]+)", monitor.command("info registers")).group(1), 16) & ADDRESS


def read(pa):
    return int(re.search(r":\s*0x([0-9a-f]+)", monitor.command(f"xp /1gx {pa:#x}")).group(1), 16)


def walk(va):
    """The tables below the PGD on va's walk, down to its leaf."""
    tables, table = [], cr3
    for shift in (39, 30, 21, 12):
        entry = read(table + ((va >> shift) & 511) * 8)
        if not entry & 1 or shift == 12 or (shift < 39 and entry & 0x80):
            return tables
        table = entry & ADDRESS
        tables.append(table)
    return tables


vas = [("image", 0xFFFFFFFF81000000)]
tasks = sorted(set(re.findall(r"forked: .*? task=(0x[0-9a-f]+)", text)))
vas += [("direct_map", int(a, 16)) for a in tasks]
# CPU 0's per-CPU unit (where memblock freed the embedding's spare), in the direct map.
unit = re.search(r"memblock_phys_free: \[0x([0-9a-f]+)-0x[0-9a-f]+\] pcpu_embed_first_chunk", text)
if unit:
    vas.append(("direct_map", PAGE_OFFSET + int(unit.group(1), 16)))
stacks = sorted(set(re.findall(r"kstack: .*? addr=(0x[0-9a-f]+)", text)))
vas += [("vmalloc", int(a, 16)) for a in stacks]
for kind, va in vas:
    print(f"placement-kernel-table: {kind} {va:#x} " + " ".join(f"{t:#x}" for t in walk(va)))
monitor.quit()
