#!/usr/bin/env bash
# Runs every test of the project on a fresh machine: installs what the tests need, then
# builds and tests the whole workspace. Used by CI (.ci/run) and by developers alike.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cc >/dev/null || need_apt+=(gcc)
command -v aarch64-linux-gnu-gcc >/dev/null || need_apt+=(gcc-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null || need_apt+=(qemu-user)
command -v aarch64-linux-gnu-objdump >/dev/null || need_apt+=(binutils-aarch64-linux-gnu)
command -v perf >/dev/null || need_apt+=(linux-perf)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing: ${need_apt[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "warning: not root, cannot install ${need_apt[*]}; tests that need them report themselves skipped" >&2
  fi
fi

cargo fetch --locked 2>/dev/null || cargo fetch
cargo build --release --workspace --locked
log=$(mktemp)
cargo test --release --workspace --locked 2>&1 | tee "$log"
# One closing line for the whole workspace (cargo prints one per test binary, the last of
# which is a doc-test run that may hold no test).
awk '/^test result:/ { p += $4; f += $6 } END { printf "workspace: %d passed, %d failed\n", p, f }' "$log"
rm -f "$log"
