#!/usr/bin/env bash
# The main job: installs what is missing, fetches SmolLM2-135M-Instruct, builds tpserve, starts
# `tpserve serve` (the coordinator plus two local CPU workers, tensor parallel at TP=2) and
# streams a chat answer from it over gRPC; then stops the server with SIGTERM (it drains).
# usage: scripts/run.sh [QUESTION]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export TPSERVE_BUILD_DIR="${TPSERVE_BUILD_DIR:-$root/build}"
scripts/install-deps.sh
scripts/fetch-model.sh
scripts/build.sh tpserve
port="${TPSERVE_PORT:-50051}"
"$TPSERVE_BUILD_DIR/server/tpserve" serve --model models/SmolLM2-135M-Instruct.Q4_1.gguf \
  --tp 2 --threads 1 --port "$port" 2> >(grep -E "tpserve:|health|ERROR|WARN" >&2) &
server=$!
trap 'kill -TERM "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
.venv/bin/python scripts/stream-chat.py --server "127.0.0.1:$port" \
  "${1:-What is the capital of France?}"
