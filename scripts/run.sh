#!/usr/bin/env bash
# The main job: installs what is missing, fetches SmolLM2-135M-Instruct, builds tpserve and
# tpserve-cli, starts `tpserve serve` (the coordinator plus two local CPU workers, tensor
# parallel at TP=2), waits for it to be SERVING, and streams a chat answer from it with
# tpserve-cli; then stops the server with SIGTERM (it drains).
# usage: scripts/run.sh [QUESTION]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export TPSERVE_BUILD_DIR="${TPSERVE_BUILD_DIR:-$root/build}"
scripts/install-deps.sh
scripts/fetch-model.sh
scripts/build.sh tpserve tpserve-cli
port="${TPSERVE_PORT:-50051}"
cli=("$TPSERVE_BUILD_DIR/clients/cpp/tpserve-cli" --server "127.0.0.1:$port")
"$TPSERVE_BUILD_DIR/server/tpserve" serve --model models/SmolLM2-135M-Instruct.Q4_1.gguf \
  --tp 2 --threads 1 --port "$port" 2> >(grep -E "tpserve:|health|ERROR|WARN" >&2) &
server=$!
trap 'kill -TERM "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do  # up to 2 minutes to load the world
  "${cli[@]}" --timeout_s 2 health >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || { echo "run.sh: tpserve serve exited" >&2; exit 1; }
  sleep 0.2
done
question="${1:-What is the capital of France? Answer in one sentence.}"
echo "user> $question"
echo -n "assistant> "
"${cli[@]}" generate --chat_template --temperature 0 --max_tokens 128 "$question"
"${cli[@]}" info | grep -E '"(model_name|world_size|backend|kv_blocks_total)"'
