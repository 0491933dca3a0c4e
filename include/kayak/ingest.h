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
#include <utility>
#include <vector>

#include "kayak/status.h"

namespace kayak {

struct IngestReply {
  unsigned status = 202;
  std::string body;             // JSON
  unsigned retry_after_secs = 0;  // sets Retry-After when non-zero
  std::string content_type;       // "" is application/json
};

// Called exactly once per request, from any thread.
using IngestDone = std::function<void(IngestReply)>;

// Groups the answers one thread gives: while a scope is open on a thread,
// the listener may hold the answers given there (IngestDone calls) and hand
// them to its own thread together when the scope closes, one wake-up for a
// batch of posts instead of one each. An input that answers a batch at once
// (the http input's log after an fdatasync) opens one around it. Scopes
// nest; the innermost holds.
class IngestAnswerScope {
 public:
  IngestAnswerScope();
  ~IngestAnswerScope();  // runs what AtClose registered, in order
  IngestAnswerScope(const IngestAnswerScope&) = delete;
  IngestAnswerScope& operator=(const IngestAnswerScope&) = delete;

  // The innermost scope open on this thread, or null.
  static IngestAnswerScope* Current();
  // Runs `flush` when this scope closes. False (and nothing registered)
  // when `key` registered one already.
  bool AtClose(const void* key, std::function<void()> flush);

 private:
  IngestAnswerScope* outer_;
  std::vector<std::pair<const void*, std::function<void()>>> at_close_;
};

class IngestEndpoint {
 public:
  virtual ~IngestEndpoint() = default;
  // A request Admit let in. `authorization` is the Authorization header (""
  // if none). Must not block: the listener's thread calls it.
  virtual void Post(std::string_view body, std::string_view authorization, IngestDone done) = 0;
  // Asked on the request's header, before its body is read (and before
  // Post): false, with `refusal` filled in, turns the post away unread (a
  // missing token).
  virtual bool Admit(std::string_view authorization, IngestReply* refusal) {
    (void)authorization;
    (void)refusal;
    return true;
  }
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
