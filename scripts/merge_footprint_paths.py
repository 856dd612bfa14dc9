#!/usr/bin/env python3
"""Adds the paths of one footprint recording (NEW) to another (BASE), written to OUT.

    python3 scripts/merge_footprint_paths.py BASE NEW OUT

Both must be recordings of the same kernel source built twice (the host boots a new build
of 6.18.44 now and then: the same functions with the same sizes, laid out at other
offsets), so NEW's text is moved into BASE's layout:

- a function BASE lists is moved to BASE's offset (its size must agree: else this stops);
- a function BASE does not list keeps NEW's offset unless that overlaps a function BASE
  lists or one already placed, in which case it moves to the nearest free 64-byte-aligned
  place at or after it (an ESTIMATE of where BASE's build put it: its lines are its own,
  shared with no other function, as in the kernel);
- each sampled line moves with the function it lies in.

BASE's paths and everything else of BASE are kept byte for byte; NEW's paths are appended
and a line saying how they were merged is added to BASE's `commands`. Nothing else
changes, so a model that does not run NEW's paths gives the same figures with OUT as with
BASE.
"""

import re
import sys

FUNC = re.compile(r'\["([^"]+)", (\d+), (\d+), (\d+), (\d+)\]')


def paths(text):
    """The [[path]] blocks of a recording: (name, block text)."""
    blocks = text.split("[[path]]")[1:]
    return [(re.search(r'name = "([^"]+)"', b).group(1), "[[path]]" + b) for b in blocks]


def main(base_file, new_file, out_file):
    base = open(base_file).read()
    new = open(new_file).read()
    known = {}
    for _, block in paths(base):
        for m in FUNC.finditer(block):
            known[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    taken = sorted(known.values())
    base_names = {n for n, _ in paths(base)}
    placed = {}

    def free(offset, size):
        return all(o + s <= offset or offset + size <= o for o, s in taken)

    def place(name, offset, size):
        if name in known:
            o, s = known[name]
            if s != size:
                sys.exit(f"{name}: {size} bytes in {new_file}, {s} in {base_file}: not the same source")
            return o
        if name not in placed:
            at = offset
            while not free(at, size):
                at = (at // 64 + 1) * 64
            taken.append((at, size))
            placed[name] = at
        return placed[name]

    moved = 0
    appended = []
    for name, block in paths(new):
        if name in base_names:
            sys.exit(f"{name} is already in {base_file}")
        funcs = [(m.group(1), int(m.group(2)), int(m.group(3))) for m in FUNC.finditer(block)]
        where = {f: place(f, o, s) for f, o, s in funcs}
        moved += sum(1 for f, o, _ in funcs if where[f] != o)

        def func_line(m):
            f = m.group(1)
            return f'["{f}", {where[f]}, {m.group(3)}, {m.group(4)}, {m.group(5)}]'

        block = FUNC.sub(func_line, block)

        def move_line(line):
            byte = line * 64
            for f, o, s in funcs:
                if o - 63 <= byte < o + s:
                    return (where[f] + max(byte - o, 0)) // 64
            sys.exit(f"{name}: sampled line {line} lies in none of its functions")

        def lines(m):
            nums = [int(x) for x in re.findall(r"\d+", m.group(1))]
            moved_lines = sorted({move_line(x) for x in nums})
            rows = [", ".join(str(x) for x in moved_lines[i : i + 16]) for i in range(0, len(moved_lines), 16)]
            return "sampled_lines = [\n" + "".join(f"  {r},\n" for r in rows) + "]"

        block = re.sub(r"sampled_lines = \[(.*?)\]", lines, block, flags=re.S)
        appended.append(block)

    release_new = re.search(r'release = "([^"]+)"', new).group(1)
    release_base = re.search(r'release = "([^"]+)"', base).group(1)
    invocation = re.search(r'commands = \[\n  "([^"]*)"', new).group(1)
    note = (
        f"paths {', '.join(n for n, _ in paths(new))} recorded on {release_new} by '{invocation}' "
        f"and merged by scripts/merge_footprint_paths.py into this {release_base} recording: "
        f"functions this file lists moved to its offsets, the {len(placed)} it does not list kept "
        f"at their {release_new} offsets or the nearest free place after"
    )
    start = base.index("commands = [\n")
    end = base.index("\n]\n", start)
    out = base[:end] + f'\n  "{note}",' + base[end:]
    if not out.endswith("\n"):
        out += "\n"
    out = out.rstrip("\n") + "\n\n" + "\n".join(b.rstrip("\n") + "\n" for b in appended)
    open(out_file, "w").write(out)
    print(f"{len(appended)} paths appended; {moved} function placements moved, {len(placed)} functions placed anew")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
