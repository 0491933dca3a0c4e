#include "connectors/http/write_ahead.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <vector>

#include "common/log.h"

namespace kayak {

// One post on its way: settled when its last message is acknowledged or
// fails. Owned by its messages (freed by the last to settle).
struct KafkaWriteAhead::Post {
  std::atomic<size_t> left{0};
  std::atomic<bool> failed{false};
  rd_kafka_resp_err_t first_error = RD_KAFKA_RESP_ERR_NO_ERROR;  // written before `failed`
  Done done;
};

Result<std::unique_ptr<KafkaWriteAhead>> KafkaWriteAhead::Open(Options options) {
  std::unique_ptr<KafkaWriteAhead> w(new KafkaWriteAhead(std::move(options)));
  const Options& o = w->opt_;
  // Idempotent: the producer's own retries write a message once, in order.
  // message.timeout.ms bounds how long a post waits for its answer. A post
  // waits at most 1 ms for others to share its produce request (librdkafka's
  // 5 ms default is made for throughput; a client waits for each post):
  // docs/benchmarks.md, "http ingest written ahead to Kafka".
  kafka::Properties p = {
      {"bootstrap.servers", o.brokers},
      {"enable.idempotence", "true"},
      {"linger.ms", "1"},
      {"message.timeout.ms", std::to_string(o.delivery_timeout_ms)},
      {"queue.buffering.max.kbytes", std::to_string(std::max<uint64_t>(1, o.max_queued_bytes >> 10))},
  };
  for (const auto& kv : o.properties) p.push_back(kv);
  std::string error;
  rd_kafka_conf_t* conf = kafka::MakeConf(p, &error);
  if (conf == nullptr) return Status::Invalid("http input (kafka write-ahead): " + error);
  rd_kafka_conf_set_dr_msg_cb(conf, &KafkaWriteAhead::OnDelivery);
  rd_kafka_conf_set_opaque(conf, w.get());
  char err[512];
  w->rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
  if (w->rk_ == nullptr) {
    return Status::Invalid(std::string("http input (kafka write-ahead): ") + err);
  }
  w->topic_ = rd_kafka_topic_new(w->rk_, o.topic.c_str(), nullptr);
  KafkaWriteAhead* self = w.get();
  w->poller_ = std::thread([self] {
    while (!self->stop_.load(std::memory_order_acquire)) rd_kafka_poll(self->rk_, 100);
  });
  return w;
}

KafkaWriteAhead::~KafkaWriteAhead() { Close(0); }

Status KafkaWriteAhead::last_error() const {
  MutexLock lock(error_mu_);
  return last_error_;
}

Status KafkaWriteAhead::Append(std::string_view ndjson, Done done) {
  // The lines, and each one's key, before anything is produced: a post
  // with a line whose key fails goes nowhere.
  struct Line {
    std::string_view payload;
    std::string key;
    bool keyed = false;
  };
  // Kept per listener thread: a post allocates only its keys' bytes.
  thread_local std::vector<Line> lines;
  thread_local expr::Document doc("");
  thread_local expr::Scratch scratch;
  lines.clear();
  size_t start = 0;
  while (start < ndjson.size()) {
    size_t nl = ndjson.find('\n', start);
    if (nl == std::string_view::npos) nl = ndjson.size();
    if (nl > start) {
      Line line{ndjson.substr(start, nl - start), {}, false};
      if (opt_.key != nullptr) {
        doc.Reset(line.payload);
        scratch.Reset();
        expr::Value v;
        Status st = opt_.key->Eval(doc, &scratch, *opt_.clock, &v);
        if (st.ok() && v.missing()) st = Status::Invalid("it names a missing field");
        if (!st.ok()) {
          return Status::Invalid("message " + std::to_string(lines.size() + 1) + ": its key (" +
                                 opt_.key->text() + ") cannot be computed: " + st.message());
        }
        expr::AppendKey(v, &line.key);
        line.keyed = true;
      }
      lines.push_back(std::move(line));
    }
    start = nl + 1;
  }
  std::shared_lock<std::shared_mutex> open(close_mu_);
  if (closed_) return Status::Unavailable("the input is stopping");
  if (lines.empty()) {
    done(Status::Ok());
    return Status::Ok();
  }
  auto* post = new Post;
  post->done = std::move(done);
  post->left.store(lines.size(), std::memory_order_relaxed);
  in_flight_.fetch_add(lines.size(), std::memory_order_relaxed);
  for (size_t i = 0; i < lines.size(); ++i) {
    const Line& l = lines[i];
    const int rc = rd_kafka_produce(
        topic_, RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY, const_cast<char*>(l.payload.data()),
        l.payload.size(), l.keyed ? l.key.data() : nullptr, l.keyed ? l.key.size() : 0, post);
    if (rc != 0) {
      // This one and the rest are not produced; what was settles by itself.
      Settle(post, rd_kafka_last_error(), lines.size() - i);
      return Status::Ok();
    }
  }
  return Status::Ok();
}

void KafkaWriteAhead::OnDelivery(rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
  auto* self = static_cast<KafkaWriteAhead*>(opaque);
  self->Settle(static_cast<Post*>(m->_private), m->err, 1);
}

void KafkaWriteAhead::Settle(Post* post, rd_kafka_resp_err_t err, size_t messages) {
  in_flight_.fetch_sub(messages, std::memory_order_relaxed);
  if (err) {
    {
      MutexLock lock(error_mu_);
      if (!post->failed.load(std::memory_order_relaxed)) post->first_error = err;
      post->failed.store(true, std::memory_order_release);
      last_error_ = Status::Unavailable(std::string("kafka topic ") + opt_.topic + ": " +
                                        rd_kafka_err2str(err));
      has_error_.store(true, std::memory_order_relaxed);
    }
  } else {
    delivered_.fetch_add(messages, std::memory_order_relaxed);
    // The lock only when an error is on record: a success is the common case.
    if (has_error_.load(std::memory_order_relaxed)) {
      MutexLock lock(error_mu_);
      last_error_ = Status::Ok();
      has_error_.store(false, std::memory_order_relaxed);
    }
  }
  if (post->left.fetch_sub(messages, std::memory_order_acq_rel) != messages) return;
  if (post->failed.load(std::memory_order_acquire)) {
    rd_kafka_resp_err_t first;
    {
      MutexLock lock(error_mu_);
      first = post->first_error;
    }
    const bool full = first == RD_KAFKA_RESP_ERR__QUEUE_FULL;
    post->done(Status::Unavailable(
        full ? std::string("the input's backlog to kafka is full")
             : std::string("kafka topic ") + opt_.topic + " did not take it: " +
                   rd_kafka_err2str(first)));
  } else {
    post->done(Status::Ok());
  }
  delete post;
}

void KafkaWriteAhead::Close(int64_t timeout_ms) {
  {
    std::unique_lock<std::shared_mutex> alone(close_mu_);
    if (closed_ || rk_ == nullptr) return;
    closed_ = true;  // no post is produced from here on
  }
  stop_.store(true, std::memory_order_release);
  if (poller_.joinable()) poller_.join();
  // Serves the reports of what is delivered meanwhile, then fails the rest.
  rd_kafka_flush(rk_, static_cast<int>(timeout_ms));
  rd_kafka_purge(rk_, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
  rd_kafka_poll(rk_, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (in_flight_.load(std::memory_order_relaxed) > 0 &&
         std::chrono::steady_clock::now() < deadline) {
    rd_kafka_poll(rk_, 50);
  }
  if (uint64_t left = in_flight_.load(std::memory_order_relaxed); left > 0) {
    KLOG_WARN("http input: {} messages for kafka topic {} had no delivery report at close",
              left, opt_.topic);
  }
  rd_kafka_topic_destroy(topic_);
  rd_kafka_destroy(rk_);
}

}  // namespace kayak
