#!/usr/bin/env bash
# The compile job's user-code L1 miss rates (workloads/kbuild-job.toml,
# user_l1i_lines_per_kcycle and user_l1d_lines_per_kcycle): cc1 compiling mm/filemap.c of
# Debian's linux-source-6.1 (x86_64 defconfig), under cachegrind with 32 KiB 8-way L1s,
# against the same compile's native user time at the recording host's clock.
#   apt-get install linux-source-6.1 valgrind
#   bash scripts/user_l1_rates.sh [KERNEL_TREE] [HOST_GHZ]
set -euo pipefail
tree=${1:-/tmp/linux-source-6.1}
ghz=${2:-2.596}
if [ ! -d "$tree" ]; then
    mkdir -p "$(dirname "$tree")"
    tar -C "$(dirname "$tree")" -xJf /usr/src/linux-source-6.1.tar.xz
fi
cd "$tree"
[ -f .config ] || make -s defconfig
make -s -j"$(nproc)" prepare
rm -f mm/filemap.o
# The compile command kbuild runs, with -S instead of -c: cc1 alone does the work.
cmd=$(make V=1 mm/filemap.o 2>&1 | grep -E '^ *gcc .*-c -o mm/filemap.o' | head -1 |
    sed 's/^ *//; s/ ; .*//; s/ -c -o mm\/filemap.o / -S -o \/tmp\/filemap.s /')
user=$( { /usr/bin/time -f '%U' bash -c "$cmd" >/dev/null; } 2>&1 | tail -1)
out=$(mktemp -d)
valgrind --tool=cachegrind --cache-sim=yes --trace-children=yes \
    --I1=32768,8,64 --D1=32768,8,64 --LL=1048576,16,64 \
    --cachegrind-out-file="$out/cg.%p" bash -c "$cmd" >"$out/log" 2>&1
# cc1 is the process with the most instructions.
python3 - "$out/log" "$user" "$ghz" <<'PY'
import re, sys
log, user, ghz = open(sys.argv[1]).read(), float(sys.argv[2]), float(sys.argv[3])
procs = {}
for pid, what, n in re.findall(r"==(\d+)== (I   refs|I1  misses|D1  misses|LLi misses|LLd misses):\s+([\d,]+)", log):
    procs.setdefault(pid, {})[what] = int(n.replace(",", ""))
cc1 = max(procs.values(), key=lambda p: p["I   refs"])
kcycles = user * ghz * 1e6
print(f"cc1: {cc1['I   refs']:,} instructions, {user} s user at {ghz} GHz = {kcycles * 1e3:.3e} cycles")
print(f"user_l1i_lines_per_kcycle = {cc1['I1  misses'] / kcycles:.1f}")
print(f"user_l1d_lines_per_kcycle = {cc1['D1  misses'] / kcycles:.1f}")
print(f"(1 MiB 16-way L2: {(cc1['LLi misses'] + cc1['LLd misses']) / kcycles:.1f} misses per 1000 cycles)")
PY
rm -rf "$out"
