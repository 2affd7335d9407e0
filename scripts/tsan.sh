#!/usr/bin/env bash
# ThreadSanitizer runs of the tests of Baton's threaded parts (the stage driver, the stage worker, the job service, the
# transport, the collectives, the browser view's server), built by clang 14 with -fsanitize=thread in build-tsan/.
# Not part of scripts/test.sh (the tree takes ~15 min to build on 2 cores and the tests run 5-15x slower); run it
# after changing code that threads share. Exit status: 0 when every test passed and TSan reported nothing.
#   scripts/tsan.sh                                  # build (once), run the default binaries
#   scripts/tsan.sh baton_stage_driver_tests         # only these (build-tsan/bin/<name>)
#   TSAN_GTEST_FILTER='StageSet*' scripts/tsan.sh baton_stage_driver_tests
# A run's reports: build-tsan/tsan-logs/<binary>.log; each report names the two accesses and their threads.
#
# Abseil: absl::Mutex synchronizes through its own futex code, which TSan sees only when Abseil itself is built with
# TSan (Debian's is not: every guarded member would be reported). The first run builds Debian's own Abseil source
# (the installed version, fetched with apt-get source through a private apt configuration: /etc/apt is not touched)
# with -fsanitize=thread into build-tsan/absl (~2 min); the tests load it in place of the system's (LD_LIBRARY_PATH:
# same soname and ABI). gRPC, OpenSSL and libtorch stay uninstrumented: scripts/tsan.supp names what is theirs.
# Needs: clang-14, the Debian mirror on the first run, dpkg-dev (dpkg-source).
# Environment: TSAN_BUILD_DIR (build-tsan), JOBS (nproc), TSAN_GTEST_FILTER (every case).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=$(realpath -m "${TSAN_BUILD_DIR:-build-tsan}")
ABSL=$BUILD_DIR/absl
JOBS=${JOBS:-$(nproc)}
BINARIES=("$@")
((${#BINARIES[@]})) || BINARIES=(baton_stage_driver_tests baton_stage_worker_tests baton_job_service_tests
  baton_rpc_tests baton_collective_tests baton_ui_tests)
command -v clang++-14 >/dev/null || { echo "tsan: needs clang++-14 (scripts/setup.sh installs it)" >&2; exit 1; }

# 1. Abseil with TSan, from the Debian source of the installed libabsl-dev.
if [[ ! -f $ABSL/lib/libabsl_synchronization.so ]]; then
  version=$(dpkg-query -W -f='${Version}' libabsl-dev)
  apt_dir=$BUILD_DIR/apt
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$BUILD_DIR/absl-src"
  for suite in bookworm bookworm-updates; do echo "deb-src http://deb.debian.org/debian $suite main"; done >"$apt_dir/sources.list"
  echo "deb-src http://deb.debian.org/debian-security bookworm-security main" >>"$apt_dir/sources.list"
  apt_opts=(-o Dir::Etc::SourceList="$apt_dir/sources.list" -o Dir::Etc::SourceParts=/nonexistent
    -o Dir::State::Lists="$apt_dir/lists" -o Dir::Cache="$apt_dir/cache" -o Debug::NoLocking=1)
  echo "tsan: building Abseil $version with ThreadSanitizer into $ABSL"
  apt-get "${apt_opts[@]}" -qq update
  (cd "$BUILD_DIR/absl-src" && apt-get "${apt_opts[@]}" -qq source "abseil=$version")
  src=$(find "$BUILD_DIR/absl-src" -maxdepth 1 -mindepth 1 -type d -name 'abseil-*' | head -1)
  cmake -S "$src" -B "$BUILD_DIR/absl-build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_CXX_STANDARD=17 -DBUILD_SHARED_LIBS=ON \
    -DCMAKE_CXX_FLAGS=-fsanitize=thread -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread \
    -DCMAKE_INSTALL_PREFIX="$ABSL" >/dev/null
  ninja -C "$BUILD_DIR/absl-build" -j "$JOBS" install >/dev/null
fi

# 2. Baton with TSan (-O1, as the fuzz tree; each library one unity unit), only what the runs need.
if [[ ! -f $BUILD_DIR/build.ninja ]]; then
  TORCH_PREFIX=$(.venv/bin/python -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++-14 \
    -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g1 -DNDEBUG" -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DBATON_SANITIZE=thread \
    -DBATON_BUILD_BENCH=OFF -DBATON_UNITY_BATCH=64 >/dev/null
fi
# The binaries the tests start (stage workers, coordinators, ...) are instrumented too: a report there fails its test.
cmake --build "$BUILD_DIR" -j "$JOBS" --target "${BINARIES[@]}" stage_worker coordinator encoder_worker baton baton-tools

# 3. The runs. TSan's exit code 66 marks a binary that reported, even when its tests passed.
mkdir -p "$BUILD_DIR/tsan-logs"
export LD_LIBRARY_PATH=$ABSL/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TSAN_OPTIONS="suppressions=$ROOT/scripts/tsan.supp halt_on_error=0 exitcode=66 report_signal_unsafe=0 history_size=4 ${TSAN_OPTIONS:-}"
status=0
for b in "${BINARIES[@]}"; do
  log=$BUILD_DIR/tsan-logs/$b.log
  start=$SECONDS
  rc=0
  "$BUILD_DIR/bin/$b" --gtest_filter="${TSAN_GTEST_FILTER:-*}" >"$log" 2>&1 || rc=$?
  reports=$(grep -c '^WARNING: ThreadSanitizer' "$log" || true)
  echo "tsan: $b: exit $rc, $reports reports, $((SECONDS - start)) s ($log)"
  ((rc == 0 && reports == 0)) || status=1
done
exit $status
