// Helpers around nlohmann::json used by the expression language and transforms.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "common/field_path.h"

namespace kayak {

using Json = nlohmann::ordered_json;


// JSON text of `j` that never throws: bytes that are not UTF-8 (an id, a key
// or a body a client sent) become U+FFFD. Every JSON the server writes goes
// through it; nlohmann's plain dump() throws on such bytes.
template <class J>
std::string DumpJson(const J& j) {
  return j.dump(-1, ' ', false, J::error_handler_t::replace);
}

// Returns the value at `path`, or nullptr when any step is missing.
const Json* LookupPath(const Json& root, const FieldPath& path);

// A short type name for error messages: "null", "bool", "int", "float", ...
const char* JsonTypeName(const Json& v);

// The heap bytes `v` holds beyond its own 16 (strings, arrays, objects and
// what they hold), roughly: what a value kept in state costs.
size_t JsonHeapBytes(const Json& v);


}  // namespace kayak

namespace kayak {

// Reads an event time. A number is epoch seconds when below 1e11 (before the
// year 5138) and epoch milliseconds otherwise (`exact` is its integer value
// when it is an integer, else null); a string is RFC 3339
// ("2024-05-01T12:00:00.250Z", "...+02:00"). False for anything else.
bool EventTimeOfNumber(double x, const int64_t* exact, int64_t* out_ms);
bool EventTimeOfText(std::string_view s, int64_t* out_ms);

// Writes `v` as JSON the way dump() does, without building a string for
// numbers (jtext's writers).
void AppendJsonOf(const Json& v, std::string* out);

}  // namespace kayak
