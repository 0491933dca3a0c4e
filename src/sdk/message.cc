#include "kayak/message.h"

#include <atomic>
#include <limits>

#include "common/ndjson.h"

namespace kayak {

namespace {

// The memory of the last dropped index on this thread, for the next batch's:
// not an allocation and a free (and page faults) a batch.
std::vector<FieldSpan>& SpareFields() {
  thread_local std::vector<FieldSpan> spare;
  return spare;
}

}  // namespace

void Batch::DropFields() {
  constexpr size_t kKeepAtMost = 1 << 18;  // spans (4 MiB)
  std::vector<FieldSpan>& spare = SpareFields();
  if (fields_.capacity() > spare.capacity() && fields_.capacity() <= kKeepAtMost) {
    fields_.clear();
    spare.swap(fields_);
  }
  fields_ = {};
  id_ = 0;
}

FieldSpan* Batch::KeepFields(Message* m, size_t root, size_t n) {
  if (m->payload_.size() >= std::numeric_limits<uint32_t>::max() ||
      fields_.size() + n >= std::numeric_limits<uint32_t>::max()) {
    return nullptr;
  }
  if (id_ == 0) {
    static std::atomic<uint64_t> next{1};
    id_ = next.fetch_add(1, std::memory_order_relaxed);
    fields_.clear();
    if (fields_.capacity() == 0) fields_.swap(SpareFields());  // memory a batch before used
    fields_.reserve(messages.size() * 16);  // room for a few sets of members a message
  }
  m->fields_batch_ = id_;
  m->fields_at_ = static_cast<uint32_t>(fields_.size());
  m->fields_n_ = static_cast<uint32_t>(n);
  m->fields_root_ = static_cast<uint32_t>(root);
  fields_.resize(fields_.size() + n);
  return fields_.data() + m->fields_at_;
}

Status Message::CheckJson() {
  if (json_ == JsonState::kUnknown) json_ = IsJson(payload_) ? JsonState::kValid : JsonState::kInvalid;
  if (json_ == JsonState::kInvalid) return Status::Invalid("payload is not valid JSON");
  return Status::Ok();
}

size_t Message::ByteSize() const {
  size_t n = payload_.size() + key_.size();
  for (const auto& [k, v] : headers_) n += k.size() + v.size();
  return n;
}

}  // namespace kayak
