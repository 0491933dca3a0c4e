#include "kayak/message.h"

namespace kayak {

const std::string& Message::payload() const {
  KAYAK_CHECK(!payload_stale_);
  return payload_;
}

Result<const nlohmann::ordered_json*> Message::Fields() {
  if (!fields_) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(payload_, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return Status::Invalid("payload is not valid JSON");
    fields_ = std::move(j);
  }
  return static_cast<const nlohmann::ordered_json*>(&*fields_);
}

Result<nlohmann::ordered_json*> Message::MutableFields() {
  auto f = Fields();
  if (!f.ok()) return f.status();
  payload_stale_ = true;
  return &*fields_;
}

void Message::Seal() {
  if (payload_stale_) {
    payload_ = fields_->dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    payload_stale_ = false;
  }
  // The parsed form is freed here, on the thread that built it: a sealed
  // batch is often freed by an output's thread, and freeing thousands of
  // small blocks another thread allocated contends on the allocator's lock
  // with that thread (docs/benchmarks.md, kafka).
  fields_.reset();
}

void Message::SetFields(nlohmann::ordered_json fields) {
  fields_ = std::move(fields);
  payload_stale_ = true;
}

size_t Message::ByteSize() const {
  size_t n = payload_.size() + key_.size();
  for (const auto& [k, v] : headers_) n += k.size() + v.size();
  return n;
}

}  // namespace kayak
