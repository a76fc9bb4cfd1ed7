#!/usr/bin/env bash
# Runs the GPU check (tests/gpu/run.sh) on the bundle inside a bare Debian root, as the GPU
# machine would: none of the project's libraries installed, only /usr/local/cuda bind-mounted
# (what that machine provides). Proves the bundle carries what it needs; without a GPU every
# test skips with its reason. Needs root. Results: $OUT (default .cache/gpu-bare-root).
#
#   debootstrap --variant=minbase bookworm /tmp/bare http://deb.debian.org/debian
#   tests/gpu/in-bare-root.sh /tmp/bare
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
rootfs="${1:?usage: $0 ROOTFS (a debootstrap --variant=minbase root)}"
out="${OUT:-$root/.cache/gpu-bare-root}"
[[ -x "$rootfs/bin/bash" ]] || { echo "$rootfs is not a Debian root" >&2; exit 2; }
if compgen -G "$rootfs/usr/lib/x86_64-linux-gnu/libgrpc*" >/dev/null ||
  compgen -G "$rootfs/usr/lib/x86_64-linux-gnu/libabsl*" >/dev/null; then
  echo "$rootfs has the project's libraries installed: not a bare root" >&2
  exit 2
fi

mounts=()
bind() {  # SRC DST [ro]
  mkdir -p "$rootfs$2"
  mount --bind "$1" "$rootfs$2"
  [[ "${3:-}" == ro ]] && mount -o remount,bind,ro "$rootfs$2"
  mounts=("$rootfs$2" "${mounts[@]}")
}
cleanup() { for m in "${mounts[@]}"; do umount "$m" || umount -l "$m"; done; }
trap cleanup EXIT
bind /proc /proc
bind /dev /dev
[[ -d /usr/local/cuda ]] && bind "$(readlink -f /usr/local/cuda)" /usr/local/cuda ro
bind "$root" /repo ro
mkdir -p "$rootfs/tmp/gpu-out"
rm -rf "${rootfs:?}/tmp/gpu-out/"*

started=$(date +%s)
rc=0
chroot "$rootfs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root OUT=/tmp/gpu-out \
  TPSERVE_GPU_DEADLINE="${TPSERVE_GPU_DEADLINE:-480}" /bin/bash /repo/tests/gpu/run.sh || rc=$?
mkdir -p "$out"
cp "$rootfs"/tmp/gpu-out/* "$out/"
echo "in-bare-root: run.sh exited $rc after $(($(date +%s) - started)) s in $rootfs; results in $out"
exit "$rc"
