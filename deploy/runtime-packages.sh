#!/usr/bin/env bash
# Prints, one per line, the Debian/Ubuntu packages that own the shared libraries the given
# binaries load (ldd, then dpkg -S). The Dockerfile runs it in a build stage and installs
# exactly that list in the runtime stage, so the runtime image carries the runtime packages
# of whatever distribution built the binary (Debian 12 names, Ubuntu 24.04 *t64 names)
# without -dev packages and without a hand-kept list.
# Usage: deploy/runtime-packages.sh BINARY... > packages.txt
set -euo pipefail

# Libraries the NVIDIA container runtime injects from the host driver: never packaged in
# the image, so "not found" at build time is expected for them.
driver_libs='^(libcuda|libnvidia-[a-z-]+|libnvcuvid|libnvidia-ml)\.so'

owner() {  # owner PATH -> package name, or nothing
  local path="$1" real candidates c p out
  real="$(readlink -f "$path")"
  candidates=("$path" "$real" "$(readlink -f "$(dirname "$path")")/$(basename "$path")")
  for c in "${candidates[@]}"; do
    # merged /usr: dpkg may have registered the file under /usr/lib or under /lib.
    for p in "$c" "/usr${c}" "${c#/usr}"; do
      if out="$(dpkg-query -S "$p" 2>/dev/null)"; then
        # "pkg:arch: /path" (diversions print "diversion by ..." lines: skip those)
        grep -v '^diversion' <<<"$out" | head -n1 | sed -E 's/[:,].*//'
        return 0
      fi
    done
  done
  return 1
}

owners() {  # owners BINARY... -> one package per library (repeats); non-zero if one is missing
  local status=0 bin line name path
  for bin in "$@"; do
    while read -r line; do
      # "libfoo.so.1 => /path/libfoo.so.1 (0x...)", "libbar.so.2 => not found",
      # "/lib64/ld-linux-x86-64.so.2 (0x...)", "linux-vdso.so.1 (0x...)"
      name="${line%% *}"
      if [[ "$line" == *"=> not found"* ]]; then
        if [[ ! "$name" =~ $driver_libs ]]; then
          echo "runtime-packages: $bin needs $name, which is not installed" >&2
          status=1
        fi
        continue
      fi
      if [[ "$line" == *" => /"* ]]; then
        path="${line#* => }"
        path="${path%% (*}"
      elif [[ "$name" == /* ]]; then
        path="$name"
      else
        continue  # linux-vdso and friends: no file
      fi
      if ! owner "$path"; then
        echo "runtime-packages: no package owns $path (needed by $bin)" >&2
        status=1
      fi
    done < <(ldd "$bin")
  done
  return "$status"
}

(($#)) || { echo "usage: $0 BINARY..." >&2; exit 2; }
owners "$@" | sort -u  # pipefail: the script fails when owners does
