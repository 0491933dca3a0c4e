// Messages and batches: what flows along every edge of the graph.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kayak/status.h"

namespace kayak {

// A payload (bytes, usually one JSON object), an optional key, string headers
// and a timestamp in milliseconds (event time where the input knows it, else
// arrival time). Transforms that need fields parse the payload once; the
// parsed form is kept and the payload re-serialized only when a field changed.
//
// Thread-safety: a message is owned by one thread at a time. Before a batch is
// shared with outputs and downstream pipelines the pipeline calls Seal(), after
// which payload() is a pure read and the message may be read concurrently.
class Message {
 public:
  Message() = default;
  Message(std::string payload, int64_t ts_ms) : payload_(std::move(payload)), ts_ms_(ts_ms) {}

  // The serialized payload. The message must be sealed if fields were changed.
  const std::string& payload() const;
  // The parsed payload, parsing on first use. Error if the payload is not JSON.
  Result<const nlohmann::ordered_json*> Fields();
  // Like Fields(), and marks the payload for re-serialization.
  Result<nlohmann::ordered_json*> MutableFields();
  // Brings the payload up to date with the fields and drops the parsed form
  // (a later Fields() parses again). Idempotent.
  void Seal();
  // Replaces the payload with `fields` serialized.
  void SetFields(nlohmann::ordered_json fields);

  int64_t ts_ms() const { return ts_ms_; }
  void set_ts_ms(int64_t ts) { ts_ms_ = ts; }
  const std::string& key() const { return key_; }
  void set_key(std::string k) { key_ = std::move(k); }
  std::vector<std::pair<std::string, std::string>>& headers() { return headers_; }
  const std::vector<std::pair<std::string, std::string>>& headers() const { return headers_; }
  // Bytes of payload, key and headers; what buffer limits count.
  size_t ByteSize() const;

 private:
  std::string payload_;
  std::optional<nlohmann::ordered_json> fields_;
  bool payload_stale_ = false;
  int64_t ts_ms_ = 0;
  std::string key_;
  std::vector<std::pair<std::string, std::string>> headers_;
};

struct Batch {
  std::vector<Message> messages;
  bool empty() const { return messages.empty(); }
  size_t size() const { return messages.size(); }
};

using BatchPtr = std::shared_ptr<const Batch>;

}  // namespace kayak
