#include "kayak/message.h"

#include <algorithm>
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
  if (fields_.size() > spare.size() && fields_.size() <= kKeepAtMost) spare.swap(fields_);
  fields_ = {};
  used_ = 0;
  id_ = 0;
}

FieldSpan* Batch::KeepFields(Message* m, size_t root, size_t n) {
  if (m->payload_.size() >= std::numeric_limits<uint32_t>::max() ||
      used_ + n >= std::numeric_limits<uint32_t>::max()) {
    return nullptr;
  }
  if (id_ == 0) {
    static std::atomic<uint64_t> next{1};
    id_ = next.fetch_add(1, std::memory_order_relaxed);
    used_ = 0;
    if (fields_.empty()) fields_.swap(SpareFields());  // the room a batch before used
  }
  // fields_ is all room (filled in up to used_): only growing it writes to
  // the new part.
  if (used_ + n > fields_.size()) fields_.resize(std::max(fields_.size() * 2, used_ + n + 4096));
  m->fields_batch_ = id_;
  m->fields_at_ = static_cast<uint32_t>(used_);
  m->fields_n_ = static_cast<uint32_t>(n);
  m->fields_root_ = static_cast<uint32_t>(root);
  used_ += n;
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
