"""How the booted kernel maps its image: for each section of the image (bounds from
/proc/kallsyms in console.txt), the bytes mapped by 2 MiB and by 4 KiB pages (tlb.txt, QEMU's
`info tlb`), and the flags of those mappings.
    python3 summarize.py OUT_DIR"""
import collections
import re
import sys

out = sys.argv[1]
symbols = {}
for line in open(f"{out}/console.txt", errors="replace"):
    m = re.search(r"text-mapping-symbol: ([0-9a-f]+) \S (\S+)", line)
    if m:
        symbols[m.group(2)] = int(m.group(1), 16)
    elif line.startswith("text-mapping-"):
        print(line.strip())
if "page tables isolation: enabled" not in open(f"{out}/console.txt", errors="replace").read():
    print("PTI is off in this boot")

# info tlb: "VA: PA FLAGS", flags X(NX) G P(PSE) D A C T U W.
leaves = []
for line in open(f"{out}/tlb.txt"):
    m = re.match(r"([0-9a-f]+): ([0-9a-f]+) (\S+)", line)
    if m:
        leaves.append((int(m.group(1), 16), m.group(3)))
leaves.sort()


def leaf_size(va, flags):
    # A PSE leaf in the kernel image's range is a 2 MiB page (1 GiB ones are direct map).
    if "P" in flags:
        return 1 << 30 if va < 0xFFFF_FFFF_8000_0000 else 1 << 21
    return 1 << 12


sections = [
    ("text", "_text", "_etext"),
    ("rodata", "__start_rodata", "__end_rodata"),
    ("data", "_sdata", "_edata"),
    ("bss", "__bss_start", "__bss_stop"),
]
print(f"{'section':8} {'start':>18} {'bytes':>10}  {'in 2 MiB pages':>15}  {'in 4 KiB pages':>15}  flags")
for name, lo_sym, hi_sym in sections:
    if lo_sym not in symbols or hi_sym not in symbols:
        print(f"{name}: bounds not found")
        continue
    lo, hi = symbols[lo_sym], symbols[hi_sym]
    by_size = collections.Counter()
    flags_seen = collections.Counter()
    for va, flags in leaves:
        size = leaf_size(va, flags)
        overlap = min(hi, va + size) - max(lo, va)
        if overlap > 0:
            by_size[size] += overlap
            flags_seen[flags.replace("P", "").replace("D", "").replace("A", "")] += overlap
    flags_text = ", ".join(f"{f} {b / (hi - lo):.0%}" for f, b in flags_seen.most_common())
    print(
        f"{name:8} {lo:#18x} {hi - lo:10}  {by_size[1 << 21]:15}  {by_size[1 << 12]:15}  {flags_text}"
    )

# The cpu_entry_area (its own PGD slot): shared by the user and kernel tables under PTI.
cea = [flags for va, flags in leaves if 0xFFFF_FE00_0000_0000 <= va < 0xFFFF_FE80_0000_0000]
global_cea = sum("G" in f[:2] for f in cea)
print(f"cpu_entry_area: {len(cea)} pages, {global_cea} global")
