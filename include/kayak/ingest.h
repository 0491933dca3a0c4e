// Push ingest: http inputs register a path here, and the listener hands each
// request for that path over. Lives below the HTTP layer so that inputs do
// not depend on Beast; the listener adapts requests and responses.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "kayak/status.h"

namespace kayak {

struct IngestReply {
  unsigned status = 202;
  std::string body;             // JSON
  unsigned retry_after_secs = 0;  // sets Retry-After when non-zero
};

// Called exactly once per request, from any thread.
using IngestDone = std::function<void(IngestReply)>;

class IngestEndpoint {
 public:
  virtual ~IngestEndpoint() = default;
  // `authorization` is the Authorization header ("" if none). Must not block:
  // the listener's thread calls it.
  virtual void Post(std::string_view body, std::string_view authorization, IngestDone done) = 0;
};

// Which endpoint serves which path. Thread-safe.
class IngestRouter {
 public:
  // An error if another input holds the path.
  Status Register(const std::string& path, std::shared_ptr<IngestEndpoint> endpoint);
  void Unregister(const std::string& path, const IngestEndpoint* endpoint);
  // Empty if no input serves `path`.
  std::shared_ptr<IngestEndpoint> Find(std::string_view path) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<IngestEndpoint>, std::less<>> routes_;
};

}  // namespace kayak
