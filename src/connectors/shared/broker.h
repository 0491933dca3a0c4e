// What the message-broker connectors share (mqtt, nats, redis): how a
// payload that is not JSON becomes a message, where its metadata goes, and
// the `{{field}}` templates of a topic, subject, channel or stream.
// docs/components.md.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/field_path.h"
#include "kayak/component.h"

namespace kayak {

// What an input does with a payload that is not JSON (`non_json`).
enum class NonJson {
  kWrap,   // {"payload": "<text>"}, or {"payload_base64": "..."} when not UTF-8
  kError,  // counted as an error on the card and left out
};

struct BrokerPayload {
  NonJson non_json = NonJson::kWrap;
  std::string meta_field;  // "" = no metadata in the message
};

// The options above as a component declares them, and as its factory reads
// them.
std::vector<PropDef> BrokerPayloadProps(std::string_view meta_what);
BrokerPayload ReadBrokerPayload(const Options& o);

// Builds a message's payload from the bytes a broker delivered into `out`
// (replaced). `meta` is the text of a JSON object ("{...}") put under
// meta_field when the message is an object (added to a wrapped payload too).
// False with `why` when the bytes are not JSON and non_json is kError.
bool MakeBrokerPayload(std::string_view bytes, const BrokerPayload& o, std::string_view meta,
                       std::string* out, std::string* why);

// A topic, subject, channel or stream name with `{{field}}` parts, each
// replaced by that field of the message: a string as it is, another value as
// its JSON text.
class FieldTemplate {
 public:
  // False with `error` on an unclosed `{{` or a malformed field path.
  static bool Parse(std::string_view text, FieldTemplate* out, std::string* error);
  bool fixed() const { return fields_ == 0; }
  const std::string& text() const { return text_; }
  // The name for `payload` into `out` (replaced). False with `why` when the
  // payload is not a JSON object holding every field, or a field is an
  // empty string, an object or an array.
  bool Render(std::string_view payload, std::string* out, std::string* why) const;
  // The same for a message, whose payload must be JSON (checked unless known).
  bool Render(const Message& m, std::string* out, std::string* why) const;

 private:
  struct Part {
    std::string literal;  // when !is_field
    FieldPath path;
    std::string name;
    bool is_field = false;
  };
  std::string text_;
  std::vector<Part> parts_;
  size_t fields_ = 0;
};

// Messages an output leaves out of a batch (a name that cannot be made, a
// refusal): never retried, sent to the pipeline's dead letters when it has
// them, else dropped; counted on the card and logged once per batch.
class Dropped {
 public:
  void Add(Refusals* output, const Message& m, const std::string& why) {
    if (count_ + dead_++ == 0) first_ = why;
    if (!output->Refuse(m, why)) {
      --dead_;
      ++count_;
    }
  }
  size_t count() const { return count_ + dead_; }
  // "<what>: dropped N of M messages (not retried): <first reason>", or
  // "sent N of M messages to the dead letters".
  void Report(ComponentStats* stats, std::string_view what, size_t batch_size) const;

 private:
  size_t count_ = 0;  // dropped
  size_t dead_ = 0;   // sent to the dead letters
  std::string first_;
};

}  // namespace kayak
