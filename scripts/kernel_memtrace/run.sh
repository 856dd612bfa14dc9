#!/bin/sh
# Measure which kernel data lines each footprint path reads and writes: Debian's 6.1 kernel
# booted under qemu (TCG) with the memtrace plugin (memtrace.c), the driver's scenarios run
# with window markers (crates/kharden-footprint/src/marker.rs). The guest is the ftrace
# guest's (scripts/kernel_ftrace/run.sh) with another /init and the plugin loaded.
#   sh scripts/kernel_memtrace/run.sh OUT_DIR [SCALE]
# (SCENARIOS="syscalls faults" runs only those; PLUGIN_ARGS=",lines=off" counts instructions
# only; KERNEL_ARGS adds to the guest kernel's command line.) Writes OUT_DIR/console.txt (the
# windows, `memtrace-win:`, and section symbols, `memtrace-sym:`) and OUT_DIR/lines.txt (the
# plugin's counts), then
#   python3 scripts/kernel_memtrace/summarize.py OUT_DIR
# or, for the instructions the speculation mitigations act on,
#   python3 scripts/kernel_memtrace/branches.py OUT_DIR
# Needs what the ftrace guest needs, and a C compiler.
set -eu
out=$1
scale=${2:-0.002}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
cc -O2 -Wall -shared -fPIC -o "$out/memtrace.so" "$here/memtrace.c"
GUEST_INIT="$here/init.sh" RECORD_PREFIX="memtrace-win:" \
    QEMU_ARGS="-plugin $out/memtrace.so,out=$out/lines.txt${PLUGIN_ARGS:-}" \
    sh "$here/../kernel_ftrace/run.sh" "$out" "$scale"
wc -l "$out/lines.txt"
