#!/usr/bin/env bash
# docs/results/replay-validate.txt: `kharden validate` of issue 57's commands and a few
# ordinary ones (a file walk, small-file reads and writes, interpreter start-up, shell
# loops), each output printed whole. Needs root and perf. Usage: scripts/validate_commands.sh [KHARDEN]
set -euo pipefail
k=${1:-target/release/kharden}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n' >"$work/a.c"
mkdir -p "$work/io"
run() {
  echo "------------------------------------------------------------------------"
  echo "\$ kharden validate -- $*"
  "$k" validate -- "$@" 2>&1
}
run dd if=/dev/zero of=/dev/null bs=4k count=300000
run sh -c 'for i in $(seq 300); do /bin/true; done'
run sh -c "cd $work && for i in 1 2 3 4; do gcc -O2 a.c -o a\$i; done"
run find /usr/share -name '*.txt'
run sh -c 'cat /usr/share/doc/*/copyright > /dev/null'
run sh -c "for i in \$(seq 1000); do echo hello > $work/io/f\$i; done"
run /usr/bin/python3 -c pass
run sh -c 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done'
