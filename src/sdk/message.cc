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
  if (kept_.spans.size() > spare.size() && kept_.spans.size() <= kKeepAtMost) {
    spare.swap(kept_.spans);
  }
  kept_ = Kept();
}

FieldSpan* Batch::KeepFields(Message* m, size_t root, size_t n) {
  if (m->payload_.size() >= std::numeric_limits<uint32_t>::max() ||
      kept_.used + n >= std::numeric_limits<uint32_t>::max()) {
    return nullptr;
  }
  if (kept_.id == 0) {
    static std::atomic<uint64_t> next{1};
    kept_.id = next.fetch_add(1, std::memory_order_relaxed);
    kept_.used = 0;
    if (kept_.spans.empty()) kept_.spans.swap(SpareFields());  // the room a batch before used
  }
  // Only growing the room writes to its new part.
  if (kept_.used + n > kept_.spans.size()) {
    kept_.spans.resize(std::max(kept_.spans.size() * 2, kept_.used + n + 4096));
  }
  m->fields_.batch = kept_.id;
  m->fields_.at = static_cast<uint32_t>(kept_.used);
  m->fields_.n = static_cast<uint32_t>(n);
  m->fields_.root = static_cast<uint32_t>(root);
  kept_.used += n;
  return kept_.spans.data() + m->fields_.at;
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
