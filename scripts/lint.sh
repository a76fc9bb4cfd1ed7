#!/usr/bin/env bash
# lint.sh format            clang-format --dry-run over the project's C++ (fails on any change)
# lint.sh tidy BUILD_DIR    clang-tidy over the project's production .cc files (not tests, tools,
#                           benchmarks or fuzz targets) in BUILD_DIR's compile db. clang-tidy 22
#                           (bookworm-security) rather than Debian 12's 14: it no longer walks
#                           system headers with every matcher, so the run takes about a third of
#                           the time. clang-format stays at 14 (its output differs by version).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.cc' '*.h' '*.cu' '*.cuh')
case "${1:-}" in
  format)
    clang-format --dry-run --Werror "${files[@]}"
    echo "clang-format: ${#files[@]} files clean"
    ;;
  tidy)
    build="${2:?build dir}"
    mapfile -t units < <(printf '%s\n' "${files[@]}" | grep -E '\.cc$' |
      grep -v -E '^(fuzz|bench|tests)/|_test\.cc$' |
      while read -r f; do grep -q "\"file\": \"$root/$f\"" "$build/compile_commands.json" && echo "$f"; done)
    # grep -v exits 1 when it filters out every line (a clean run): not a failure.
    printf '%s\n' "${units[@]}" | xargs -P "$(nproc)" -n 4 clang-tidy-22 -p "$build" --quiet 2>&1 |
      { grep -v -E '^[0-9]+ warnings? generated|^Suppressed|^Use -header-filter|^$' || true; } |
      tee /tmp/tpserve-tidy.log
    if grep -q -E 'warning:|error:' /tmp/tpserve-tidy.log; then exit 1; fi
    echo "clang-tidy: ${#units[@]} files clean"
    ;;
  *) echo "usage: lint.sh format | tidy BUILD_DIR" >&2; exit 2 ;;
esac
