// Helpers around nlohmann::json used by the expression language and transforms.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "common/field_path.h"

namespace kayak {

using Json = nlohmann::ordered_json;


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
// The same for a number (`exact` is its integer value when it is an integer,
// else null) and for a string's text.
bool EventTimeOfNumber(double x, const int64_t* exact, int64_t* out_ms);
bool EventTimeOfText(std::string_view s, int64_t* out_ms);

// Writes `v` as JSON the way dump() does, without building a string for
// numbers (jtext's writers).
void AppendJsonOf(const Json& v, std::string* out);

}  // namespace kayak
