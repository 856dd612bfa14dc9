#!/usr/bin/env bash
# The compile job's user page footprint per chunk of user work: cc1 compiling mm/filemap.c
# of Debian's linux-source-6.1 (the job's main program, as scripts/user_cache_rates.sh runs
# it) under qemu-x86_64 with the pages.c plugin: distinct 4 KiB text and data pages per
# window of 1, 8 and 64 chunks. A chunk is workload/kbuild.rs CHUNK_CYCLES (60,000 cycles)
# at cc1's measured IPC on the recording host (5.74e9 instructions in 0.98 s at 2.596 GHz:
# 2.26), 135,600 instructions. About a minute on 2 idle cores.
#   apt-get install linux-source-6.1 qemu-user gcc
#   bash scripts/user_pages/run.sh [KERNEL_TREE]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tree=${1:-/tmp/linux-source-6.1}
. "$here/../filemap_compile.sh"
filemap_compile "$tree"
# cc1's own command line, as the gcc driver would run it.
cc1=$(bash -c "${cmd/#gcc /gcc -### }" 2>&1 | grep '/cc1 ' | head -1)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
gcc -O2 -shared -fPIC -o "$out/pages.so" "$here/pages.c"
for chunks in 1 8 64; do
    window=$((135600 * chunks))
    (eval "qemu-x86_64 -plugin $out/pages.so,window=$window,out=$out/$chunks.txt $cc1" >/dev/null 2>&1) &
done
wait
for chunks in 1 8 64; do
    echo "$chunks chunk(s): $(cat "$out/$chunks.txt")"
done
