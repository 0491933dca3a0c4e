#include "connectors/s3/blobs.h"

#include <chrono>
#include <mutex>
#include <thread>

namespace kayak::s3 {
namespace {

// How often a request that failed for a while (a 5xx, SlowDown, a broken
// connection) is tried, with 100 ms, then 400 ms between.
constexpr int kTries = 3;

class S3Blobs final : public Blobs {
 public:
  S3Blobs(Endpoint e, std::string prefix)
      : bucket_(e.bucket), prefix_(std::move(prefix)), client_(std::move(e)) {}

  std::string Where(const std::string& path) const override {
    return "s3://" + bucket_ + "/" + Key(path);
  }

  Status List(const std::string& dir, std::vector<std::string>* names) const override {
    const std::string under = Key(dir) + "/";
    return Retried([&] {
      names->clear();
      return client_.ListKeys(under, [&](std::string_view key) {
        if (key.size() <= under.size()) return;
        key.remove_prefix(under.size());
        if (key.find('/') == std::string_view::npos) names->emplace_back(key);
      });
    });
  }

  Result<std::string> Read(const std::string& path) const override {
    std::string body;
    KAYAK_RETURN_IF_ERROR(Retried([&] { return client_.Get(Key(path), &body); }));
    return body;
  }

  Result<int64_t> Size(const std::string& path) const override {
    bool exists = false;
    uint64_t size = 0;
    KAYAK_RETURN_IF_ERROR(Retried([&] { return client_.Exists(Key(path), &exists, &size); }));
    return exists ? static_cast<int64_t>(size) : int64_t{-1};
  }

  Status Write(const std::string& path, std::string_view head, std::string_view body,
               bool durable) override {
    (void)durable;  // a PUT that S3 answered 200 is stored durably
    std::string whole;
    whole.reserve(head.size() + body.size());
    whole.append(head).append(body);
    return Retried([&] { return client_.Put(Key(path), whole); });
  }

  // Not retried here: a PUT whose answer was lost may have landed, and a
  // second try would then find the key taken by this very writer. The
  // shard log reads itself again and tells its own entry apart.
  Result<bool> WriteNew(const std::string& path, std::string_view bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    bool placed = false;
    KAYAK_RETURN_IF_ERROR(client_.PutIfAbsent(Key(path), bytes, &placed));
    return placed;
  }

  Status Remove(const std::string& path) override {
    return Retried([&] { return client_.Delete(Key(path)); });
  }

 private:
  std::string Key(const std::string& path) const {
    if (prefix_.empty()) return path;
    return path.empty() ? prefix_ : prefix_ + "/" + path;
  }

  // One request at a time on the client's connection.
  template <typename F>
  Status Retried(F&& request) const {
    Status st;
    for (int attempt = 0; attempt < kTries; ++attempt) {
      if (attempt > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100 << (2 * (attempt - 1))));
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        st = request();
      }
      if (st.code() != Code::kUnavailable) return st;
    }
    return st;
  }

  const std::string bucket_;
  const std::string prefix_;
  mutable std::mutex mu_;
  mutable Client client_;
};

}  // namespace

Status ParseStoreUrl(const std::string& url, std::string* bucket, std::string* prefix) {
  constexpr std::string_view kScheme = "s3://";
  if (url.rfind(kScheme, 0) != 0) return Status::Invalid("not s3://bucket/prefix: " + url);
  const std::string rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  *bucket = rest.substr(0, slash);
  *prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (bucket->empty() || (slash != std::string::npos && prefix->empty()) ||
      (!prefix->empty() && prefix->back() == '/') ||
      prefix->find("//") != std::string::npos) {
    return Status::Invalid("cluster.store '" + url +
                           "': name a bucket and an optional prefix, s3://bucket/prefix, "
                           "without a '/' at its end");
  }
  return Status::Ok();
}

std::shared_ptr<Blobs> MakeBlobs(Endpoint e, std::string prefix) {
  return std::make_shared<S3Blobs>(std::move(e), std::move(prefix));
}

}  // namespace kayak::s3
