#!/usr/bin/env bash
# Runs every fuzz target for SECONDS seconds each (default 60) with cargo-fuzz (nightly Rust),
# starting from the seeds and the regression corpus, and prints one summary line per target:
# executions, coverage, and whether it crashed. Crashes are saved by libFuzzer under
# fuzz/artifacts/TARGET/; add each one to fuzz/regressions with its expected error.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -uo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(trace_reader trace_stats replay_trace machine_profile cpuid_dump experiment_file sweep_file kernel_footprint)
fi
if ! command -v cargo-fuzz >/dev/null; then
  echo "fuzz: cargo-fuzz is not installed (cargo install cargo-fuzz; it needs a nightly toolchain)" >&2
  exit 2
fi
status=0
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "seeds/$t"
  log=$(mktemp)
  cargo +nightly fuzz run "$t" "corpus/$t" "seeds/$t" ../fuzz/regressions -- \
    -max_total_time="$secs" -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 >"$log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
  if [ $rc -eq 0 ]; then verdict="no crash"; else verdict="CRASH (exit $rc; see fuzz/artifacts/$t)"; status=1; fi
  echo "fuzz $t: ${secs}s, ${execs:-?} executions, coverage ${cov:-?} edges, $verdict"
  [ $rc -eq 0 ] || tail -30 "$log" >&2
  rm -f "$log"
done
exit $status
