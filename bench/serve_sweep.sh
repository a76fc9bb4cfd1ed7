#!/usr/bin/env bash
# Serving sweep: starts `tpserve serve` at each world size in TPS (default "1 2 3"; threads per
# worker: cores / TP, at least 1), drives it with tpserve-bench at each concurrency in
# CONCURRENCY (default "1 4 16"), plots every result into OUT/serve_sweep.png (JSON beside it)
# and writes OUT/serve_sweep.md, each point's tokens/s and ITL p50 against TP=1's. Prompts of
# 32-96 synthetic tokens, 32 output tokens; REQUESTS per point (default: 3 x concurrency, at
# least 24); MODEL (default: SmolLM2-135M Q4_1 under models/). Everything it starts it stops.
# usage: bench/serve_sweep.sh [OUT]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${TPSERVE_BUILD_DIR:-$root/build}"
out="${1:-$root/bench/results}"
mkdir -p "$out"
model="${MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
port="${TPSERVE_PORT:-50151}"
results=()
for tp in ${TPS:-1 2 3}; do
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
    requests="${REQUESTS:-$(( c * 3 > 24 ? c * 3 : 24 ))}"
    "$build/clients/cpp/tpserve-bench" --server "127.0.0.1:$port" --requests "$requests" \
      --concurrency "$c" --prompt_len uniform:32:96 --output_len fixed:32 --warmup 2 \
      --label "TP=$tp, $threads thread(s) per worker" --json_out "$json" >/dev/null
    results+=("$json")
  done
  kill -TERM "$server"; wait "$server" || true
  trap - EXIT
done
"$root/.venv/bin/python" "$root/bench/plot.py" --out "$out/serve_sweep.png" \
  --title "tpserve serve, $(basename "$model" .gguf), CPU ($(nproc) cores)" "${results[@]}"
"$root/.venv/bin/python" - "$out" "${results[@]}" >"$out/serve_sweep.md" <<'PY'
import json, re, sys
points = {}
for path in sys.argv[2:]:
    tp, c = map(int, re.search(r"tp(\d+)_c(\d+)\.json$", path).groups())
    d = json.load(open(path))
    points[tp, c] = (d["output_tokens_per_s"], d["itl_s"]["p50"])
print("| TP | concurrency | output tok/s | vs TP=1 | ITL p50 (ms) | vs TP=1 |")
print("|---|---|---|---|---|---|")
for (tp, c), (tps, itl) in sorted(points.items()):
    base = points.get((1, c))
    ratio = f"{tps / base[0]:.2f}" if base else "-"
    itl_ratio = f"{itl / base[1]:.2f}" if base else "-"
    print(f"| {tp} | {c} | {tps:.1f} | {ratio} | {itl * 1e3:.1f} | {itl_ratio} |")
PY
cat "$out/serve_sweep.md"
