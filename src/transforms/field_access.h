// Shared helpers for transforms that read message fields.
#pragma once

#include <string>

#include "common/json_util.h"
#include "kayak/message.h"
#include "kayak/status.h"

namespace kayak {

// The parsed fields of `m`, which must be a JSON object.
inline Result<Json*> ObjectFields(Message& m) {
  auto f = m.MutableFields();
  if (!f.ok()) return f.status();
  if (!(*f)->is_object()) {
    return Status::Invalid(std::string("payload is a JSON ") + JsonTypeName(**f) +
                           ", not an object");
  }
  return *f;
}

// Parses a field path option, recording a config error when malformed.
template <typename OptionsT>
bool PathOption(const OptionsT& o, const std::string& name, FieldPath* out) {
  if (!ParseFieldPath(o.String(name), out)) {
    o.Error(name, "'" + o.String(name) + "' is not a field path (like a.b[0])");
    return false;
  }
  return true;
}

// The text of a key field: strings as they are, other values as JSON.
inline Result<std::string> KeyOf(const Json& fields, const FieldPath& path) {
  const Json* v = LookupPath(fields, path);
  if (v == nullptr || v->is_null()) {
    return Status::Invalid("key field '" + FieldPathToString(path) + "' is missing");
  }
  return JsonKeyString(*v);
}

}  // namespace kayak
