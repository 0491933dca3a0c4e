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

namespace kayak {

// "message 3 of the batch: <what>", for transform errors.
inline std::string AtMessage(size_t i, const std::string& what) {
  return "message " + std::to_string(i + 1) + " of the batch: " + what;
}

// Calls fn(message) for each message; the first error, with the message's
// place in the batch, fails the whole batch.
template <typename F>
Status ForEachMessage(Batch* batch, F&& fn) {
  for (size_t i = 0; i < batch->messages.size(); ++i) {
    Status st = fn(batch->messages[i]);
    if (!st.ok()) return Status::Invalid(AtMessage(i, st.message()));
  }
  return Status::Ok();
}

// Keeps the messages for which fn(message, &keep) sets keep, in order; the
// first error fails the whole batch.
template <typename F>
Status KeepMessages(Batch* batch, F&& fn) {
  auto& msgs = batch->messages;
  size_t kept = 0;
  for (size_t i = 0; i < msgs.size(); ++i) {
    bool keep = false;
    Status st = fn(msgs[i], &keep);
    if (!st.ok()) return Status::Invalid(AtMessage(i, st.message()));
    if (keep) {
      if (kept != i) msgs[kept] = std::move(msgs[i]);
      ++kept;
    }
  }
  msgs.resize(kept);
  return Status::Ok();
}

}  // namespace kayak
