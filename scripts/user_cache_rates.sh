#!/usr/bin/env bash
# The compile job's user-code miss rates (workloads/kbuild-job.toml: user_l1i_lines_per_kcycle
# and user_l1d_lines_per_kcycle; the unified-cache curve is printed for the L2/LLC question
# of docs/design/memory.md section 3): cc1 compiling mm/filemap.c of Debian's
# linux-source-6.1 (x86_64 defconfig) under cachegrind, with 32 KiB 8-way L1s and a unified
# cache of each size below, against the same compile's native user time at the recording
# host's clock. About four minutes.
#   apt-get install linux-source-6.1 valgrind
#   bash scripts/user_cache_rates.sh [KERNEL_TREE] [HOST_GHZ]
set -euo pipefail
tree=${1:-/tmp/linux-source-6.1}
ghz=${2:-2.596}
. "$(dirname "$0")/filemap_compile.sh"
filemap_compile "$tree"
user=$( { /usr/bin/time -f '%U' bash -c "$cmd" >/dev/null; } 2>&1 | tail -1)
out=$(mktemp -d)
sizes="262144,8,64 1048576,16,64 6291456,12,64 33554432,16,64"
for ll in $sizes; do
    valgrind --tool=cachegrind --cache-sim=yes --trace-children=yes \
        --I1=32768,8,64 --D1=32768,8,64 --LL="$ll" \
        --cachegrind-out-file="$out/cg.%p" bash -c "$cmd" >"$out/log.$ll" 2>&1
done
# cc1 is the process with the most instructions.
python3 - "$out" "$user" "$ghz" $sizes <<'PY'
import re, sys
out, user, ghz, sizes = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
kcycles = user * ghz * 1e6
def cc1(ll):
    procs = {}
    log = open(f"{out}/log.{ll}").read()
    for pid, what, n in re.findall(r"==(\d+)== (I   refs|I1  misses|D1  misses|LLi misses|LLd misses):\s+([\d,]+)", log):
        procs.setdefault(pid, {})[what] = int(n.replace(",", ""))
    return max(procs.values(), key=lambda p: p["I   refs"])
first = cc1(sizes[0])
print(f"cc1: {first['I   refs']:,} instructions, {user} s user at {ghz} GHz = {kcycles * 1e3:.3e} cycles")
print(f"user_l1i_lines_per_kcycle = {first['I1  misses'] / kcycles:.1f}")
print(f"user_l1d_lines_per_kcycle = {first['D1  misses'] / kcycles:.1f}")
print("[user_cache_misses]")
print("kib = [" + ", ".join(str(int(s.split(",")[0]) // 1024) for s in sizes) + "]")
print("per_kcycle = [" + ", ".join(f"{(c['LLi misses'] + c['LLd misses']) / kcycles:.2f}" for c in map(cc1, sizes)) + "]")
PY
rm -rf "$out"
