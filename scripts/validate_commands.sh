#!/usr/bin/env bash
# docs/results/replay-validate.txt: `kharden validate` of issue 57's commands and a few
# ordinary ones (a file walk, small-file reads and writes, interpreter start-up, shell
# loops): a summary table taken from the outputs, then each output whole. Needs root and
# perf. Usage: scripts/validate_commands.sh [KHARDEN]
set -euo pipefail
k=${1:-target/release/kharden}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n' >"$work/a.c"
mkdir -p "$work/io"
n=0
# The command as typed: an argument with a space in single quotes.
shown() {
  local a out=()
  for a in "$@"; do
    case $a in *' '*) out+=("'$a'") ;; *) out+=("$a") ;; esac
  done
  echo "${out[*]}"
}
run() {
  n=$((n + 1))
  { echo "------------------------------------------------------------------------"
    echo "\$ kharden validate -- $(shown "$@")"
    "$k" validate -- "$@" 2>&1; } >"$work/out$n"
}
run dd if=/dev/zero of=/dev/null bs=4k count=300000
run sh -c 'for i in $(seq 300); do /bin/true; done'
run sh -c "cd $work && for i in 1 2 3 4; do gcc -O2 a.c -o a\$i; done"
run find /usr/share -name '*.txt'
run sh -c 'cat /usr/share/doc/*/copyright > /dev/null'
run sh -c "for i in \$(seq 1000); do echo hello > $work/io/f\$i; done"
run /usr/bin/python3 -c pass
run sh -c 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done'
echo "kharden validate on this host ($(uname -r), $(nproc) CPUs), $(date -u '+%F %H:%M') UTC, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end: scripts/validate_commands.sh"
echo
echo "Summary (elapsed / user / system, seconds; the replay's error against the untraced runs):"
echo
echo "| command | untraced | replay | error |"
echo "|---|---|---|---|"
for i in $(seq "$n"); do
  awk -v tmp="$work" '
    /^\$ kharden validate -- / { sub(/^\$ kharden validate -- /, ""); gsub(tmp, "$TMP"); cmd = $0 }
    /^untraced  / { u = $2 " / " $4 " / " $6 }
    /^replay  / { r = $2 " / " $3 " / " $4 }
    /^replay against untraced/ { e = $4 " / " $5 " / " $6 }
    END { printf "| `%s` | %s | %s | %s |\n", cmd, u, r, e }' "$work/out$i"
done
echo
cat "$work"/out*
