#!/usr/bin/env bash
# Fails (exit 1) listing every tracked C++ file that differs from .clang-format. `--fix` rewrites them instead.
# One clang-format per hundred files on each core (one per file spent 29 s starting processes, this way 2 s).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == --fix ]]; then
  git ls-files -z '*.cc' '*.h' | xargs -0 -P "$(nproc)" -n 100 clang-format -i
  exit 0
fi
count=$(git ls-files '*.cc' '*.h' | wc -l)
# --dry-run --Werror names each differing line "FILE:LINE:COL: error: code should be clang-formatted".
report=$(git ls-files -z '*.cc' '*.h' | xargs -0 -P "$(nproc)" -n 100 clang-format --dry-run --Werror 2>&1) || true
mapfile -t bad < <(grep -o '^[^:]*:[0-9]*:[0-9]*: error: code should be clang-formatted' <<<"$report" | cut -d: -f1 |
  sort -u)
if ((${#bad[@]})); then
  echo "check_format: ${#bad[@]} file(s) differ from .clang-format (fix: scripts/check_format.sh --fix):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
if ! grep -q . <<<"$report"; then
  echo "check_format: $count files match .clang-format"
  exit 0
fi
echo "check_format: clang-format failed:"
echo "$report" | head -20
exit 1
