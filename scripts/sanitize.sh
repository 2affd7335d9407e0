#!/usr/bin/env bash
# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer (GCC, -O1), in build-asan/.
# Nightly-style: a cold build plus the suite take an hour or more on 2 cores, so CI does not run it.
#   scripts/sanitize.sh                 # configure, build everything, run ctest
#   scripts/sanitize.sh -R PipelineTest # extra arguments go to ctest
#   SANITIZE_TARGETS="baton_rpc_tests baton_fuzz_replay_tests" scripts/sanitize.sh   # build and run only these
#                                       # gtest binaries (a quick subset; extra arguments go to each binary)
# The first error stops the process (halt_on_error) and fails its test; reports carry stack traces.
# scripts/sanitize.supp suppresses third-party leak reports only (each entry says why).
# Environment: ASAN_BUILD_DIR (build-asan), JOBS (nproc), CTEST_JOBS (nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
JOBS=${JOBS:-$(nproc)}
supp=$PWD/scripts/sanitize.supp

if [[ ! -f $BUILD_DIR/build.ninja ]]; then
  TORCH_PREFIX=$(.venv/bin/python -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
  # -fno-sanitize=vptr: the vptr check compares type_info objects across libtorch's shared libraries and
  # reports mismatches that are not bugs.
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
    -DBATON_SANITIZE=address,undefined -DCMAKE_CXX_FLAGS="-fno-sanitize=vptr" \
    -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g1 -DNDEBUG" -DBATON_WERROR=OFF -DBATON_BUILD_BENCH=OFF \
    -DBATON_PYTHON="$PWD/.venv/bin/python" >/dev/null
fi
read -r -a targets <<<"${SANITIZE_TARGETS:-}"
cmake --build "$BUILD_DIR" -j "$JOBS" ${targets[@]+--target "${targets[@]}"}

# protect_shadow_gap=0: the CUDA driver maps memory where ASan's shadow gap would be (libtorch is a CUDA build).
# The suppressions are LeakSanitizer's only (ASan and UBSan refuse a file with leak: lines).
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:protect_shadow_gap=0"
export LSAN_OPTIONS="suppressions=$supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
cd "$BUILD_DIR"
if ((${#targets[@]})); then
  failed=()
  for t in "${targets[@]}"; do
    echo "sanitize: $t"
    "bin/$t" "$@" || failed+=("$t")
  done
  ((${#failed[@]} == 0)) || { echo "sanitize: failed: ${failed[*]}"; exit 1; }
  exit 0
fi
# -LE fuzz: the bounded libFuzzer runs are a clang build of their own (scripts/fuzz.sh), already under ASan + UBSan.
ctest --output-on-failure -j "${CTEST_JOBS:-$(nproc)}" --timeout 1200 -LE fuzz "$@"
