#!/usr/bin/env bash
# Configures and builds tpserve into ${TPSERVE_BUILD_DIR:-build} (CUDA per ${TPSERVE_CUDA:-AUTO}).
# Extra arguments are build targets (default: everything).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$root/.cache"
build="${TPSERVE_BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -G Ninja -DTPSERVE_CUDA="${TPSERVE_CUDA:-AUTO}" >"$root/.cache/cmake-configure.log" 2>&1 ||
  { cat "$root/.cache/cmake-configure.log"; exit 1; }
grep -E '^-- tpserve:' "$root/.cache/cmake-configure.log" || true
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build" -j"$(nproc)" "${targets[@]}"
