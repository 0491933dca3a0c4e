// Field paths ("a.b[0].c"): how options name a field of a message.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kayak {

// One step of a field path: an object key or an array index.
struct PathStep {
  std::string key;
  int64_t index = -1;  // >= 0 for an array index step
};
using FieldPath = std::vector<PathStep>;

// Parses "a.b[0].c" into steps. Returns false on a malformed path.
bool ParseFieldPath(std::string_view text, FieldPath* out);
std::string FieldPathToString(const FieldPath& path);

}  // namespace kayak
