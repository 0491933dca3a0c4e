#include "kayak/ingest.h"

namespace kayak {

namespace {
thread_local IngestAnswerScope* current_scope = nullptr;
}  // namespace

IngestAnswerScope::IngestAnswerScope() : outer_(current_scope) { current_scope = this; }

IngestAnswerScope::~IngestAnswerScope() {
  current_scope = outer_;
  for (auto& [key, flush] : at_close_) flush();
}

IngestAnswerScope* IngestAnswerScope::Current() { return current_scope; }

bool IngestAnswerScope::AtClose(const void* key, std::function<void()> flush) {
  for (const auto& entry : at_close_) {
    if (entry.first == key) return false;
  }
  at_close_.emplace_back(key, std::move(flush));
  return true;
}

Status IngestRouter::Register(const std::string& path, std::shared_ptr<IngestEndpoint> endpoint) {
  std::lock_guard lock(mu_);
  auto [it, inserted] = routes_.emplace(path, std::move(endpoint));
  if (!inserted) return Status::Invalid("another http input already serves " + path);
  return Status::Ok();
}

void IngestRouter::Unregister(const std::string& path, const IngestEndpoint* endpoint) {
  std::lock_guard lock(mu_);
  auto it = routes_.find(path);
  if (it != routes_.end() && it->second.get() == endpoint) routes_.erase(it);
}

std::shared_ptr<IngestEndpoint> IngestRouter::Find(std::string_view path) const {
  std::lock_guard lock(mu_);
  auto it = routes_.find(path);
  return it == routes_.end() ? nullptr : it->second;
}

}  // namespace kayak
