#!/bin/sh
# Record which kernel functions each footprint path runs on Debian's 6.1 kernel, booted under
# qemu (TCG), with ftrace's function tracer: a complete list of the traceable code, where the
# host's perf recording (kharden kernel record-footprint) samples. The guest runs the same
# driver scenarios (`kharden kernel drive`) at a small scale, traces the driver and its
# children (set_ftrace_pid, function-fork) on the CLOCK_MONOTONIC clock the driver's windows
# use, and reduces the trace in the guest to (path, context, function, calls).
#   bash scripts/kernel_ftrace/run.sh OUT_DIR [SCALE]
# (SCENARIOS="syscalls faults" traces only those; about 11 minutes for all on 2 cores.)
# Writes OUT_DIR/console.txt (the reduced records, prefixed `ftrace-fn:`, and the image's text
# symbols from /proc/kallsyms, prefixed `ftrace-sym:`), then
#   python3 scripts/kernel_ftrace/summarize.py OUT_DIR kernels/linux-6.1.0-ftrace.toml
# Needs qemu-system-x86, linux-image-6.1.0-*-amd64, busybox-static and a release build of
# kharden (cargo build --release -p kharden-cli).
# Other guests reuse it (scripts/kernel_memtrace/run.sh): GUEST_INIT names another /init,
# QEMU_ARGS adds arguments to qemu's command line, KERNEL_ARGS to the guest kernel's,
# RECORD_PREFIX names the records to count.
# GUEST_TIMEOUT (seconds, default 3600) ends a guest that has not powered off by then (exit
# status 124): a TCG guest has been seen to stop making progress without a soft-lockup report
# (with MTTCG, before thread=single below).
set -eu
out=$1
scale=${2:-0.002}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
kernel=$(ls /boot/vmlinuz-6.1.0-*-amd64 | head -n1)
kharden=$repo/target/release/kharden
[ -x "$kharden" ] || { echo "run.sh: build kharden first: cargo build --release -p kharden-cli" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out" "$work/root/bin" "$work/root/proc" "$work/root/sys" "$work/root/dev" "$work/root/tmp"
cp /bin/busybox "$work/root/bin/busybox"
strip -o "$work/root/bin/kharden" "$kharden"
# The driver's shared libraries, at the paths its loader looks for them.
for lib in $(ldd "$kharden" | grep -o '/[^ ]*'); do
    mkdir -p "$work/root$(dirname "$lib")"
    cp -L "$lib" "$work/root$lib"
done
# The execve scenario builds its static exec_chain with `cc`, which the guest lacks: build it
# here with the driver's flags (with window markers too, for the memtrace guest), and give
# the guest a `cc` that hands over the build its flags ask for.
chain_src=$repo/crates/kharden-footprint/src/exec_chain.c
cc $("$kharden" kernel exec-chain-flags) -o "$work/root/exec_chain" "$chain_src"
cc $("$kharden" kernel exec-chain-flags --markers) -o "$work/root/exec_chain_markers" "$chain_src"
cat > "$work/root/bin/cc" <<'SHIM'
#!/bin/sh
# The prebuilt exec_chain (run.sh) its flags ask for, copied to the -o path the driver names.
build=/exec_chain
case "$*" in *-DMARKER_BYTES=*) build=/exec_chain_markers ;; esac
while [ "$1" != -o ]; do shift; done
cp "$build" "$2"
SHIM
chmod +x "$work/root/bin/cc"
cp "${GUEST_INIT:-$here/init.sh}" "$work/root/init"
cp "$here/reduce.awk" "$work/root/reduce.awk"
echo "$scale" > "$work/root/scale"
echo "${SCENARIOS:-syscalls mmap files small faults process execve switch ptrace ipi tick signals mount mmap-locked}" > "$work/root/scenarios"
chmod +x "$work/root/init"
(cd "$work/root" && find . | cpio -o -H newc 2>/dev/null | gzip -1) > "$work/initrd.gz"
# Two CPUs: the IPI and ptrace scenarios pin a thread to the second. Both run in one host
# thread (thread=single): with a thread per vCPU (MTTCG, qemu 7.2) switching the function
# tracer on hung the guest for good, both CPUs idle and stuck, in 1 of 8 boots that switched
# it 5 times each; round-robin vCPUs ran 20 such boots without a hang, booting as fast.
timeout "${GUEST_TIMEOUT:-3600}" qemu-system-x86_64 -accel tcg,thread=single -cpu max,la57=off -m 3072 -smp 2 -kernel "$kernel" \
    -initrd "$work/initrd.gz" -append "console=ttyS0 nokaslr quiet panic=-1 clocksource=tsc tsc=reliable ${KERNEL_ARGS:-}" \
    -display none -serial "file:$out/console.txt" -no-reboot ${QEMU_ARGS:-} &
qemu=$!
# A TCG guest on a busy host has been seen to hang for good ("soft lockup - CPU#0 stuck for
# 1252s"); the watchdog repeats its report with a growing figure, so one over 300 s ends the
# run instead of the hour's timeout. Shorter reports are left alone: under TCG they pass.
while kill -0 "$qemu" 2>/dev/null; do
    sleep 5
    if grep -Eq 'soft lockup - CPU#[0-9]+ stuck for ([3-9][0-9]{2}|[0-9]{4,})s' "$out/console.txt" 2>/dev/null; then
        kill "$qemu"
        echo "run.sh: the guest hung (a soft lockup of over 300 s in $out/console.txt)" >&2
        exit 1
    fi
done
wait "$qemu"
grep -c "^${RECORD_PREFIX:-ftrace-fn:}" "$out/console.txt" | sed "s|^|$kernel: records in $out/console.txt: |"
