#include "kayak/ingest.h"

namespace kayak {

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
