// http: messages POSTed to a path on the server's listener (SPEC 4, 5.5).
// With a state directory each post is logged and fsynced before its 202;
// without one it is queued in memory (bounded) and acknowledged at once.
// Given `topic`, each post is produced to that Kafka topic before its 202
// instead (write_ahead.h), and the pipeline's steps read the topic.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <mutex>
#include <thread>

#include "common/bearer.h"
#include "common/clock.h"
#include "common/json_util.h"
#include "common/log.h"
#include "common/metrics.h"
#include "kayak/component.h"
#include "kayak/ingest.h"
#include "common/ndjson.h"
#include "connectors/http/log.h"
#include "connectors/http/write_ahead.h"
#include "kayak/thread_annotations.h"

namespace kayak {

namespace {

std::string ErrorBody(const std::string& message) {
  return DumpJson(nlohmann::json{{"error", message}});
}

class HttpEndpoint final : public IngestEndpoint {
 public:
  HttpEndpoint(std::string token, ComponentStats* stats, uint64_t max_backlog,
               const std::string& pipeline, MemoryPressure* memory)
      : token_(std::move(token)), stats_(stats), max_backlog_(max_backlog), memory_(memory) {
    for (size_t i = 0; i < kCodes.size(); ++i) {
      by_code_[i] = metrics::Registry::Global().GetCounter(
          "kayak_http_ingest_requests_total", "Posts to an http input, by the status answered.",
          {{"pipeline", pipeline}, {"code", std::to_string(kCodes[i])}});
    }
  }

  // The log opens on the pipeline thread; until then posts get 503.
  void SetLog(std::shared_ptr<HttpLog> log) {
    MutexLock lock(mu_);
    log_ = std::move(log);
  }
  // Or, given `topic`, the producer that writes posts ahead to it.
  void SetWriteAhead(std::shared_ptr<KafkaWriteAhead> ahead) {
    MutexLock lock(mu_);
    ahead_ = std::move(ahead);
  }

  bool Admit(std::string_view authorization, IngestReply* refusal) override {
    if (token_.empty()) return true;
    switch (CheckBearer(authorization, token_)) {
      case BearerCheck::kOk:
        return true;
      case BearerCheck::kMissing:
        Count(401);
        *refusal = {401, ErrorBody("this input needs \"Authorization: Bearer <token>\""), 0};
        return false;
      case BearerCheck::kWrong:
        Count(403);
        *refusal = {403, ErrorBody("the bearer token is not this input's"), 0};
        return false;
    }
    return false;
  }

  // Admitted already (Admit, on the header).
  void Post(std::string_view body, std::string_view, IngestDone done) override {
    std::string payload;
    size_t n = 0;
    std::string error;
    if (!NormalizeIngestBody(body, &payload, &n, &error)) {
      if (stats_) stats_->RecordError("rejected a post: " + error);
      Count(400);
      done({400, ErrorBody(error), 0});
      return;
    }
    std::shared_ptr<HttpLog> log;
    std::shared_ptr<KafkaWriteAhead> ahead;
    {
      MutexLock lock(mu_);
      log = log_;
      ahead = ahead_;
    }
    if (log == nullptr && ahead == nullptr) {
      Count(503);
      done({503, ErrorBody("the input is starting; send it again"), 1});
      return;
    }
    // The pipeline does not read while the budget is exceeded: a post now
    // would only wait in memory.
    if (memory_ != nullptr && memory_->Exceeded()) {
      Count(503);
      done({503, ErrorBody("the server's memory budget is used up (memory_limit_bytes); send it again"),
            1});
      return;
    }
    if (ahead != nullptr) {
      WriteAhead(*ahead, payload, n, std::move(done));
      return;
    }
    // (The counters, not the endpoint: they live as long as the process.)
    auto reply = [done, n, ok = by_code_[0], failed = by_code_[4]](Status st, uint64_t seq) {
      (st.ok() ? ok : failed)->Add();
      if (st.ok()) {
        done({202, "{\"accepted\":" + std::to_string(n) + ",\"seq\":" + std::to_string(seq) + "}",
              0});
      } else {
        // What failed, without the state directory's paths (the log line,
        // the card and /ready have them).
        const bool full = st.message().find("No space left") != std::string::npos;
        done({503,
              ErrorBody(std::string("the post could not be logged (") +
                        (full ? "the disk is full" : "an I/O error") + "); send it again"),
              1});
      }
    };
    if (!log->Append(std::move(payload), reply)) {
      Count(503);
      done({503,
            ErrorBody("the input's backlog is full (" + std::to_string(max_backlog_) +
                      " bytes not yet read by its pipeline) or it is stopping; send it again"),
            1});
    }
  }

 private:
  // 202 once the broker has every message of the post; 400 for a message
  // whose key cannot be computed; 503 (send it again) otherwise.
  void WriteAhead(KafkaWriteAhead& ahead, const std::string& payload, size_t n, IngestDone done) {
    Status st = ahead.Append(payload, [done, n, codes = by_code_](Status st) {
      codes[st.ok() ? 0 : 4]->Add();
      if (st.ok()) {
        done({202, "{\"accepted\":" + std::to_string(n) + "}", 0});
      } else {
        done({503, ErrorBody("the post could not be written to kafka (" + st.message() +
                             "); send it again"),
              1});
      }
    });
    if (st.ok()) return;
    if (st.code() == Code::kInvalidArgument) {
      if (stats_) stats_->RecordError("rejected a post: " + st.message());
      Count(400);
      done({400, ErrorBody(st.message()), 0});
    } else {
      Count(503);
      done({503, ErrorBody(st.message() + "; send it again"), 1});
    }
  }

  static constexpr std::array<unsigned, 5> kCodes{202, 400, 401, 403, 503};
  void Count(unsigned code) {
    for (size_t i = 0; i < kCodes.size(); ++i) {
      if (kCodes[i] == code) by_code_[i]->Add();
    }
  }

  std::array<metrics::Counter*, kCodes.size()> by_code_{};
  Mutex mu_;
  std::shared_ptr<HttpLog> log_ KAYAK_GUARDED_BY(mu_);  // null until Open and after the input is gone
  std::shared_ptr<KafkaWriteAhead> ahead_ KAYAK_GUARDED_BY(mu_);  // the same, given `topic`
  const std::string token_;
  ComponentStats* stats_;
  const uint64_t max_backlog_;
  MemoryPressure* const memory_;
};

// A busy input waits this long to fill a batch: fewer, larger batches for
// the pipeline. A post's 202 does not wait for it.
constexpr int64_t kLingerMs = 5;

class HttpInput final : public Input {
 public:
  // `ahead.topic` empty: the posts go to the input's log.
  HttpInput(std::string path, std::string token, int64_t batch_size, int64_t max_backlog,
            int64_t segment_bytes, KafkaWriteAhead::Options ahead, const ComponentContext& ctx)
      : ahead_options_(std::move(ahead)),
        path_(std::move(path)),
        token_(std::move(token)),
        batch_size_(static_cast<size_t>(batch_size)),
        max_backlog_(static_cast<uint64_t>(max_backlog)),
        segment_bytes_(static_cast<uint64_t>(segment_bytes)),
        ctx_(ctx) {
    // The path is served from the moment the graph is built, so a post that
    // comes while the pipeline starts gets 503 (retry), not 404.
    if (ctx_.ingest == nullptr) return;  // `kayak check`
    endpoint_ = std::make_shared<HttpEndpoint>(token_, ctx_.stats, max_backlog_, ctx_.pipeline_id,
                                               ctx_.memory);
    register_status_ = ctx_.ingest->Register(path_, endpoint_);
    if (!register_status_.ok()) endpoint_.reset();
  }

  ~HttpInput() override {
    if (endpoint_) {
      ctx_.ingest->Unregister(path_, endpoint_.get());
      endpoint_->SetLog(nullptr);
      endpoint_->SetWriteAhead(nullptr);
    }
    if (log_) log_->Close();
    if (ahead_) ahead_->Close(kAheadCloseMs);
  }

  Status Open() override {
    if (ctx_.ingest == nullptr) return Status::Internal("http input: no listener to serve on");
    KAYAK_RETURN_IF_ERROR(register_status_);
    if (!ahead_options_.topic.empty()) {
      if (ahead_ != nullptr) return Status::Ok();
      auto ahead = KafkaWriteAhead::Open(ahead_options_);
      if (!ahead.ok()) return ahead.status();
      ahead_ = std::move(ahead.value());
      endpoint_->SetWriteAhead(ahead_);
      return Status::Ok();
    }
    HttpLog::Options o;
    if (!ctx_.private_dir.empty()) {
      o.dir = ctx_.private_dir;
      o.fsync_seconds = metrics::Registry::Global().GetHistogram(
          "kayak_http_log_fsync_seconds", "The http input's log: each batch's fdatasync.",
          {{"pipeline", ctx_.pipeline_id}}, metrics::LatencyBounds());
    }
    o.max_backlog_bytes = max_backlog_;
    o.segment_bytes = segment_bytes_;
    auto log = HttpLog::Open(o, consumed_);
    if (!log.ok()) return log.status();
    {
      // Committed (the acknowledgement thread) may look at it meanwhile.
      MutexLock lock(committed_mu_);
      log_ = std::move(log.value());
    }
    endpoint_->SetLog(log_);
    return Status::Ok();
  }

  // The posts logged and not read yet wait in memory.
  size_t MemoryBytes() const override { return log_ == nullptr ? 0 : log_->backlog_bytes(); }

  // Bytes posted (and logged) that the pipeline has not read yet; written
  // ahead, the messages not yet acknowledged by the broker.
  Lag Behind() const override {
    if (ahead_ != nullptr) return {static_cast<int64_t>(ahead_->in_flight()), "messages"};
    if (log_ == nullptr) return {};
    return {static_cast<int64_t>(log_->backlog_bytes()), "bytes"};
  }

  Status Read(Batch* out, int64_t wait_ms, bool* finished) override {
    (void)finished;  // an http input never ends
    if (!ahead_options_.topic.empty()) return WaitWritingAhead(wait_ms);
    records_.clear();
    KAYAK_RETURN_IF_ERROR(
        log_->Read(consumed_, batch_size_, 4 << 20, wait_ms, &records_, kLingerMs));
    // With nothing to read and posts refused, the card (and /ready) say why
    // until a post is logged again.
    if (records_.empty()) {
      if (Status w = log_->write_status(); !w.ok()) {
        return Status::Unavailable("posts cannot be logged (they get 503): " + w.message());
      }
    }
    const int64_t now = ctx_.clock->NowMs();
    for (auto& r : records_) {
      consumed_ = r.seq;
      std::string_view p = r.payload;
      if (p.find('\n') == std::string_view::npos) {  // one message: no copy
        out->messages.emplace_back(std::move(r.payload), now).MarkJson();  // checked when posted
        continue;
      }
      size_t start = 0;
      while (start <= p.size()) {
        size_t nl = p.find('\n', start);
        if (nl == std::string_view::npos) nl = p.size();
        if (nl > start) {
          out->messages.emplace_back(std::string(p.substr(start, nl - start)), now).MarkJson();
        }
        start = nl + 1;
      }
    }
    return Status::Ok();
  }

  bool StopAccepting() override {
    if (ahead_) {
      // Posts in flight get their answer; nothing is left for the pipeline.
      endpoint_->SetWriteAhead(nullptr);
      ahead_->Close(kAheadCloseMs);
      return false;
    }
    if (log_) log_->Close();  // further posts get 503; the queue is read to the end
    return log_ != nullptr;
  }

  std::string Position() const override {
    if (ahead_ != nullptr) {
      return std::to_string(ahead_->delivered()) + " messages written to kafka topic " +
             ahead_->topic();
    }
    return "post " + std::to_string(consumed_) + " of " +
           std::to_string(log_ ? log_->last_seq() : consumed_);
  }

  bool Rewindable() const override { return true; }
  std::string SavePosition() const override {
    return DumpJson(nlohmann::json{{"seq", consumed_}});
  }
  Status RestorePosition(std::string_view position) override {
    // Written ahead, everything accepted is in the topic: nothing to resume.
    if (!ahead_options_.topic.empty()) return Status::Ok();
    auto j = nlohmann::json::parse(position, nullptr, false);
    if (!j.is_object() || !j["seq"].is_number_unsigned()) {
      return Status::Corruption("http input: unreadable checkpointed position");
    }
    consumed_ = j["seq"].get<uint64_t>();
    return Status::Ok();
  }

  // Segments are kept until the checkpoint before the newest covers them:
  // the store falls back to that one if the newest turns out unreadable.
  void Committed(std::string_view position) override {
    auto j = nlohmann::json::parse(position, nullptr, false);
    if (!j.is_object() || !j["seq"].is_number_unsigned()) return;
    const uint64_t seq = j["seq"].get<uint64_t>();
    uint64_t release = 0;
    std::shared_ptr<HttpLog> log;
    {
      MutexLock lock(committed_mu_);
      release = last_committed_;
      last_committed_ = seq;
      log = log_;
    }
    if (log && release > 0) log->Release(release);
  }

 private:
  // The pipeline of an input that writes ahead has nothing to read: the
  // part after it reads the topic. Its card shows why posts fail, if they do.
  Status WaitWritingAhead(int64_t wait_ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::max<int64_t>(wait_ms, 1)));
    if (ahead_ != nullptr && ahead_->in_flight() == 0) {
      if (Status e = ahead_->last_error(); !e.ok()) {
        return Status::Unavailable("posts cannot be written ahead (they get 503): " + e.message());
      }
    }
    return Status::Ok();
  }

  // How long a stop waits for posts still on their way to the broker.
  static constexpr int64_t kAheadCloseMs = 10000;

  const KafkaWriteAhead::Options ahead_options_;
  std::shared_ptr<KafkaWriteAhead> ahead_;  // given `topic`, from Open
  const std::string path_;
  const std::string token_;
  const size_t batch_size_;
  const uint64_t max_backlog_;
  const uint64_t segment_bytes_;
  ComponentContext ctx_;
  // Shared with the endpoint while posts are in flight. Set by Open under
  // committed_mu_ (the pipeline thread reads it without: it is the only writer).
  std::shared_ptr<HttpLog> log_;
  std::shared_ptr<HttpEndpoint> endpoint_;
  Status register_status_;
  std::vector<LogRecord> records_;  // reused for every read
  uint64_t consumed_ = 0;           // the last post handed over, pipeline thread only
  Mutex committed_mu_;
  uint64_t last_committed_ KAYAK_GUARDED_BY(committed_mu_) = 0;
};

}  // namespace

ComponentDef HttpInputDef() {
  ComponentDef d;
  d.kind = "input";
  d.type = "http";
  d.private_dir = true;  // its log
  d.writes_ahead_to_kafka = true;
  d.help = "Messages POSTed to `path` on the server's listener. A body is one JSON value (one "
           "message) or NDJSON (one message a line). With a state directory a post is answered "
           "202 only once it is in the input's write-ahead log and fsynced; posts that arrive "
           "while an fsync runs share the next one, and under load the log waits up to 0.25 ms "
           "for more to share it. Without one, 202 once queued in memory. Given `topic`, each "
           "post is produced to that Kafka topic instead and answered 202 once the broker has "
           "acknowledged all of it; the pipeline's steps become a part of their own, "
           "`<id>-part2`, reading the topic (docs/cluster.md, \"Posts that outlive their "
           "member\").";
  d.checkpoint = "the sequence number of the last post handed to the pipeline; a restart replays "
                 "every logged post after it. Given `topic`, nothing: what it accepted is in the "
                 "topic, and the part reading it keeps its offsets";
  d.bad_input =
      "400 for a body that is not JSON or NDJSON (nothing is logged); 413 over "
      "`limits.max_body_bytes`; 401 without and 403 with a wrong bearer token when `token` is "
      "set; 503 with Retry-After when the log cannot be written (full disk, I/O error), the "
      "backlog is full or the server's memory budget is exceeded; a torn last record after a crash is dropped (it was never acknowledged), "
      "while a damaged record with acknowledged ones after it stops the input, every file kept. "
      "Given `topic`: 400 for a post with a message whose `key` cannot be computed (nothing of "
      "it is produced), 503 with Retry-After when the broker has not acknowledged it within "
      "`delivery_timeout_ms` or the producer's queue (`max_backlog_bytes`) is full";
  d.props = {
      PropDef{"path", PropType::kString, true, "",
       "where to POST, such as /ingest/orders; not under /api or /ui and not / or /index.html, /health, /ready or "
       "/metrics. The write-ahead log belongs to the pipeline, so a new path keeps the "
       "position in it", PropRole::kTuning}.Refers(PropRef::kServedPath),
      PropDef{"token", PropType::kString, false, "",
       "a bearer token posts must carry (use ${ENV} to keep it out of the file)",
       PropRole::kTuning}.Secret(),
      PropDef{"batch_size", PropType::kInt, false, "1000", "most posts per batch", PropRole::kTuning}.Range(1, 100000),
      PropDef{"max_backlog_bytes", PropType::kInt, false, "67108864",
       "posted bytes not yet read by the pipeline before posts get 503", PropRole::kTuning}.AtLeast(1024).Unit("bytes"),
      PropDef{"segment_bytes", PropType::kInt, false, "67108864",
       "with a state directory: the log starts a new segment file past this size",
       PropRole::kTuning}.AtLeast(4096).Unit("bytes"),
      {"topic", PropType::kString, false, "",
       "write each post ahead to this Kafka topic instead of the input's log: 202 once the "
       "broker has every message of it, and the pipeline's steps read the topic back as "
       "`<id>-part2` (in a cluster, any member reads what any member accepted); needs "
       "`brokers`"},
      PropDef{"brokers", PropType::kStringList, false, "", "with `topic`: bootstrap brokers",
       PropRole::kTuning},
      {"key", PropType::kExpr, false, "",
       "with `topic`: an expression for each message's Kafka key (a post with a message whose "
       "key fails gets 400); in a cluster the key's partition is the cluster's `partitioner`'s, "
       "so state keyed by it needs no `repartition` step"},
      PropDef{"kafka_properties", PropType::kStringMap, false, "",
       "with `topic`: librdkafka properties of the producer and of the part's consumer (TLS, "
       "SASL)",
       PropRole::kTuning}.Secret(),
      PropDef{"delivery_timeout_ms", PropType::kInt, false, "10000",
       "with `topic`: a post the broker has not acknowledged by then gets 503",
       PropRole::kTuning}.Range(1000, 300000).Unit("ms"),
  };
  // Each post comes to one member.
  d.shared_by_members = [](const Options&) { return true; };
  d.make_input = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Input> {
    const std::string path = o.String("path");
    if (path.empty() || path[0] != '/') o.Error("path", "must start with /");
    if (path == "/" || path == "/health" || path == "/ready" || path == "/metrics" ||
        path == "/api" || path.rfind("/api/", 0) == 0 || path == "/index.html" ||
        path == "/ui" || path.rfind("/ui/", 0) == 0) {
      o.Error("path", "is taken by the admin API or the dashboard; choose another, such as "
                      "/ingest/...");
    }
    if (path.find_first_of("?# ") != std::string::npos) {
      o.Error("path", "must not hold '?', '#' or spaces");
    }
    KafkaWriteAhead::Options ahead;
    if (o.Has("topic")) {
      ahead.topic = o.String("topic");
      if (ahead.topic.empty()) o.Error("topic", "must not be empty");
      if (!o.Has("brokers")) o.Error("topic", "give `brokers` with `topic`");
      ahead.brokers = kafka::Brokers(o);
      ahead.key = o.Has("key") ? o.Expr("key") : nullptr;
      // In a cluster, a key goes where the cluster's partitioner puts it, so
      // the part reading the topic holds each key's state in one shard.
      if (ctx.partitions != nullptr) {
        ahead.properties.emplace_back("partitioner", ctx.partitions->producer_partitioner());
      }
      for (auto& kv : o.StringMap("kafka_properties")) ahead.properties.push_back(std::move(kv));
      std::string error;
      if (rd_kafka_conf_t* conf = kafka::MakeConf(ahead.properties, &error)) {
        rd_kafka_conf_destroy(conf);
      } else {
        o.Error("kafka_properties", error);
      }
      ahead.delivery_timeout_ms = o.Int("delivery_timeout_ms");
      ahead.max_queued_bytes = static_cast<uint64_t>(o.Int("max_backlog_bytes"));
      ahead.clock = ctx.clock != nullptr ? ctx.clock : SystemClock::Get();
    } else {
      for (const char* name : {"brokers", "key", "kafka_properties"}) {
        if (o.Has(name)) o.Error(name, "only with `topic`");
      }
    }
    if (o.failed()) return nullptr;
    return std::make_unique<HttpInput>(path, o.String("token"), o.Int("batch_size"),
                                       o.Int("max_backlog_bytes"), o.Int("segment_bytes"),
                                       std::move(ahead), ctx);
  };
  return d;
}

}  // namespace kayak
