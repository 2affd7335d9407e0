#!/usr/bin/env bash
# Installs what Baton needs and builds Release into build/. Idempotent: a second run installs nothing and
# rebuilds only what changed.
#   1. Debian packages (gRPC, protobuf, Abseil, prometheus-cpp, GoogleTest, ...), if missing.
#   2. The project venv .venv/ with the exact pins of scripts/requirements.txt: the PyPI torch wheel, whose
#      libtorch (CUDA-enabled) Baton links, and the upstream referees the tests use (diffusers, peft,
#      transformers, tokenizers, safetensors). Reinstalled only when requirements.txt changes.
#   3. CMake finds that libtorch through torch.utils.cmake_prefix_path.
# Environment: BUILD_DIR (build), JOBS (nproc), CXX (clang++-14 when installed), CMAKE_ARGS, BUILD_TARGETS (the
# targets to build, space-separated; empty: everything, the tests included), BROWSER (1; 0: no Chromium, for a build
# without the tests such as deploy/docker's).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config clang-format
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  prometheus-cpp-dev libcivetweb-dev libgtest-dev libgmock-dev libyaml-cpp-dev nlohmann-json3-dev
  libpng-dev libjpeg-dev libssl-dev prometheus iproute2
  libgloo-dev  # declarations only: c10d's Gloo header includes them (collective/); the code is libtorch's
  libavcodec-dev libavformat-dev libswscale-dev libavutil-dev  # video clips (core/video)
  clang-14 libclang-rt-14-dev  # the fuzz targets' build (scripts/fuzz.sh)
)
# The browser tests (ctest -L browser) drive Debian's Chromium, headless, through its driver. Installed here with the
# rest, in one apt-get (one index update), so that scripts/test.sh after scripts/demo.sh installs nothing.
[[ ${BROWSER:-1} == 0 ]] || PACKAGES+=(chromium chromium-driver)
# A python3 that already makes venvs (e.g. pyenv's) needs neither Debian python package.
command -v python3 >/dev/null && python3 -c 'import venv, ensurepip' 2>/dev/null || PACKAGES+=(python3 python3-venv)
scripts/install_packages.sh "${PACKAGES[@]}"

VENV=.venv
REQ=scripts/requirements.txt
stamp=$VENV/.requirements.sha256
want=$(sha256sum "$REQ" | cut -d' ' -f1)
if [[ ! -x $VENV/bin/python || ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  echo "setup: installing the project venv ($VENV) from $REQ (torch wheel with CUDA libraries: a few GB, once)"
  [[ -x $VENV/bin/python ]] || python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q --progress-bar off -r "$REQ"
  echo "$want" >"$stamp"
fi
TORCH_PREFIX=$("$VENV/bin/python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null)

BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
# A build dir configured against another libtorch (e.g. the old Debian libtorch-dev) starts over.
if [[ -f $BUILD_DIR/CMakeCache.txt ]] && ! grep -q "Torch_DIR:PATH=$TORCH_PREFIX" "$BUILD_DIR/CMakeCache.txt"; then
  echo "setup: $BUILD_DIR was configured against another libtorch; reconfiguring"
  rm -rf "$BUILD_DIR/CMakeCache.txt" "$BUILD_DIR/CMakeFiles"
fi
# One build for the demo and the tests: the same compiler and flags whichever script runs first (warnings are
# errors always). clang++-14 where it is installed (it checks the lock annotations, -Wthread-safety), else c++.
CXX_BUILD=$(command -v "${CXX:-clang++-14}" || command -v c++)
configure=false
[[ -f $BUILD_DIR/build.ninja ]] || configure=true
if [[ -f $BUILD_DIR/CMakeCache.txt ]] && ! grep -q "CMAKE_CXX_COMPILER:.*=$CXX_BUILD\$" "$BUILD_DIR/CMakeCache.txt"; then
  echo "setup: $BUILD_DIR was configured with another compiler; reconfiguring with $CXX_BUILD"
  rm -rf "$BUILD_DIR/CMakeCache.txt" "$BUILD_DIR/CMakeFiles"
  configure=true
fi
if $configure; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
    -DCMAKE_CXX_COMPILER="$CXX_BUILD" -DBATON_PYTHON="$PWD/$VENV/bin/python" ${CMAKE_ARGS:-} >/dev/null
fi
read -r -a targets <<<"${BUILD_TARGETS:-}"
echo "setup: building ${targets[*]:-everything} in $BUILD_DIR with $JOBS jobs"
cmake --build "$BUILD_DIR" -j "$JOBS" ${targets[@]:+--target "${targets[@]}"}
