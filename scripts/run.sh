#!/usr/bin/env bash
# The main job: installs what is missing, fetches SmolLM2-135M-Instruct, builds tpserve and
# inspects the model: its configuration, a tokenised prompt and the rendered chat template.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export TPSERVE_BUILD_DIR="${TPSERVE_BUILD_DIR:-$root/build}"
scripts/install-deps.sh
scripts/fetch-model.sh
scripts/build.sh tpserve
"$TPSERVE_BUILD_DIR/server/tpserve" inspect --model models/SmolLM2-135M-Instruct.Q4_1.gguf \
  --prompt "${1:-What is the capital of France?}"
