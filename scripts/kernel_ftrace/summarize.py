"""Turns the ftrace guest's console (scripts/kernel_ftrace/run.sh) into a footprint file of
the functions each path runs on the traced kernel.
    python3 summarize.py OUT_DIR TRACED_TOML [SAMPLED_TOML]
OUT_DIR/console.txt holds `ftrace-fn: SCENARIO PATH CONTEXT FUNCTION CALLS`,
`ftrace-ops: SCENARIO OWN OTHERS OPS`, `ftrace-sym: ADDRESS TYPE NAME` and
`ftrace-traceable: NAME` records. Writes
TRACED_TOML; with SAMPLED_TOML (kernels/linux-6.18.*.toml), also which of its functions the
traced kernel lacks or cannot trace, and which traced functions its kernel lacks (from this
host's /proc/kallsyms), for `kharden kernel footprint compare`."""
import json
import os
import sys
import tomllib

# The contexts a path's own work runs in (as crates/kharden-footprint/src/record.rs keeps
# them): the interrupt paths are their handlers, every other path its task's own code.
CONTEXTS = {
    "timer-tick": ("hardirq", "softirq"),
    "ipi-tlb-flush": ("hardirq",),
    "ipi-membarrier": ("hardirq",),
}
# An interrupt path's operations are its handler's runs (the driver's windows count the
# spinner's gaps, which under TCG are mostly the emulation's own).
HANDLER = {"timer-tick": "hrtimer_interrupt"}
# Functions the tracer itself calls for every event it records (the trace clock's read).
TRACER_OWN = {"read_tsc", "read_hpet", "native_sched_clock"}


def base_name(name):
    """A function's name without GCC's clone suffixes (.isra.0, .constprop.0, .part.0, .cold)."""
    return name.split(".")[0]


def read_console(path):
    calls, ops, beside, syms, info, traceable = {}, {}, {}, [], {}, set()
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        if line.startswith("ftrace-fn: "):
            _, scenario, p, ctx, fn, n = line.split()
            if ctx in CONTEXTS.get(p, ("task",)) and fn not in TRACER_OWN:
                calls.setdefault(p, {}).setdefault(fn, 0)
                calls[p][fn] += int(n)
        elif line.startswith("ftrace-ops: "):
            _, scenario, own, others, n = line.split()
            if own != "-":
                ops[own] = ops.get(own, 0) + int(n)
            if others not in ("-", own):
                beside[others] = max(beside.get(others, 0), int(n))
        elif line.startswith("ftrace-traceable: "):
            traceable.add(base_name(line.split()[1]))
        elif line.startswith("ftrace-sym: "):
            _, addr, kind, name = line.split()[:4]
            syms.append((int(addr, 16), name))
        elif line.startswith(("ftrace-release: ", "ftrace-version: ", "ftrace-scenario: ",
                              "ftrace-error: ", "ftrace-scale: ")):
            k, v = line.split(": ", 1)
            info.setdefault(k, []).append(v)
    # A path that only ran beside others (a child's exit, an IPI handler) did one operation
    # per operation of the windows it ran beside (the largest such group: fork's and
    # wait4's windows share the children's exits).
    for p, n in beside.items():
        ops.setdefault(p, n)
    for p, fn in HANDLER.items():
        ops[p] = calls.get(p, {}).get(fn, 0)
    return calls, ops, syms, info, traceable


def symbol_table(syms):
    """name -> (offset from _text, size to the next symbol)."""
    syms.sort()
    text = next(a for a, n in syms if n == "_text")
    etext = next(a for a, n in syms if n == "_etext")
    # Aliases share an address (__do_sys_getppid, __x64_sys_getppid): each runs to the next
    # distinct address.
    starts = sorted({a for a, _ in syms})
    following = dict(zip(starts, starts[1:]))
    table = {}
    for a, n in syms:
        if text <= a < etext and a in following:
            table.setdefault(n, (a - text, following[a] - a))
    return table, etext - text


def main():
    out_dir, traced_toml = sys.argv[1:3]
    sampled, recording_kernel = None, None
    if len(sys.argv) > 3:
        with open(sys.argv[3], "rb") as f:
            recording = tomllib.load(f)
        sampled = {p["name"]: p for p in recording["path"]}
        recording_kernel = recording["kernel"]["release"]
    calls, ops, syms, info, traceable = read_console(f"{out_dir}/console.txt")
    table, text_bytes = symbol_table(syms)
    errors = info.get("ftrace-error", [])
    if errors:
        sys.exit(f"summarize.py: the guest reported: {errors}")
    release = info["ftrace-release"][0]
    if "ftrace-scale" not in info:
        sys.exit("summarize.py: the console has no ftrace-scale line (run.sh's guest prints it)")
    scale = info["ftrace-scale"][0]
    w = open(traced_toml, "w")
    w.write(
        "# Kernel functions each footprint path runs on Debian's 6.1 kernel: ftrace's function\n"
        "# tracer under qemu (TCG) while the driver scenarios ran (scripts/kernel_ftrace/;\n"
        "# docs/design/footprints.md section 3). Complete for the code the tracer can hook; lib/ and\n"
        "# arch/x86/lib (built without the hooks) and notrace or noinstr functions (the entry\n"
        "# code, the scheduler's core) cannot appear. Sizes run to the next symbol (padding\n"
        "# included). Regenerate, do not edit.\n\n"
        "[kernel]\n"
        f'release = "{release}"\n'
        f'version = "{info["ftrace-version"][0]}"\n'
        f"text_bytes = {text_bytes}\n"
        'config_source = "/boot/config-6.1.0-47-amd64 (Debian\'s linux-image-6.1.0-47-amd64)"\n'
        "commands = [\n"
        '  "cargo build --release -p kharden-cli",\n'
        f'  "bash scripts/kernel_ftrace/run.sh OUT {scale}",\n'
        f'  "python3 scripts/kernel_ftrace/summarize.py OUT {" ".join(sys.argv[2:])}",\n'
        "]\n"
        f"scenarios = {json.dumps(info.get('ftrace-scenario', []))}\n"
    )
    # Which traced functions the recording's kernel has no symbol for (renamed, inlined or
    # removed since): read from this host's /proc/kallsyms when it runs that kernel version
    # (the same upstream release; the build suffix may differ).
    host = os.uname().release
    if recording_kernel and host.split("-")[0] == recording_kernel.split("-")[0]:
        present = {base_name(l.split()[2]) for l in open("/proc/kallsyms")
                   if l.split()[1] in "tT" and "[" not in l}
        traced = {base_name(fn) for p in calls for fn in calls[p] if fn in table}
        absent = sorted(traced - present)
        w.write(
            "\n# Traced functions (base names) the sampled recording's kernel has no text symbol\n"
            f"# for (/proc/kallsyms of {host} on the recording host): renamed, inlined or removed.\n"
            f'[recording_kernel]\nrelease = "{recording_kernel}"\nsymbols_from = "{host}"\n'
            f"absent = {json.dumps(absent)}\n"
        )
    # The recording's sampled functions as this kernel has them: no text symbol (new or
    # renamed since), or a symbol the tracer cannot hook (lib/ and arch/x86/lib are built
    # without its hooks; notrace and noinstr functions).
    if sampled:
        names = {base_name(f[0]) for p in sampled.values() for f in p["functions"] if f[3] > 0}
        here = {base_name(n) for _, n in syms}
        w.write(
            "\n# The sampled recording's functions (base names) that this kernel lacks, and those\n"
            "# it has but the tracer cannot hook (available_filter_functions).\n"
            f"[recording_functions]\nabsent = {json.dumps(sorted(names - here))}\n"
            f"untraceable = {json.dumps(sorted((names & here) - traceable))}\n"
        )
    for p in sorted(calls):
        fns = sorted(
            (table[fn][0], table[fn][1], fn, c) for fn, c in calls[p].items() if fn in table
        )
        w.write(f'\n[[path]]\nname = "{p}"\n')
        w.write(f"ops = {ops.get(p, 0)}\n")
        w.write(f"contexts = {json.dumps(list(CONTEXTS.get(p, ('task',))))}\n")
        w.write("# [name, offset from _text, size, calls]\nfunctions = [\n")
        for off, size, fn, c in fns:
            w.write(f'  ["{fn}", {off}, {size}, {c}],\n')
        w.write("]\n")
    w.close()
    print(f"{traced_toml}: {len(calls)} paths of {release}; compare them with the recording: "
          f"kharden kernel footprint compare --traced {traced_toml}")


main()
