// Helpers around nlohmann::json used by the expression language and transforms.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace kayak {

using Json = nlohmann::ordered_json;

// One step of a field path: an object key or an array index.
struct PathStep {
  std::string key;
  int64_t index = -1;  // >= 0 for an array index step
};
using FieldPath = std::vector<PathStep>;

// Parses "a.b[0].c" into steps. Returns false on a malformed path.
bool ParseFieldPath(std::string_view text, FieldPath* out);
std::string FieldPathToString(const FieldPath& path);

// Returns the value at `path`, or nullptr when any step is missing.
const Json* LookupPath(const Json& root, const FieldPath& path);
// Returns a slot for `path`, creating objects on the way. nullptr if a step
// walks through a non-object (or an array index out of range).
Json* MutablePath(Json& root, const FieldPath& path);
// Removes the value at `path`; returns the removed value's presence.
bool ErasePath(Json& root, const FieldPath& path);

// A short type name for error messages: "null", "bool", "int", "float", ...
const char* JsonTypeName(const Json& v);

// Renders a value as a map key: strings as-is, anything else as compact JSON.
std::string JsonKeyString(const Json& v);

}  // namespace kayak

namespace kayak {

// Reads an event time: a number is epoch seconds when below 1e11 (before the
// year 5138) and epoch milliseconds otherwise; a string is RFC 3339
// ("2024-05-01T12:00:00.250Z", "...+02:00"). Returns false otherwise.
bool ParseEventTimeMs(const Json& v, int64_t* out_ms);

}  // namespace kayak
