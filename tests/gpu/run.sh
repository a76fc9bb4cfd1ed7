#!/usr/bin/env bash
# The GPU check, the one script to run on a machine with an NVIDIA GPU (CI has none; there the
# CUDA tests skip). It builds the CUDA targets for the GPU present, then runs
#   - every CUDA kernel against the CPU scalar reference over several shapes (kernels/cuda),
#   - the NCCL communicator and the Gloo-staged communicator (two ranks sharing one GPU),
#   - the model on the GPU against the CPU: a synthetic model, SmolLM2-135M greedy tokens
#     (teacher-forced agreement and first free-running divergence), TP=2 on one GPU,
#   - the decode benchmark of a synthetic Llama-3-8B-shaped model at batch 1, 16 and 64
#     (tokens/s and the fraction of the HBM bandwidth limit),
# and writes everything as JSON to $OUT/gpu_results.json (OUT defaults to .cache/gpu), with
# the full log beside it. Every phase is bounded by `timeout`; the whole run stays under
# 8 minutes on a 16-core machine. Exit status: 0 when every test passed.
#
# Environment: OUT (results folder), TPSERVE_SKIP_DEPS=1 (the Debian packages are already
# there: no apt-get), TPSERVE_CUDA_ARCHS (default: native, the GPU present),
# TPSERVE_GPU_BUILD_DIR (default: build-gpu), TPSERVE_GPU_BUILD_TYPE (default: Release).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
out="${OUT:-$root/.cache/gpu}"
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
exec > >(tee "$out/gpu_run.log") 2>&1
started=$(date +%s)
elapsed() { echo $(($(date +%s) - started)); }

echo "== GPU"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader ||
  echo "nvidia-smi is not available"

if [[ "${TPSERVE_SKIP_DEPS:-0}" != 1 ]]; then
  timeout 300 scripts/install-deps.sh || { echo "run.sh: installing dependencies failed"; exit 1; }
fi
model="models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [[ ! -f "$model" ]]; then
  timeout 120 scripts/fetch-model.sh ||
    echo "run.sh: $model is not available: the SmolLM2 GPU test will skip"
fi

echo "== build ($(elapsed) s)"
build="${TPSERVE_GPU_BUILD_DIR:-$root/build-gpu}"
if ! timeout 240 cmake -S . -B "$build" -G Ninja -DTPSERVE_CUDA=ON -DCMAKE_BUILD_TYPE="${TPSERVE_GPU_BUILD_TYPE:-Release}" \
  -DCMAKE_CUDA_ARCHITECTURES="${TPSERVE_CUDA_ARCHS:-native}" >"$work/configure.log" 2>&1; then
  tail -30 "$work/configure.log"
  echo "run.sh: configure failed"
  exit 1
fi
tests=()
for f in kernels/cuda/*_test.cc server/engine/cuda/*_test.cc server/comm/nccl/*_test.cc \
  server/comm/staging/*_test.cc; do
  tests+=("$(basename "$f" .cc)")
done
if ! timeout 300 ninja -C "$build" "${tests[@]}" cuda_decode_throughput >"$work/build.log" 2>&1; then
  grep -E "error|FAILED" "$work/build.log" | head -40
  echo "run.sh: build failed"
  exit 1
fi

echo "== CUDA tests ($(elapsed) s)"
mkdir -p "$work/gtest"
failed=0
for t in "${tests[@]}"; do
  bin="$(find "$build" -name "$t" -type f -perm -u+x | head -1)"
  if [[ -z "$bin" ]]; then
    echo "run.sh: $t was not built"
    failed=1
    continue
  fi
  echo "-- $t"
  timeout 150 "$bin" --gtest_output="json:$work/gtest/$t.json" --gtest_brief=1 || failed=1
done

echo "== decode benchmark ($(elapsed) s)"
timeout 150 "$build/bench/cuda_decode_throughput" --batches=1,16,64 --context=512 --steps=32 \
  --json_out="$work/bench.json" || failed=1

echo "== results ($(elapsed) s)"
python3 tests/gpu/summarize.py --gtest "$work/gtest" --bench "$work/bench.json" \
  --seconds "$(elapsed)" --out "$out/gpu_results.json" || failed=1
exit "$failed"
