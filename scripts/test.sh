#!/usr/bin/env bash
# Runs every test of tpserve from a fresh clone: installs what is missing, fetches the
# model, builds (CUDA sources too when the toolkit is there), then GoogleTest through ctest,
# the libFuzzer targets for a bounded time, and the pytest suites; clang-tidy (ctest's
# clang_tidy test) runs beside the fuzzers and pytest, at the lowest CPU priority, and its
# verdict is taken at the end, so that its 25 minutes of CPU fill the time those phases spend
# waiting on servers instead of adding to the run. Any failure fails the run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export TPSERVE_BUILD_DIR="${TPSERVE_BUILD_DIR:-$root/build}"

scripts/install-deps.sh
scripts/fetch-model.sh
scripts/build.sh

tidy_log="$TPSERVE_BUILD_DIR/clang-tidy.log"
nice -n 19 ctest --test-dir "$TPSERVE_BUILD_DIR" -R '^clang_tidy$' --output-on-failure \
  --timeout 3600 >"$tidy_log" 2>&1 &
tidy_pid=$!
trap 'kill "$tidy_pid" 2>/dev/null || true' EXIT

echo "== ctest (clang_tidy beside the rest: its verdict comes last)"
ctest --test-dir "$TPSERVE_BUILD_DIR" --output-on-failure -j"$(nproc)" --timeout 900 -E '^clang_tidy$'

echo "== fuzz"
scripts/fuzz.sh "${TPSERVE_FUZZ_SECONDS:-40}"

echo "== pytest"
.venv/bin/python -m pytest tests/integration tests/reference -q -p no:cacheprovider --durations=8

echo "== ctest: clang_tidy"
tidy=0
wait "$tidy_pid" || tidy=$?
trap - EXIT
cat "$tidy_log"
exit "$tidy"
