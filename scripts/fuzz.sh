#!/usr/bin/env bash
# Bounded libFuzzer runs of the fuzz targets (tests/fuzz), built by clang 14 with ASan + UBSan in build-fuzz/
# (only the libraries the targets need). The test suite runs it as ctest test fuzz_bounded (label fuzz; build dir
# build/fuzz); exit 77 (skipped) when clang-14 or its libFuzzer runtime is missing.
#   scripts/fuzz.sh                          # build, then fuzz each target FUZZ_SECONDS (10) seconds: ctest -L fuzz
#   scripts/fuzz.sh wire stage               # only these targets
#   FUZZ_SECONDS=600 scripts/fuzz.sh safetensors
# Seeds: tests/fuzz/corpus/<target>/ and tests/fuzz/regressions/<target>/ (read only); new inputs go to
# build-fuzz/fuzz-out/corpus/<target>/, a crash to build-fuzz/fuzz-out/<target>-crash-*. On a finding: reproduce
# with build-fuzz/bin/<target>_fuzz FILE, minimize (-minimize_crash=1), fix the code, and add the file to
# tests/fuzz/regressions/<target>/: baton_fuzz_replay_tests runs it in every normal build from then on.
# Needs clang-14 and libclang-rt-14-dev (Debian 12; scripts/setup.sh installs them).
#   scripts/fuzz.sh --build-only             # only build (scripts/test.sh, before ctest, beside the main build)
#   scripts/fuzz.sh --no-build               # only run, exit 77 (skipped) when the tree is not built (ctest fuzz_bounded)
# Built at -O1, as libFuzzer's documentation builds its targets (quicker to compile than -O3; the sanitizers see the
# same faults; -O0 compiled in half the time but fuzzed 3-7x fewer inputs in the same 10 s), each library in one unity
# unit (64 sources; the main build's 8 keeps its parallelism): the sanitizers' instrumented template code is then
# compiled once per library, not once per 8 files (335 -> 274 s of compile, 173 -> 142 s on 2 cores).
# Environment: FUZZ_BUILD_DIR (build-fuzz), FUZZ_SECONDS (10), JOBS (nproc), CXX_FUZZ (clang++-14), MAIN_BUILD_DIR
# (build: the main build whose generated protobuf code the tree links when it is there, instead of compiling it).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
CXX_FUZZ=${CXX_FUZZ:-clang++-14}
if ! command -v "$CXX_FUZZ" >/dev/null || ! compgen -G "/usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null; then
  echo "fuzz: skipped: needs $CXX_FUZZ and libclang-rt-14-dev (apt-get install clang-14 libclang-rt-14-dev)"
  exit 77
fi
MODE=all
case ${1:-} in --build-only | --no-build) MODE=${1#--}; shift ;; esac
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=(wire safetensors job lora stage)

if [[ $MODE == no-build && ! -f $BUILD_DIR/build.ninja ]]; then
  echo "fuzz: skipped: $BUILD_DIR is not built (scripts/test.sh builds it before ctest; or run scripts/fuzz.sh)"
  exit 77
fi
if [[ ! -f $BUILD_DIR/build.ninja ]]; then
  # The main build's generated protobuf code, linked rather than compiled again (proto/CMakeLists.txt says why).
  MAIN_BUILD_DIR=${MAIN_BUILD_DIR:-build}
  PROTO_FROM=
  [[ -f $MAIN_BUILD_DIR/proto/libbaton_proto.a ]] && PROTO_FROM=$(realpath "$MAIN_BUILD_DIR")
  TORCH_PREFIX=$(.venv/bin/python -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$CXX_FUZZ" \
    -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DBATON_FUZZ=ON \
    -DBATON_BUILD_TESTS=OFF -DBATON_BUILD_BENCH=OFF -DBATON_UNITY_BATCH=64 ${PROTO_FROM:+-DBATON_PROTO_FROM="$PROTO_FROM"} >/dev/null
fi
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target "${TARGETS[@]/%/_fuzz}"
[[ $MODE == build-only ]] && exit 0
regex=$(printf '|fuzz_%s$' "${TARGETS[@]}")
ctest --test-dir "$BUILD_DIR" -L fuzz -R "${regex:1}" --output-on-failure
