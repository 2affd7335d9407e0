#!/usr/bin/env bash
# The whole test suite: set up (packages, venv, the build scripts/demo.sh makes), check formatting, build the fuzz
# targets' sanitized tree, then run ctest, and name every test case (scripts/test_summary.py); last, the time
# each part took ("test: parts: ...").
# Includes the upstream referee tests (ctest -L upstream), which run diffusers/peft/transformers/tokenizers
# from .venv on tiny random weights, and the browser tests (ctest -L browser), which drive `baton ui` in Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
parts=()
last=$SECONDS
part() {  # part NAME: the time since the previous part ended
  parts+=("$1 $(((SECONDS - last) / 60)):$(printf %02d $(((SECONDS - last) % 60)))")
  last=$SECONDS
}
scripts/setup.sh
part "setup and build"
scripts/check_format.sh
part "check_format"
BUILD=${BUILD_DIR:-build}
# The fuzz targets' clang + ASan/UBSan tree (ctest fuzz_bounded runs them 10 s each), built here rather than inside
# a test, where its compile starved the tests beside it.
echo "test: building the fuzz targets in $BUILD/fuzz"
FUZZ_BUILD_DIR=$BUILD/fuzz MAIN_BUILD_DIR=$BUILD scripts/fuzz.sh --build-only || [[ $? == 77 ]]
part "fuzz tree"
ROOT=$PWD
cd "$BUILD"
rm -rf test-results
# ctest starts the longest tests first once it knows their times: a fresh build learns them from tests/ctest_costs.txt.
if [[ ! -f Testing/Temporary/CTestCostData.txt ]]; then
  mkdir -p Testing/Temporary
  grep -v '^#' "$ROOT/tests/ctest_costs.txt" >Testing/Temporary/CTestCostData.txt
fi
status=0
ctest --output-on-failure -j "$(nproc)" --timeout 300 --output-junit ctest-junit.xml || status=$?
part "ctest"
python3 "$ROOT/scripts/test_summary.py" . || status=1
echo "test: parts: $(IFS=,; echo "${parts[*]}" | sed 's/,/, /g'); in all $((SECONDS / 60)):$(printf %02d $((SECONDS % 60)))"
exit $status
