// Shared helpers for transforms that read and change message fields: the
// payload is read as text (expr::Document) and patched in place (jtext), never
// parsed into a tree.
#pragma once

#include <string>

#include "common/json_text.h"
#include "kayak/kept_fields.h"
#include "common/ndjson.h"
#include "common/json_util.h"
#include "expr/value.h"
#include "kayak/message.h"
#include "kayak/status.h"

namespace kayak {

// Opens `m`'s payload as `doc`: an error if it is not JSON, or (with
// `object`) not a JSON object. `m` is a message of `batch`: the index of its
// top-level members is taken from the batch when a transform before found it,
// else found here and kept there for the transforms after.
inline Status OpenFields(Batch* batch, Message& m, expr::Document* doc, bool object) {
  size_t root = 0;
  const FieldSpan* spans = nullptr;
  size_t n = 0;
  if (batch->FieldsOf(m, &root, &spans, &n)) {
    jtext::Member* top = doc->ResetIndexed(m.payload(), root, n);
    for (size_t i = 0; i < n; ++i) {
      top[i] = jtext::Member{{spans[i].key_begin, spans[i].key_end},
                             {spans[i].value_begin, spans[i].value_end}};
    }
    return Status::Ok();
  }
  if (!m.json_known()) {
    // Checked here, once: the check finds the members as well.
    bool indexed = false;
    thread_local std::vector<jtext::Member> found;
    if (IsJsonIndexed(m.payload(), 0, &indexed, &root, &found)) {
      m.MarkJson();
      if (indexed) {
        KeepMembers(batch, &m, root, found);
        return OpenFields(batch, m, doc, object);  // from the batch, as kept
      }
    }
  }
  KAYAK_RETURN_IF_ERROR(m.CheckJson());
  doc->Reset(m.payload());
  const std::string& p = m.payload();
  const size_t b = jtext::SkipWs(p, 0);
  if (p[b] != '{') {
    if (!object) return Status::Ok();
    size_t e = p.size();
    while (e > b && jtext::IsWs(p[e - 1])) --e;
    return Status::Invalid(std::string("payload is a JSON ") +
                           jtext::TypeName(std::string_view(p).substr(b, e - b)) +
                           ", not an object");
  }
  if (doc->RootIsObject()) KeepMembers(batch, &m, doc->root(), doc->members());
  return Status::Ok();
}

// Swaps `m`'s payload with `now`, which a set made of the payload `doc`
// read, and keeps in `batch` the new payload's members `members` (found by
// the set; the root object starts where it did).
inline void SwapPayloadKeepFields(Batch* batch, Message& m, const expr::Document& doc,
                                  std::string* now, const std::vector<jtext::Member>& members) {
  m.SwapJsonPayload(now);
  KeepMembers(batch, &m, doc.root(), members);
}

// Sets the field at `path` of `m` (a message of `batch`) to the JSON text
// `json`, building the new payload in `buf` (whose memory the message keeps;
// `buf` gets the old one). `doc` is m's payload, opened by OpenFields. A
// top-level field is set with its index, and the new payload's index is kept
// in the batch; `members` is room for it.
inline Status SetField(Batch* batch, Message& m, const expr::Document& doc, const FieldPath& path,
                       std::string_view json, std::string* buf,
                       std::vector<jtext::Member>* members) {
  const bool top = path.size() == 1 && path[0].index < 0;
  if (!(top ? doc.SetTop(path[0].key, json, buf, members)
            : jtext::SetPath(m.payload(), path, json, buf))) {
    return Status::Invalid("cannot set '" + FieldPathToString(path) +
                           "': a parent is not an object");
  }
  if (top) {
    SwapPayloadKeepFields(batch, m, doc, buf, *members);
  } else {
    m.SwapJsonPayload(buf);
  }
  return Status::Ok();
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

// The text of a key field: strings as they are, other values as compact JSON
// (the way nlohmann wrote them: 1.50 is "1.5").
inline Status KeyOf(const expr::Document& doc, const FieldPath& path, expr::Scratch* scratch,
                    std::string* out) {
  const expr::Value v = doc.Get(path, scratch);
  out->clear();
  if (v.missing() || v.type == expr::Value::Type::kNull) {
    return Status::Invalid("key field '" + FieldPathToString(path) + "' is missing");
  }
  expr::AppendKey(v, out);
  return Status::Ok();
}

// In a cluster (docs/cluster.md) keyed state moves with the input partition
// of the message that wrote it, and is found again by hashing its key as
// the producers hashed the message's Kafka key: so a key of keyed state must
// be that Kafka key. A write under another key is refused, naming both.
inline Status FollowsPartition(const std::string& key, const Message& m, const FieldPath& path) {
  if (key == m.key()) return Status::Ok();
  auto shown = [](const std::string& s) { return s.size() > 64 ? s.substr(0, 64) + "..." : s; };
  return Status::Invalid(
      "in a cluster a key of keyed state must be the message's Kafka key, which its partition "
      "follows: key field '" + FieldPathToString(path) + "' is '" + shown(key) +
      "', the message's key '" + shown(m.key()) +
      "' (a repartition step before it keys the messages by that field)");
}

// A value read from a message as a JSON tree, for state that holds trees
// (buckets). Scalars are built directly; arrays and objects are parsed.
inline Json ToJson(const expr::Value& v) {
  switch (v.type) {
    case expr::Value::Type::kBool: return Json(v.b);
    case expr::Value::Type::kInt: return Json(v.i);
    case expr::Value::Type::kFloat: return v.wide_int ? Json::parse(v.json) : Json(v.d);
    case expr::Value::Type::kString: return Json(std::string(v.str));
    case expr::Value::Type::kArray:
    case expr::Value::Type::kObject: return Json::parse(v.json);
    default: return Json(nullptr);
  }
}

}  // namespace kayak

namespace kayak {

// "message 3 of the batch: <what>", for transform errors.
inline std::string AtMessage(size_t i, const std::string& what) {
  return "message " + std::to_string(i + 1) + " of the batch: " + what;
}

// Keeps the messages for which fn(message, &keep) sets keep, in order. An
// error on a message fails the whole batch, with the message's place in it;
// with a dead-letter output (batch->rejected) the message goes there with
// the error instead, and the rest go on.
template <typename F>
Status KeepMessages(Batch* batch, F&& fn) {
  auto& msgs = batch->messages;
  size_t kept = 0;
  for (size_t i = 0; i < msgs.size(); ++i) {
    bool keep = false;
    Status st = fn(msgs[i], &keep);
    if (!st.ok()) {
      if (batch->rejected == nullptr) return Status::Invalid(AtMessage(i, st.message()));
      batch->rejected->push_back(Rejected{std::move(msgs[i]), st.message()});
      continue;
    }
    if (keep) {
      if (kept != i) msgs[kept] = std::move(msgs[i]);
      ++kept;
    }
  }
  msgs.resize(kept);
  return Status::Ok();
}

// Calls fn(message) for each message; an error is handled as KeepMessages
// handles it.
template <typename F>
Status ForEachMessage(Batch* batch, F&& fn) {
  if (batch->rejected == nullptr) {
    for (size_t i = 0; i < batch->messages.size(); ++i) {
      Status st = fn(batch->messages[i]);
      if (!st.ok()) return Status::Invalid(AtMessage(i, st.message()));
    }
    return Status::Ok();
  }
  return KeepMessages(batch, [&](Message& m, bool* keep) {
    *keep = true;
    return fn(m);
  });
}

}  // namespace kayak
