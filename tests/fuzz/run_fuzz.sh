#!/usr/bin/env bash
# One bounded libFuzzer run (ctest -L fuzz in build-fuzz/; scripts/fuzz.sh drives it):
#   run_fuzz.sh BINARY TARGET SOURCE_DIR OUT_DIR
# Seeds: SOURCE_DIR/tests/fuzz/{corpus,regressions}/TARGET (read only). New inputs go to OUT_DIR/corpus/TARGET,
# a crash to OUT_DIR/TARGET-crash-* (the path is printed). FUZZ_SECONDS (10) bounds the run.
set -euo pipefail
binary=$1 target=$2 src=$3 out=$4
mkdir -p "$out/corpus/$target"
seeds=("$src/tests/fuzz/corpus/$target")
[[ -d $src/tests/fuzz/regressions/$target ]] && seeds+=("$src/tests/fuzz/regressions/$target")
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
exec "$binary" -max_total_time="${FUZZ_SECONDS:-10}" -rss_limit_mb=4096 -timeout=30 -print_final_stats=1 \
  -artifact_prefix="$out/$target-" "$out/corpus/$target" "${seeds[@]}"
