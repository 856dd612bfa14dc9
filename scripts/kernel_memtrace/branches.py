#!/usr/bin/env python3
"""Per path, the kernel instructions the speculation mitigations act on, per operation.

    python3 scripts/kernel_memtrace/branches.py OUT_DIR [FTRACE.toml [RECORDING.toml CYCLES]]
    python3 scripts/kernel_memtrace/branches.py --write RECORDING.toml OUT_DIR FTRACE.toml MITIGATIONS

OUT_DIR is what scripts/kernel_memtrace/run.sh wrote with PLUGIN_ARGS=",lines=off" (the
plugin's `I` lines: returns, indirect calls and jumps, direct calls, LFENCEs and SWAPGS run in
each window). Per path it prints the median over its windows of each count divided by the
window's operations. Run it on a guest booted with `mitigations=off` (KERNEL_ARGS): retpoline
call sites are then patched back to indirect calls and return thunks to RETs, so RET counts
the kernel's returns and CALL* its indirect calls.

With FTRACE.toml (kernels/linux-6.1.0-47-amd64-ftrace.toml) it also prints the returns the
recording's 6.18 kernel is estimated to run: the guest's less the calls, per operation, of the
traced functions 6.18 has no symbol for (its `recording_kernel.absent`: inlined, renamed or
removed there). With RECORDING.toml (kernels/linux-6.18.44-fc-v669.toml) and CYCLES (what one
Safe RET return costs, scripts/mitigation_cost.c), it prints the share of each path's recorded
latency those returns would cost at that rate. docs/design/footprints.md section 5 uses them.

With --write it puts each path's estimated 6.18 returns and its indirect calls per operation
into the recording (`returns`, `indirect_calls` before its `data`) and MITIGATIONS (the
recording host's, comma-separated: retpoline,safe-ret) into its [kernel] table. Left out:
paths counted only in other paths' windows (exit, the IPI handlers, ptrace-stop: one run per
operation is not assured) and NOT_COMPARABLE, whose window holds more than its latency.
"""
import collections
import statistics
import sys
import tomllib

from summarize import parse_console

CLASSES = ["ret", "call_ind", "jmp_ind", "call", "lfence", "swapgs"]
# execve's window runs the new image up to its first marker: more returns than its latency
# could hold at Safe RET's cost alone.
NOT_COMPARABLE = {"execve"}


def per_path(out_dir, with_own=False):
    """{path: [median per operation of each of CLASSES]} from a run's output (and, with
    with_own, the paths counted in windows of their own)."""
    windows, _syms, _meta = parse_console(f"{out_dir}/console.txt")
    counts = {}
    with open(f"{out_dir}/lines.txt") as f:
        for line in f:
            fields = line.split()
            if fields[0] == "I":
                counts[int(fields[1])] = [int(x) for x in fields[2:]]
    paths = collections.defaultdict(list)
    own = set()
    for slot, w in windows.items():
        c = counts.get(slot)
        if c is None or w["ops"] <= 0 or w["own"] == "-":
            continue
        paths[w["own"]].append([x / w["ops"] for x in c])
        if not w.get("others"):
            own.add(w["own"])
    medians = {p: [statistics.median(col) for col in zip(*rows)] for p, rows in paths.items()}
    return (medians, own) if with_own else medians


def absent_calls(ftrace_toml):
    """{path: calls per operation of the traced functions the recording kernel lacks}."""
    with open(ftrace_toml, "rb") as f:
        t = tomllib.load(f)
    absent = set(t["recording_kernel"]["absent"])
    return {
        p["name"]: sum(c for name, _off, _size, c in p["functions"]
                       if name.split(".")[0] in absent) / p["ops"]
        for p in t["path"]
    }


def latency_cycles(recording_toml):
    """{path: recorded latency (low percentile) in recording-host cycles}."""
    with open(recording_toml, "rb") as f:
        t = tomllib.load(f)
    ghz = t["kernel"]["host_ghz"]
    return {p["name"]: p["latency_ns"][0] * ghz for p in t["path"] if p.get("latency_ns")}


def write(recording, out_dir, ftrace, mitigations):
    counts, own = per_path(out_dir, with_own=True)
    gone = absent_calls(ftrace)
    with open(recording) as f:
        lines = f.read().split("\n")
    out, path = [], None
    for line in lines:
        if line.startswith(("returns = ", "indirect_calls = ", "speculation_mitigations = ",
                            "# per operation, counted on Debian's 6.1",
                            "# what the recording host's kernel ran on every path")):
            continue
        if line.startswith("name = ") and out and out[-1] == "[[path]]":
            path = line.split('"')[1]
        if line.startswith("# ESTIMATE from the source: the kernel objects") and path:
            if path in counts and path in own and path in gone and path not in NOT_COMPARABLE:
                c = counts[path]
                out.append("# per operation, counted on Debian's 6.1 (docs/design/footprints.md section 5)")
                out.append(f"returns = {c[0] - gone[path]:.1f}")
                out.append(f"indirect_calls = {c[1]:.1f}")
        if line == "[objects]":
            # The last key of [kernel], above the comments that open [objects].
            held = []
            while out and (out[-1] == "" or out[-1].startswith("#")):
                held.insert(0, out.pop())
            names = ", ".join(f'"{m}"' for m in mitigations.split(","))
            out.append("# what the recording host's kernel ran on every path (its /sys/devices/system/cpu/vulnerabilities)")
            out.append(f"speculation_mitigations = [{names}]")
            out.extend(held)
        out.append(line)
    with open(recording, "w") as f:
        f.write("\n".join(out))


def main(argv):
    if len(argv) == 6 and argv[1] == "--write":
        return write(*argv[2:])
    if len(argv) not in (2, 3, 5):
        sys.exit("usage: branches.py OUT_DIR [FTRACE.toml [RECORDING.toml CYCLES]]")
    counts = per_path(argv[1])
    gone = absent_calls(argv[2]) if len(argv) >= 3 else None
    latency = latency_cycles(argv[3]) if len(argv) == 5 else None
    cycles = float(argv[4]) if len(argv) == 5 else None
    head = f"{'path':<22}" + "".join(f"{c:>9}" for c in CLASSES)
    head += f"{'ret 6.18':>10}" if gone is not None else ""
    head += f"{'latency':>10}{'safe-ret':>10}" if latency is not None else ""
    print(head)
    for p in sorted(counts):
        row = f"{p:<22}" + "".join(f"{x:9.1f}" for x in counts[p])
        ret_618 = counts[p][0] - gone[p] if gone is not None and p in gone else None
        if gone is not None:
            row += f"{ret_618:10.1f}" if ret_618 is not None else f"{'-':>10}"
        if latency is not None:
            lat = latency.get(p)
            share = f"{100 * ret_618 * cycles / lat:9.0f}%" if lat and ret_618 is not None else f"{'-':>10}"
            row += (f"{lat:10.0f}" if lat else f"{'-':>10}") + share
        print(row)
    if latency is not None:
        print(f"latency: the recording's low-percentile latency in host cycles; safe-ret: the "
              f"6.18 returns at {cycles:g} cycles each, as a share of it")


if __name__ == "__main__":
    main(sys.argv)
