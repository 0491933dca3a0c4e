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
  // A copy has the same bytes but not the index of its members (which lives
  // in the original's batch).
  Message(const Message& o)
      : payload_(o.payload_), json_(o.json_), ts_ms_(o.ts_ms_), key_(o.key_), headers_(o.headers_) {}
  Message& operator=(const Message& o) {
    if (this != &o) {
      payload_ = o.payload_;
      json_ = o.json_;
      ts_ms_ = o.ts_ms_;
      key_ = o.key_;
      headers_ = o.headers_;
      fields_batch_ = 0;
    }
    return *this;
  }
  // A moved-from message keeps no index.
  Message(Message&& o) noexcept
      : payload_(std::move(o.payload_)),
        json_(o.json_),
        ts_ms_(o.ts_ms_),
        key_(std::move(o.key_)),
        headers_(std::move(o.headers_)),
        fields_batch_(o.fields_batch_),
        fields_at_(o.fields_at_),
        fields_n_(o.fields_n_),
        fields_root_(o.fields_root_) {
    o.fields_batch_ = 0;
  }
  Message& operator=(Message&& o) noexcept {
    if (this != &o) {
      payload_ = std::move(o.payload_);
      json_ = o.json_;
      ts_ms_ = o.ts_ms_;
      key_ = std::move(o.key_);
      headers_ = std::move(o.headers_);
      fields_batch_ = o.fields_batch_;
      fields_at_ = o.fields_at_;
      fields_n_ = o.fields_n_;
      fields_root_ = o.fields_root_;
      o.fields_batch_ = 0;
    }
    return *this;
  }

  const std::string& payload() const { return payload_; }
  // Replaces the payload; `json` says it is known to be valid JSON.
  void set_payload(std::string payload, bool json) {
    payload_ = std::move(payload);
    json_ = json ? JsonState::kValid : JsonState::kUnknown;
    fields_batch_ = 0;
  }
  // Swaps the payload with `other` (whose bytes must be valid JSON), keeping
  // both buffers: how transforms replace a payload without allocating.
  void SwapJsonPayload(std::string* other) {
    payload_.swap(*other);
    json_ = JsonState::kValid;
    fields_batch_ = 0;
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
  friend struct Batch;
  enum class JsonState : uint8_t { kUnknown, kValid, kInvalid };
  std::string payload_;
  JsonState json_ = JsonState::kUnknown;
  int64_t ts_ms_ = 0;
  std::string key_;
  std::vector<std::pair<std::string, std::string>> headers_;
  // The index of the payload's top-level members (Batch::FieldsOf): which
  // batch holds it (0: none), where, how many, and where the root object
  // starts. Dropped when the payload changes.
  uint64_t fields_batch_ = 0;
  uint32_t fields_at_ = 0;
  uint32_t fields_n_ = 0;
  uint32_t fields_root_ = 0;
};

// Where one member of a JSON object payload sits: the byte offsets of its key
// token (quotes included) and of its value.
struct FieldSpan {
  uint32_t key_begin = 0, key_end = 0;
  uint32_t value_begin = 0, value_end = 0;
};

struct Batch {
  std::vector<Message> messages;
  bool empty() const { return messages.empty(); }
  size_t size() const { return messages.size(); }

  Batch() = default;
  // A copy's messages have no index (it stays with the original's).
  Batch(const Batch& o) : messages(o.messages) {}
  Batch& operator=(const Batch& o) {
    if (this != &o) {
      messages = o.messages;
      fields_.clear();
      used_ = 0;
      id_ = 0;
    }
    return *this;
  }
  Batch(Batch&&) = default;
  Batch& operator=(Batch&&) = default;

  // The top-level members of `m` (a message of this batch whose payload is a
  // JSON object at byte `*root`), if a transform before found them: the
  // transforms of a chain scan a message once, and keep what they found here,
  // with no allocation a message.
  bool FieldsOf(const Message& m, size_t* root, const FieldSpan** spans, size_t* n) const {
    if (m.fields_batch_ == 0 || m.fields_batch_ != id_) return false;
    *root = m.fields_root_;
    *spans = fields_.data() + m.fields_at_;
    *n = m.fields_n_;
    return true;
  }
  // Room for the `n` members of `m`'s payload, an object at byte `root`, to
  // be filled in by the caller; null when the payload is too long to index
  // with 32-bit offsets.
  FieldSpan* KeepFields(Message* m, size_t root, size_t n);
  // Frees the kept indexes (once the batch leaves the transforms); their
  // memory is kept for the next batch of the thread.
  void DropFields();

 private:
  std::vector<FieldSpan> fields_;  // room; the first used_ are kept indexes
  size_t used_ = 0;
  uint64_t id_ = 0;  // set when the first index is kept; unique in the process
};

using BatchPtr = std::shared_ptr<const Batch>;

}  // namespace kayak
