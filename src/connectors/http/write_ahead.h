// The http input's write-ahead to a Kafka topic (docs/cluster.md, "Posts
// that outlive their member"): each post's messages are produced to the
// topic, and the post is answered 202 once the broker has acknowledged every
// one of them (an idempotent producer, so acks=all). Any server may then read
// them back: the steps of the input's pipeline read the topic as a part of
// their own (config/loader.cc).
//
// Threading: Append from any thread (the listener's); each Done is called
// once, from the producer's poll thread, or at once when nothing could be
// queued.
#pragma once

#include <librdkafka/rdkafka.h>

#include <atomic>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <thread>

#include "common/clock.h"
#include "connectors/shared/kafka_conf.h"
#include "expr/expr.h"
#include "kayak/status.h"
#include "kayak/thread_annotations.h"

namespace kayak {

class KafkaWriteAhead {
 public:
  struct Options {
    std::string brokers;
    std::string topic;
    std::shared_ptr<const expr::Expr> key;  // null: messages go without a key
    kafka::Properties properties;           // librdkafka's, before the user's
    int64_t delivery_timeout_ms = 10000;    // a post's 503 comes after at most this
    uint64_t max_queued_bytes = 64 << 20;   // produced, not yet acknowledged
    const Clock* clock = nullptr;
  };
  // Ok once the broker has every message of the post, or why not.
  using Done = std::function<void(Status)>;

  static Result<std::unique_ptr<KafkaWriteAhead>> Open(Options options);
  ~KafkaWriteAhead();

  // Produces each line of `ndjson` (a normalized post: one message a line)
  // as one record; `done` is called once they are all acknowledged or one
  // failed. When some were produced and a later one could not be, the post
  // fails and the produced ones stay in the topic (a client's retry sends
  // them again: at least once). Returns without calling `done` when nothing
  // is produced: kInvalidArgument for a line whose key cannot be computed
  // (the client's fault), kUnavailable while closing.
  Status Append(std::string_view ndjson, Done done);

  // Messages produced and not yet acknowledged, and the total acknowledged.
  uint64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }
  uint64_t delivered() const { return delivered_.load(std::memory_order_relaxed); }
  const std::string& topic() const { return opt_.topic; }
  // Why the last delivery failed, or Ok once one succeeded after it.
  Status last_error() const;

  // Waits up to `timeout_ms` for what is in flight, fails the rest (their
  // posts get 503) and stops the poll thread. Idempotent.
  void Close(int64_t timeout_ms);

 private:
  struct Post;
  explicit KafkaWriteAhead(Options options) : opt_(std::move(options)) {}
  static void OnDelivery(rd_kafka_t*, const rd_kafka_message_t* m, void* opaque);
  void Settle(Post* post, rd_kafka_resp_err_t err, size_t messages);

  const Options opt_;
  // Held shared while a post is produced, alone while the producer closes.
  std::shared_mutex close_mu_;
  bool closed_ = false;  // under close_mu_
  rd_kafka_t* rk_ = nullptr;
  rd_kafka_topic_t* topic_ = nullptr;
  std::thread poller_;
  std::atomic<bool> stop_{false};  // the poll thread's
  std::atomic<uint64_t> in_flight_{0};
  std::atomic<uint64_t> delivered_{0};
  mutable Mutex error_mu_;
  Status last_error_ KAYAK_GUARDED_BY(error_mu_);
  // Whether last_error_ holds an error: written under error_mu_, read
  // without it by a success, which takes the lock only to clear one.
  std::atomic<bool> has_error_{false};
};

}  // namespace kayak
