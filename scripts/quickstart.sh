#!/usr/bin/env bash
# quickstart.sh: installs what is missing, builds kayak, and runs it on
# examples/quickstart.yaml until Ctrl-C. Output parts go to ./out/readings.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build} ./scripts/build.sh >/dev/null
exec "${BUILD_DIR:-build}/kayak" --config examples/quickstart.yaml
