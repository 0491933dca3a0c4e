// The pipelines file as every command reads it (`kayak check`, a start,
// `kayak plan`, `kayak crashtest`).
#pragma once

#include <cstdio>
#include <string>

#include "components.h"
#include "config/loader.h"
#include "engine/engine.h"

namespace kayak {

// Loads and validates the pipelines file; prints every error (file:line:
// column) and returns false on any.
inline bool LoadConfig(const std::string& path, GraphSpec* spec, bool checkpointing = true,
                       const cluster::ClusterConfig* cluster = nullptr) {
  ErrorList errors;
  LoadGraphFile(path, BuiltinComponents(), spec, &errors);
  ValidateComponents(*spec, &errors, checkpointing, cluster);
  if (!errors.empty()) {
    std::fputs(errors.ToString().c_str(), stderr);
    std::fprintf(stderr, "kayak: %zu error%s in %s\n", errors.size(),
                 errors.size() == 1 ? "" : "s", path.c_str());
    return false;
  }
  return true;
}

}  // namespace kayak
