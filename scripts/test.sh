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

# The Python package (crates/kharden-py, outside the cargo workspace: maturin compiles it
# with kharden again, as an extension module) installs in the background, niced, while
# cargo builds and tests: it takes the core cargo leaves idle while it compiles the kharden
# crate (one codegen unit) and runs single-threaded tests. Its tests run at the end.
# KHARDEN_PIP_EXTRA names further packages to install after it (CI's `ray`), each timed;
# one that fails to install leaves the tests that need it reported as skipped.
pip_pid=
pylog=$(mktemp)
# Its own process group (job control on while it starts), so an early exit stops it whole.
stop_pip() { [ -z "$pip_pid" ] || kill -- -"$pip_pid" 2>/dev/null; }
trap 'rm -f "$pylog"; stop_pip' EXIT
if command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1; then
  set -m
  (
    nice -n 10 python3 -m pip install -q ./crates/kharden-py pytest || exit 1
    for p in ${KHARDEN_PIP_EXTRA:-}; do
      start=$(date +%s)
      if nice -n 10 python3 -m pip install -q "$p"; then
        echo "pip: $p installed in $(($(date +%s) - start)) s"
      else
        echo "pip: $p could not be installed: the tests that need it report themselves skipped"
      fi
    done
  ) </dev/null >"$pylog" 2>&1 &
  pip_pid=$!
  set +m
fi

cargo fetch --locked 2>/dev/null || cargo fetch
# One build of everything the tests run, the kharden binary included. Not a `cargo build`
# first: without the dev-dependencies cargo resolves other features for serde and
# getrandom, and the test build would compile the whole workspace again.
cargo test --release --workspace --locked --no-run
# From here on a failure is counted and reported, not fatal: the closing line always prints,
# and --no-fail-fast runs every test binary past a failing one.
set +e
log=$(mktemp)
extra=$(mktemp)
pyskips=$(mktemp)
trap 'rm -f "$log" "$extra" "$pyskips" "$pylog"; stop_pip' EXIT
cargo test --release --workspace --locked --no-fail-fast 2>&1 | tee "$log"
# The passes that run ignored tests whose tools are present append to $extra.
# Tests that need qemu-user and the aarch64 cross tools are #[ignore]d and named cross_*.
if command -v qemu-aarch64 >/dev/null && command -v aarch64-linux-gnu-gcc >/dev/null; then
  echo "qemu-aarch64 and aarch64-linux-gnu-gcc are here: running the cross_ tests"
  cargo test --release --workspace --locked --no-fail-fast -- --ignored cross_ 2>&1 | tee -a "$extra"
else
  echo "qemu-aarch64 or aarch64-linux-gnu-gcc missing: cross_ tests stay skipped"
fi
# Tests that need a working /dev/kvm (a minimal guest through the KVM API) are named kvm_*.
if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
  echo "/dev/kvm is here: running the kvm_ tests"
  cargo test --release --workspace --locked --no-fail-fast -- --ignored kvm_ 2>&1 | tee -a "$extra"
else
  echo "no usable /dev/kvm: kvm_ tests stay skipped"
fi
# The guest placement and kernel image mapping measurements boot Debian's 6.1 kernel under
# qemu: named qemu_, run where qemu-system-x86_64, that kernel and busybox are installed (the
# tests do not install them: the kernel image alone is 100 MB).
if command -v qemu-system-x86_64 >/dev/null && ls /boot/vmlinuz-6.1.0-*-amd64 >/dev/null 2>&1 && [ -x /bin/busybox ]; then
  echo "qemu-system-x86_64, a 6.1 kernel and busybox are here: running the qemu_ tests"
  cargo test --release --workspace --locked --no-fail-fast -- --ignored qemu_ 2>&1 | tee -a "$extra"
else
  echo "qemu-system-x86_64, /boot/vmlinuz-6.1.0-*-amd64 or busybox missing: qemu_ tests stay skipped"
fi
# The Python package and its Ray path, installed above, tested with pytest. Its counts join
# the closing line as a cargo-style result line; its skipped tests (Ray when ray is not
# installed) are listed with the others.
if [ -n "$pip_pid" ]; then
  echo "python3 is here: waiting for crates/kharden-py's install, then running its pytest tests"
  if wait "$pip_pid"; then
    pip_pid=
    grep '^pip: ' "$pylog"
    python3 -m pytest -rs -p no:cacheprovider crates/kharden-py/tests 2>&1 | tee "$pylog"
    # pytest's last line: "== 6 passed, 1 skipped in 16.7s ==" (or failed, errors).
    count() { tail -1 "$pylog" | awk -v w="$1" '{ for (i = 1; i < NF; i++) if ($(i + 1) ~ w) n += $i } END { print n + 0 }'; }
    passed=$(count '^passed')
    failed=$(count '^(failed|errors?)')
    [ "$passed" -gt 0 ] || [ "$failed" -gt 0 ] || failed=1
    echo "test result: python. $passed passed; $failed failed; (pytest crates/kharden-py/tests)" >>"$extra"
    sed -n 's/^SKIPPED \[[0-9]*\] \([^:]*\):[0-9]*: \(.*\)$/\1: \2/p' "$pylog" >"$pyskips"
  else
    pip_pid=
    tail -20 "$pylog"
    echo "python package: pip install ./crates/kharden-py failed (above)"
    echo "test result: python. 0 passed; 1 failed; (pip install ./crates/kharden-py)" >>"$extra"
  fi
else
  echo "no python3 with pip: the Python package's tests stay skipped"
  echo "crates/kharden-py/tests: no python3 with pip" >"$pyskips"
fi
# Tests that need perf are #[ignore]d with their reason and named perf_*; they run here when
# perf can record system-wide tracepoints (as root). Last, on a quiet host: they measure it,
# and a compile beside them (the Python package's, above) makes perf lose records.
if [ "$(id -u)" = 0 ] && perf record -a -q -e sched:sched_switch -o /dev/null -- true >/dev/null 2>&1; then
  echo "perf records tracepoints here: running the perf_ tests"
  cargo test --release --workspace --locked --no-fail-fast -- --ignored perf_ 2>&1 | tee -a "$extra"
else
  echo "perf cannot record tracepoints here (not installed, or not root): perf_ tests stay skipped"
fi
# Ignored tests that did not run in those passes are the skipped ones, listed with why.
ran_ignored=$(grep -c '^test .* \.\.\. \(ok\|FAILED\)$' "$extra" || true)
{
  grep '^test .* \.\.\. ignored' "$log" | sed 's/^test \(.*\) \.\.\. ignored,* *\(.*\)$/\1: \2/' |
    while IFS= read -r t; do
      name=${t%%: *}
      grep -q "^test $name \.\.\. \(ok\|FAILED\)$" "$extra" || echo "SKIPPED $t"
    done
  sed 's/^/SKIPPED /' "$pyskips"
} | sort | awk '{ print } END { printf "skipped: %d tests (reasons above)\n", NR }'
echo "ran $ran_ignored ignored tests whose tools are present"
# One closing line for the whole workspace (cargo prints one per test binary, the last of
# which is a doc-test run that may hold no test); CI reads it.
cat "$log" "$extra" | awk '/^test result:/ { p += $4; f += $6 } END { printf "workspace: %d passed, %d failed\n", p, f; exit (f > 0) }'
status=$?
# A failing cargo test run (including a build failure, which prints no result) fails too.
if grep -q '^error\(\[E[0-9]*\]\)\?: \|^test result: FAILED' "$log" "$extra"; then status=1; fi
exit $status
