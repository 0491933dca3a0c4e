// Messages and batches: what flows along every edge of the graph.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kayak/status.h"

namespace kayak {

// A payload (bytes, usually one JSON object), an optional key, string headers
// and a timestamp in milliseconds (event time where the input knows it, else
// arrival time). A message is its bytes: transforms read fields out of the
// payload's text and patch the text when they change one (no parsed tree is
// kept). Whether the payload is JSON is checked once, by the input that read
// it (MarkJson) or by the first transform that needs fields (CheckJson).
//
// Thread-safety: a message is owned by one thread at a time; once a batch is
// shared with outputs and downstream pipelines it is only read.
class Message {
 public:
  Message() = default;
  Message(std::string payload, int64_t ts_ms) : payload_(std::move(payload)), ts_ms_(ts_ms) {}

  const std::string& payload() const { return payload_; }
  // Replaces the payload; `json` says it is known to be valid JSON.
  void set_payload(std::string payload, bool json) {
    payload_ = std::move(payload);
    json_ = json ? JsonState::kValid : JsonState::kUnknown;
  }
  // Swaps the payload with `other` (whose bytes must be valid JSON), keeping
  // both buffers: how transforms replace a payload without allocating.
  void SwapJsonPayload(std::string* other) {
    payload_.swap(*other);
    json_ = JsonState::kValid;
  }
  // The input checked that the payload is one JSON value.
  void MarkJson() { json_ = JsonState::kValid; }
  // Whether the payload is one JSON value, checked on first call.
  Status CheckJson();
  // Whether the payload is known to be JSON (checked and found so).
  bool json_known() const { return json_ == JsonState::kValid; }

  int64_t ts_ms() const { return ts_ms_; }
  void set_ts_ms(int64_t ts) { ts_ms_ = ts; }
  const std::string& key() const { return key_; }
  void set_key(std::string k) { key_ = std::move(k); }
  std::vector<std::pair<std::string, std::string>>& headers() { return headers_; }
  const std::vector<std::pair<std::string, std::string>>& headers() const { return headers_; }
  // Bytes of payload, key and headers; what buffer limits count.
  size_t ByteSize() const;

 private:
  enum class JsonState : uint8_t { kUnknown, kValid, kInvalid };
  std::string payload_;
  JsonState json_ = JsonState::kUnknown;
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
