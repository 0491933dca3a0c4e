#!/usr/bin/env bash
# build.sh: configure and build kayak with CMake + Ninja.
#   BUILD_DIR      build directory (default: build)
#   KAYAK_SANITIZE "" | address (ASan+UBSan) | thread (TSan)
#   BUILD_TYPE     CMake build type (default: RelWithDebInfo)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja \
  -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  -DKAYAK_SANITIZE="${KAYAK_SANITIZE:-}" \
  -DBUILD_TESTING=ON >/dev/null
cmake --build "$BUILD_DIR" -j2
