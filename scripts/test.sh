#!/usr/bin/env bash
# The whole test suite: set up (packages, venv, the build scripts/demo.sh makes), check formatting, run ctest.
# Includes the upstream referee tests (ctest -L upstream), which run diffusers/peft/transformers/tokenizers
# from .venv on tiny random weights.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/check_format.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" --timeout 300
