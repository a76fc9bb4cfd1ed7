#!/usr/bin/env bash
# Builds, here, the bundle that the GPU check (tests/gpu/run.sh) runs on a GPU machine with no
# package registry and none of the project's libraries. Into .gpu-bundle/ (git-ignored; the
# device call carries it):
#   tpserve-gpu.tar.gz  the CUDA test binaries, bench/cuda_decode_throughput and tpserve
#                       (Release, sm_90, stripped, RPATH $ORIGIN/lib), with lib/: every shared
#                       library they need but those the GPU machine provides (glibc, the GCC
#                       runtime, the driver's libcuda, and cudart, cuBLAS and NCCL from
#                       /usr/local/cuda and the Python wheels), and MANIFEST (what is in it);
#   models/             SmolLM2-135M-Instruct's real tokenizer and embedding with its first
#                       --layers blocks (scripts/requantize.py), a real model small enough to
#                       travel where the full file cannot.
# Before packing, the library closure is checked: every NEEDED entry of every binary and
# library resolves inside lib/ or is one the GPU machine provides.
#
# Usage: scripts/gpu-bundle.sh [--from-build DIR] [--out DIR] [--layers K] [--no-model]
#        scripts/gpu-bundle.sh --check DIR   (the closure of an unpacked bundle; 1 if open)
#   --from-build DIR  bundle the binaries of an existing CUDA build instead of building
#                     build-gpu/ (Release, sm_90); the CI's closure test uses its own build.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

# Shared libraries never bundled: the system's (glibc, the GCC runtime) and those the GPU
# machine brings (the driver's libcuda; cudart and cuBLAS from /usr/local/cuda or the wheels;
# libnccl.so.2 from the nvidia-nccl wheel).
provided_re='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|lib(c|m|dl|rt|pthread|util|resolv)\.so\.[0-9]+|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libcuda\.so\.1|libcudart\.so\.[0-9]+|libcublas(Lt)?\.so\.[0-9]+|libnccl\.so\.[0-9]+)$'

is_elf() { [[ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" == '177ELF' ]]; }
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

# Every NEEDED of every ELF file in DIR and DIR/lib resolves in DIR/lib or is provided, and
# every binary in DIR looks in $ORIGIN/lib. Prints each gap; returns 1 when there is one.
check_closure() {
  local dir="$1" open=0 f need
  for f in "$dir"/* "$dir"/lib/*; do
    [[ -f "$f" ]] && is_elf "$f" || continue
    while read -r need; do
      [[ "$need" =~ $provided_re || -e "$dir/lib/$need" ]] && continue
      echo "gpu-bundle: ${f#"$dir"/} needs $need: not in lib/ and not provided by the GPU machine"
      open=1
    done < <(needed "$f")
    if [[ "$(dirname "$f")" == "$dir" ]] && ! readelf -d "$f" | grep -q 'R.*PATH.*\[\$ORIGIN/lib\]'; then
      echo "gpu-bundle: ${f#"$dir"/} does not look for its libraries in \$ORIGIN/lib"
      open=1
    fi
  done
  return "$open"
}

out="$root/.gpu-bundle"
from_build=""
layers=3
model=1
while (($#)); do
  case "$1" in
    --check)
      [[ $# -ge 2 && -d "$2" ]] || { echo "usage: $0 --check DIR" >&2; exit 2; }
      check_closure "$2" && echo "gpu-bundle: $2: closed (every library in lib/ or provided)"
      exit $? ;;
    --from-build) from_build="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --layers) layers="$2"; shift 2 ;;
    --no-model) model=0; shift ;;
    *) echo "usage: $0 [--from-build DIR] [--out DIR] [--layers K] [--no-model] | --check DIR" >&2
       exit 2 ;;
  esac
done
# What the build and the model need, on a fresh clone as on a second run (idempotent: apt
# packages, the .venv that runs scripts/requantize.py).
"$root/scripts/install-deps.sh"
for tool in readelf patchelf strip ldd; do
  command -v "$tool" >/dev/null || { echo "gpu-bundle: $tool is missing (scripts/install-deps.sh)" >&2; exit 1; }
done

# The binaries: the CUDA tests (one per *_test.cc of the CUDA folders), the decode benchmark
# and tpserve.
tests=()
for f in "$root"/kernels/cuda/*_test.cc "$root"/server/engine/cuda/*_test.cc \
  "$root"/server/comm/nccl/*_test.cc "$root"/server/comm/staging/*_test.cc; do
  tests+=("$(basename "$f" .cc)")
done
programs=("${tests[@]}" cuda_decode_throughput tpserve)

build="${from_build:-$root/build-gpu}"
if [[ -z "$from_build" ]]; then
  echo "== build ($build: Release, sm_90)"
  cmake -S "$root" -B "$build" -G Ninja -DTPSERVE_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
  ninja -C "$build" "${programs[@]}"
fi

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib" "$out"
echo "== binaries and their libraries"
for p in "${programs[@]}"; do
  bin="$(find "$build" -name "$p" -type f -perm -u+x -not -path '*/CMakeFiles/*' | head -1)"
  [[ -n "$bin" ]] || { echo "gpu-bundle: $p is not built in $build" >&2; exit 1; }
  cp "$bin" "$stage/$p"
  strip --strip-unneeded "$stage/$p"
  patchelf --set-rpath '$ORIGIN/lib' "$stage/$p"
  while read -r name _ path _; do
    [[ "$name" =~ $provided_re || -e "$stage/lib/$name" ]] && continue
    if [[ ! -f "$path" ]]; then
      echo "gpu-bundle: $p needs $name, which is not found here" >&2
      exit 1
    fi
    cp -L "$path" "$stage/lib/$name"
    chmod u+w "$stage/lib/$name"
    patchelf --set-rpath '$ORIGIN' "$stage/lib/$name"  # its own needs: beside it
  done < <(ldd "$bin" | grep '=>')
done
{
  echo "# tpserve GPU bundle: $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)," \
    "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  for p in "${programs[@]}"; do echo "$p"; done
} >"$stage/MANIFEST"
check_closure "$stage"

tar -C "$stage" -czf "$out/tpserve-gpu.tar.gz.tmp" .
mv "$out/tpserve-gpu.tar.gz.tmp" "$out/tpserve-gpu.tar.gz"

if ((model)); then
  src="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
  dst="$out/models/SmolLM2-135M-Instruct.L$layers.Q4_1.gguf"
  if [[ ! -f "$dst" || "$src" -nt "$dst" ]]; then
    [[ -f "$src" ]] || "$root/scripts/fetch-model.sh"
    mkdir -p "$out/models"
    rm -f "$out"/models/*.gguf
    "$root/.venv/bin/python" "$root/scripts/requantize.py" "$src" "$dst" --type Q4_1 --layers "$layers"
  fi
fi
echo "== bundle: $(du -sh --apparent-size "$stage" | cut -f1) unpacked;" \
  "$(du -sh --apparent-size "$out/tpserve-gpu.tar.gz" | cut -f1) packed," \
  "$(du -sh --apparent-size "$out" | cut -f1) with the model, in $out"
