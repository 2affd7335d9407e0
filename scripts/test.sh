#!/usr/bin/env bash
# The whole test suite: set up (packages, venv, the build scripts/demo.sh makes), check formatting, run ctest.
# Includes the upstream referee tests (ctest -L upstream), which run diffusers/peft/transformers/tokenizers
# from .venv on tiny random weights, and the browser tests (ctest -L browser), which drive `baton ui` in Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The browser tests (ctest -L browser) drive Debian's Chromium, headless, through its driver: only the tests need them.
scripts/install_packages.sh chromium chromium-driver
scripts/check_format.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" --timeout 300
