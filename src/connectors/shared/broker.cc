#include "connectors/shared/broker.h"

#include <simdjson.h>

#include "common/base64.h"
#include "common/json_text.h"
#include "common/log.h"
#include "common/ndjson.h"

namespace kayak {

std::vector<PropDef> BrokerPayloadProps(std::string_view meta_what) {
  return {
      PropDef{"non_json", PropType::kString, false, "wrap",
              "a payload that is not JSON: `wrap` makes it {\"payload\": \"<text>\"} "
              "({\"payload_base64\": \"...\"} when it is not UTF-8), `error` counts it as an "
              "error on the card and leaves it out"}
          .OneOf({"wrap", "error"}),
      {"meta_field", PropType::kString, false, "",
       "a field to put the message's " + std::string(meta_what) +
           " under (object payloads, wrapped ones too)"},
  };
}

BrokerPayload ReadBrokerPayload(const Options& o) {
  BrokerPayload p;
  p.non_json = o.String("non_json") == "error" ? NonJson::kError : NonJson::kWrap;
  p.meta_field = o.String("meta_field");
  return p;
}

namespace {

// Inserts `"field": meta` as the first member of the object in `doc`.
void AddMeta(std::string* doc, std::string_view field, std::string_view meta) {
  const size_t brace = jtext::SkipWs(*doc, 0);
  if (brace >= doc->size() || (*doc)[brace] != '{') return;  // not an object
  std::string member;
  jtext::AppendString(&member, field);
  member += ':';
  member += meta;
  const size_t next = jtext::SkipWs(*doc, brace + 1);
  if (next >= doc->size() || (*doc)[next] != '}') member += ',';
  doc->insert(brace + 1, member);
}

}  // namespace

bool MakeBrokerPayload(std::string_view bytes, const BrokerPayload& o, std::string_view meta,
                       std::string* out, std::string* why) {
  out->clear();
  if (IsJson(bytes)) {
    out->assign(bytes);
  } else if (o.non_json == NonJson::kError) {
    *why = "the payload is not JSON (" + std::to_string(bytes.size()) + " bytes)";
    return false;
  } else if (simdjson::validate_utf8(bytes.data(), bytes.size())) {
    out->append("{\"payload\":");
    jtext::AppendString(out, bytes);
    out->push_back('}');
  } else {
    out->append("{\"payload_base64\":\"");
    AppendBase64(bytes, out);
    out->append("\"}");
  }
  if (!o.meta_field.empty()) AddMeta(out, o.meta_field, meta);
  return true;
}

bool FieldTemplate::Parse(std::string_view text, FieldTemplate* out, std::string* error) {
  *out = FieldTemplate();
  out->text_.assign(text);
  size_t i = 0;
  while (i < text.size()) {
    const size_t open = text.find("{{", i);
    if (open == std::string_view::npos) {
      out->parts_.push_back({std::string(text.substr(i)), {}, "", false});
      break;
    }
    if (open > i) out->parts_.push_back({std::string(text.substr(i, open - i)), {}, "", false});
    const size_t close = text.find("}}", open + 2);
    if (close == std::string_view::npos) {
      *error = "`{{` at character " + std::to_string(open + 1) + " is not closed by `}}`";
      return false;
    }
    std::string_view name = text.substr(open + 2, close - open - 2);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    Part p;
    p.is_field = true;
    p.name.assign(name);
    if (name.empty() || !ParseFieldPath(name, &p.path)) {
      *error = "`{{" + std::string(name) + "}}` does not name a field (a.b[0])";
      return false;
    }
    out->parts_.push_back(std::move(p));
    ++out->fields_;
    i = close + 2;
  }
  return true;
}

bool FieldTemplate::Render(std::string_view payload, std::string* out, std::string* why) const {
  out->clear();
  for (const auto& p : parts_) {
    if (!p.is_field) {
      out->append(p.literal);
      continue;
    }
    jtext::Span v;
    if (!jtext::FindPath(payload, p.path, &v)) {
      *why = "the message has no field `" + p.name + "` for `" + text_ + "`";
      return false;
    }
    const std::string_view value = v.of(payload);
    if (value.empty() || value[0] == '{' || value[0] == '[' ||
        (value[0] == '"' && value.size() == 2)) {
      const bool empty_string = value.size() == 2 && value[0] == '"';
      *why = "field `" + p.name + "` for `" + text_ + "` is " +
             (empty_string ? "an empty string" : std::string("an ") + jtext::TypeName(value));
      return false;
    }
    if (value[0] == '"') {
      jtext::DecodeString(value, out);
    } else {
      out->append(value);
    }
  }
  return true;
}

bool FieldTemplate::Render(const Message& m, std::string* out, std::string* why) const {
  if (!m.json_known() && !IsJson(m.payload())) {
    *why = "the payload is not JSON";
    return false;
  }
  return Render(m.payload(), out, why);
}

void Dropped::Report(ComponentStats* stats, std::string_view what, size_t batch_size) const {
  if (count_ + dead_ == 0) return;
  const std::string why =
      std::string(what) + ": " +
      (count_ > 0 ? "dropped " + std::to_string(count_) : std::string()) +
      (count_ > 0 && dead_ > 0 ? " and " : "") +
      (dead_ > 0 ? "sent " + std::to_string(dead_) + " to the dead letters" : std::string()) +
      " of " + std::to_string(batch_size) + " messages (not retried): " + first_;
  KLOG_WARN("{}", why);
  if (stats != nullptr) stats->RecordError(why, count_ + dead_);
}

}  // namespace kayak
