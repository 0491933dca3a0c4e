#!/usr/bin/env bash
# check-layers.sh SRC_ROOT: each folder of src/ includes only the layers it
# may use (docs/architecture.md), so a connector cannot reach into the
# engine or the server, and the engine and config name no component type.
# Run by the build (target kayak_layers); prints every violation, exits 1.
set -uo pipefail
root=${1:-.}
cd "$root/src" || exit 2
status=0

# allowed FOLDER PREFIXES...: every `#include "x/..."` in FOLDER names one of
# them (unit tests, *_test.cc, may use anything)
allowed() {
  local folder=$1; shift
  local pattern
  pattern=$(printf '%s|' "$@")
  pattern="^(${pattern%|})"
  while IFS= read -r hit; do
    local file=${hit%%:*} inc
    inc=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$hit")
    if ! [[ $inc =~ $pattern ]]; then
      echo "layers: $file includes \"$inc\", which $folder/ may not use" >&2
      status=1
    fi
  done < <(grep -rHn --exclude='*_test.cc' '^#include "' "$folder" 2>/dev/null)
}

allowed common common/ kayak/status.h
allowed expr common/ kayak/ expr/
allowed config common/ kayak/ expr/ config/
allowed sdk common/ kayak/
allowed state common/ kayak/ state/
allowed checkpoint common/ kayak/ state/ checkpoint/
allowed cluster common/ kayak/ state/ checkpoint/ cluster/
allowed engine common/ kayak/ expr/ config/ state/ checkpoint/ cluster/ engine/
allowed transforms common/ kayak/ expr/ state/bucket.h state/arena.h transforms/ components.h
for dir in connectors/*/; do
  dir=${dir%/}
  allowed "$dir" common/ kayak/ expr/ connectors/shared/ "$dir/"
done
allowed server common/ kayak/ expr/ config/ state/ checkpoint/ cluster/ engine/ server/ components.h

# No component type is named in config/, engine/ or state/: facts come from
# the components' own definitions (PropRef, reads_pipelines, the interfaces).
if grep -rnE --exclude='*_test.cc' '(type\(\)|->type|\.type) *[!=]= *"' config checkpoint cluster engine state >&2; then
  echo "layers: the lines above decide by a component's type name" >&2
  status=1
fi
# The SDK headers drag in no JSON, YAML or HTTP library: a component sees
# messages as bytes and options through kayak::Options.
if grep -nE '#include *[<"](nlohmann|yaml-cpp|boost|simdjson)' ../include/kayak/*.h >&2; then
  echo "layers: the SDK headers above include a third-party JSON, YAML or HTTP header" >&2
  status=1
fi
exit $status
