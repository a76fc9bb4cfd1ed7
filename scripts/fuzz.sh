#!/usr/bin/env bash
# Builds every libFuzzer target (clang, ASan + UBSan) into build-fuzz/ and runs each for
# SECONDS (default 40) from its seed corpus in fuzz/corpus/<name>/. Any finding fails.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-40}"
build="${TPSERVE_FUZZ_BUILD_DIR:-$root/build-fuzz}"
mkdir -p "$root/.cache"
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DTPSERVE_CUDA=OFF -DTPSERVE_TESTS=OFF \
  -DTPSERVE_BENCH=OFF -DTPSERVE_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fsanitize=fuzzer-no-link -fno-sanitize-recover=all" \
  -DCMAKE_C_FLAGS="-fsanitize=address,undefined" >"$root/.cache/fuzz-configure.log" 2>&1 ||
  { cat "$root/.cache/fuzz-configure.log"; exit 1; }
targets=()
for src in "$root"/fuzz/*_fuzz.cc; do targets+=("$(basename "$src" .cc)"); done
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"

export TPSERVE_FUZZ_MODEL="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
for t in "${targets[@]}"; do
  name="${t%_fuzz}"
  corpus="$(mktemp -d)"
  [[ -d "$root/fuzz/corpus/$name" ]] && cp -r "$root/fuzz/corpus/$name/." "$corpus/"
  echo "fuzz: $t for ${seconds}s"
  if ! (cd "$build" && "./fuzz/$t" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=4096 \
        -print_final_stats=1 "$corpus" >"$build/$t.log" 2>&1); then
    tail -n 60 "$build/$t.log"
    echo "fuzz: $t found a problem (log: $build/$t.log)" >&2
    exit 1
  fi
  grep -E 'stat::number_of_executed_units|Done [0-9]+ runs' "$build/$t.log" | tail -n 1
  rm -rf "$corpus"
done
