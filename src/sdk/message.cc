#include "kayak/message.h"

#include "common/ndjson.h"

namespace kayak {

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
