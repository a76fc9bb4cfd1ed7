#!/usr/bin/env bash
# Installs everything tpserve needs to build and test: Debian packages (apt-get) and a
# project-local Python venv (.venv). Idempotent; a second run checks and returns quickly.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

apt_packages=(
  build-essential cmake ninja-build pkg-config git unzip
  clang clang-format clang-tidy-22 libclang-rt-14-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev libgloo-dev nlohmann-json3-dev libgoogle-glog-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev libpcre2-dev libssl-dev openssl
  libboost-dev
  python3 python3-venv iproute2 prometheus
  docker-compose patchelf docker.io debootstrap
)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: apt-get install ${missing[*]}"
  sudo_cmd=()
  [[ "$(id -u)" == 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

# Python side: a venv inside the project; re-installed only when requirements change.
req="$root/scripts/requirements.txt"
venv="$root/.venv"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [[ ! -x "$venv/bin/python" ]]; then
  python3 -m venv "$venv"
fi
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  echo "install-deps: pip install -r scripts/requirements.txt"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet -r "$req"
  echo "$want" >"$stamp"
fi
