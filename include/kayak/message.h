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
    fields_.batch = 0;
  }
  // Swaps the payload with `other` (whose bytes must be valid JSON), keeping
  // both buffers: how transforms replace a payload without allocating.
  void SwapJsonPayload(std::string* other) {
    payload_.swap(*other);
    json_ = JsonState::kValid;
    fields_.batch = 0;
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
  // Where the index of the payload's top-level members is (Batch::FieldsOf):
  // which batch holds it (0: none), where in it, how many, and where the root
  // object starts. The index lives in the batch, so a copy of the message
  // has none, nor has a moved-from one; it is dropped when the payload changes.
  struct FieldsRef {
    uint64_t batch = 0;
    uint32_t at = 0, n = 0, root = 0;
    FieldsRef() = default;
    FieldsRef(const FieldsRef&) {}
    FieldsRef& operator=(const FieldsRef&) {
      batch = 0;
      return *this;
    }
    FieldsRef(FieldsRef&& o) noexcept : batch(o.batch), at(o.at), n(o.n), root(o.root) { o.batch = 0; }
    FieldsRef& operator=(FieldsRef&& o) noexcept {
      const FieldsRef moved(std::move(o));
      batch = moved.batch;
      at = moved.at;
      n = moved.n;
      root = moved.root;
      return *this;
    }
  };
  FieldsRef fields_;
};

// Where one member of a JSON object payload sits: the byte offsets of its key
// token (quotes included) and of its value.
struct FieldSpan {
  uint32_t key_begin = 0, key_end = 0;
  uint32_t value_begin = 0, value_end = 0;
};

// A message a transform could not handle, with why: set aside for the
// pipeline's dead-letter output (docs/config.md, "Dead letters").
struct Rejected {
  Message message;
  std::string reason;
};

struct Batch {
  std::vector<Message> messages;
  bool empty() const { return messages.empty(); }
  size_t size() const { return messages.size(); }
  // Set by a pipeline with a dead-letter output while its transforms run: a
  // transform's error on one message then moves that message here with the
  // reason, and the rest of the batch goes on. Null: the first error fails
  // the whole batch.
  std::vector<Rejected>* rejected = nullptr;

  // The top-level members of `m` (a message of this batch whose payload is a
  // JSON object at byte `*root`), if a transform before found them: the
  // transforms of a chain scan a message once, and keep what they found here,
  // with no allocation a message.
  bool FieldsOf(const Message& m, size_t* root, const FieldSpan** spans, size_t* n) const {
    if (m.fields_.batch == 0 || m.fields_.batch != kept_.id) return false;
    *root = m.fields_.root;
    *spans = kept_.spans.data() + m.fields_.at;
    *n = m.fields_.n;
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
  // The kept indexes: `spans` is all room, filled in up to `used`; `id` is
  // set when the first is kept and unique in the process. A copy of the
  // batch keeps none (its messages' copies have no index either).
  struct Kept {
    std::vector<FieldSpan> spans;
    size_t used = 0;
    uint64_t id = 0;
    Kept() = default;
    Kept(const Kept&) {}
    Kept& operator=(const Kept&) {
      *this = Kept();
      return *this;
    }
    Kept(Kept&&) = default;
    Kept& operator=(Kept&&) = default;
  };
  Kept kept_;
};

using BatchPtr = std::shared_ptr<const Batch>;

}  // namespace kayak
