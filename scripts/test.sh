#!/usr/bin/env bash
# Runs every test of tpserve from a fresh clone: installs what is missing, fetches the
# model, builds (CUDA sources too when the toolkit is there), then GoogleTest through ctest
# (lint included), the libFuzzer targets for a bounded time, and the pytest suites.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export TPSERVE_BUILD_DIR="${TPSERVE_BUILD_DIR:-$root/build}"

scripts/install-deps.sh
scripts/fetch-model.sh
scripts/build.sh

echo "== ctest"
ctest --test-dir "$TPSERVE_BUILD_DIR" --output-on-failure -j"$(nproc)" --timeout 900

echo "== fuzz"
scripts/fuzz.sh "${TPSERVE_FUZZ_SECONDS:-40}"

echo "== pytest"
.venv/bin/python -m pytest tests/integration tests/reference -q -p no:cacheprovider --durations=8
