#!/usr/bin/env bash
# Serving sweep: starts `tpserve serve` at each world size in TPS (default "1 2"), drives it
# with tpserve-bench at each concurrency in CONCURRENCY (default "1 4 16"), and plots every
# result into OUT/serve_sweep.png (JSON beside it). Prompts of 32-96 synthetic tokens, 32
# output tokens; REQUESTS (default 24) per point. Everything it starts it stops.
# usage: bench/serve_sweep.sh [OUT]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${TPSERVE_BUILD_DIR:-$root/build}"
out="${1:-$root/bench/results}"
mkdir -p "$out"
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
port="${TPSERVE_PORT:-50151}"
results=()
for tp in ${TPS:-1 2}; do
  threads=$(( $(nproc) / tp )); (( threads < 1 )) && threads=1
  "$build/server/tpserve" serve --model "$model" --tp "$tp" --threads "$threads" \
    --port "$port" 2>"$out/serve_tp$tp.log" &
  server=$!
  trap 'kill -TERM $server 2>/dev/null || true' EXIT
  for _ in $(seq 1 600); do  # up to 2 minutes for the world to load
    "$build/clients/cpp/tpserve-cli" --server "127.0.0.1:$port" --timeout_s 2 health \
      >/dev/null 2>&1 && break
    sleep 0.2
  done
  for c in ${CONCURRENCY:-1 4 16}; do
    json="$out/tp${tp}_c${c}.json"
    "$build/clients/cpp/tpserve-bench" --server "127.0.0.1:$port" --requests "${REQUESTS:-24}" \
      --concurrency "$c" --prompt_len uniform:32:96 --output_len fixed:32 --warmup 2 \
      --label "TP=$tp, $threads thread(s) per worker" --json_out "$json" >/dev/null
    results+=("$json")
  done
  kill -TERM "$server"; wait "$server" || true
  trap - EXIT
done
"$root/.venv/bin/python" "$root/bench/plot.py" --out "$out/serve_sweep.png" \
  --title "tpserve serve, SmolLM2-135M Q4_1, CPU ($(nproc) cores)" "${results[@]}"
