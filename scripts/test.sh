#!/usr/bin/env bash
# test.sh: the whole test suite from a fresh Debian 12 machine: installs what
# is missing, builds, and runs every test (unit and end-to-end) with CTest.
#   BUILD_DIR, KAYAK_SANITIZE: see build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j2 ${CTEST_ARGS:-}
# The conformance kit's verdicts, one line per connector and case.
grep -o 'kit: .*' "$BUILD_DIR/Testing/Temporary/LastTest.log" || true
