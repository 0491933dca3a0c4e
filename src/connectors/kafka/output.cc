// The kafka output on librdkafka (SPEC 4, 5.4).
//
// Output: an idempotent producer; a batch counts as written only when every
// message's delivery report came back without error, so a failing broker
// holds the pipeline (under checkpointing) instead of dropping. With
// `exactly_once` it is a two-phase output: one transaction per checkpoint
// interval, committed with a marker once the checkpoint is durable, and a
// restart whose checkpoint's marker is not visible falls back to the one
// before (docs/durability.md, "Exactly-once into Kafka").

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/crash_point.h"
#include "common/json_util.h"
#include "common/log.h"
#include "common/ndjson.h"
#include "connectors/shared/kafka_conf.h"
#include "connectors/shared/broker.h"
#include "connectors/shared/tls.h"
#include "expr/expr.h"
#include "kayak/component.h"

namespace kayak {

namespace {

using kafka::Brokers;
using kafka::CheckProperties;
using kafka::MakeConf;
using kafka::Properties;
using kafka::TakeError;

// exactly_once: one Kafka transaction per checkpoint interval, committed
// once the checkpoint is durable (docs/durability.md, "Exactly-once into
// Kafka").
struct Transactions {
  bool on = false;
  std::string id;            // transactional.id
  std::string marker_topic;  // each commit leaves a marker here, partition 0
  std::string pipeline;      // for the error that asks for a restart
  // In a cluster: told when a transaction can no longer commit, so the
  // server restarts the region.
  PartitionOwner* owner = nullptr;
};

// How long a stop waits for the broker to acknowledge what the output
// produced before it gives up on it.
constexpr int64_t kCloseFlushMs = 10000;

// How long a restart (WasCommitted) or a claim (CommitVisible) asks before
// it takes a commit as not made: past librdkafka's default
// transaction.timeout.ms (60 s), after which the broker has ended any
// transaction a dead producer left open.
constexpr int64_t kVisibleAskMs = 90000;

// How long CommitVisible asks about another member's marker before it
// fences that member's transactional id, which makes the answer final: a
// commit under way ends in milliseconds.
constexpr int64_t kFirstAskMs = 5000;

// How far before its state's time a marker is looked for: the clock that
// stamped it may have stepped back since, or (a topic with LogAppendTime)
// the broker's clock may be behind the producer's.
constexpr int64_t kMarkerSlackMs = 5 * 60 * 1000;

class KafkaOutput final : public Output {
 public:
  KafkaOutput(std::string brokers, std::string topic, std::shared_ptr<const expr::Expr> topic_expr,
              std::shared_ptr<const expr::Expr> key, Properties props, Transactions txn,
              const Clock* clock, ComponentStats* stats)
      : brokers_(std::move(brokers)),
        topic_(std::move(topic)),
        topic_expr_(std::move(topic_expr)),
        key_(std::move(key)),
        props_(std::move(props)),
        txn_(std::move(txn)),
        clock_(clock),
        stats_(stats) {}

  ~KafkaOutput() override { Destroy(); }

  Status Open() override {
    if (rk_ != nullptr) return Status::Ok();
    Properties p = {{"bootstrap.servers", brokers_}, {"enable.idempotence", "true"}};
    if (txn_.on) p.emplace_back("transactional.id", txn_.id);
    for (const auto& kv : props_) p.push_back(kv);
    std::string error;
    rd_kafka_conf_t* conf = MakeConf(p, &error);
    if (conf == nullptr) return Status::Invalid("kafka output: " + error);
    rd_kafka_conf_set_dr_msg_cb(conf, &KafkaOutput::OnDelivery);
    rd_kafka_conf_set_error_cb(conf, &KafkaOutput::OnError);
    rd_kafka_conf_set_opaque(conf, this);
    char err[512];
    rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (rk_ == nullptr) return Status::Invalid(std::string("kafka output: ") + err);
    if (txn_.on) {
      // Fences an earlier producer with this transactional.id and aborts the
      // transaction it left open.
      if (rd_kafka_error_t* e = rd_kafka_init_transactions(rk_, 30000)) {
        const std::string why = TakeError(e);
        Destroy();
        return Status::Unavailable("kafka output: cannot start transactions (transactional.id " +
                                   txn_.id + "): " + why);
      }
    }
    // A handle for the fixed topic saves a lookup by name per message.
    if (!topic_.empty()) topic_handle_ = rd_kafka_topic_new(rk_, topic_.c_str(), nullptr);
    return Status::Ok();
  }

  // Produces the batch and returns without waiting for its delivery
  // reports: batches stream while earlier ones are acknowledged. Every report
  // is in before a checkpoint barrier passes (Checkpoint), and a message the
  // producer gave up on is kept and produced again, holding the pipeline
  // until it goes through, so nothing written is lost.
  Status Write(const Batch& batch) override {
    rd_kafka_poll(rk_, 0);  // serve delivery reports
    if (txn_.on) {
      if (!txn_lost_.empty()) {
        FailTransaction(txn_lost_);
        return Status::Unavailable(txn_failed_);
      }
      if (!txn_failed_.empty()) return Status::Unavailable(txn_failed_);
      if (!txn_open_ && !batch.empty()) {
        if (rd_kafka_error_t* e = rd_kafka_begin_transaction(rk_)) {
          const std::string why = TakeError(e);
          FailTransaction("cannot begin a transaction: " + why);
          return Status::Unavailable(txn_failed_);
        }
        txn_open_ = true;
      }
    }
    KAYAK_RETURN_IF_ERROR(Resend());
    size_t failed = 0;
    Dropped dropped;
    std::string error;
    std::string computed_key;
    for (const auto& m : batch.messages) {
      const std::string* key = &m.key();
      const std::string* topic = &topic_;
      std::string per_message_topic;
      if (key_ || topic_expr_) {
        std::string why;
        if (!m.json_known() && !IsJson(m.payload())) why = "the payload is not JSON";
        doc_.Reset(m.payload());
        scratch_.Reset();
        expr::Value v;
        if (why.empty() && key_) {
          Status st = key_->Eval(doc_, &scratch_, *clock_, &v);
          if (st.ok() && v.missing()) st = Status::Invalid("the expression names a missing field");
          if (st.ok()) {
            computed_key.clear();
            expr::AppendKey(v, &computed_key);
            key = &computed_key;
          } else {
            why = "key: " + st.message();
          }
        }
        if (why.empty() && topic_expr_) {
          Status st = topic_expr_->Eval(doc_, &scratch_, *clock_, &v);
          if (st.ok() && v.type == expr::Value::Type::kString && !v.str.empty()) {
            per_message_topic.assign(v.str);
            topic = &per_message_topic;
          } else {
            why = "topic_expr: " + (st.ok() ? std::string("not a non-empty string") : st.message());
          }
        }
        if (!why.empty()) {
          // Permanent: the same message fails the same way on every try.
          // It goes to the dead letters, or is dropped and counted, never
          // retried, so the rest of the batch is produced once.
          dropped.Add(this, m, why);
          continue;
        }
      }
      const rd_kafka_resp_err_t e = Produce(*topic, *key, m.payload(), m.headers());
      if (e && failed++ == 0) error = rd_kafka_err2str(e);
    }
    dropped.Report(stats_, "kafka output (a message's own expression failed)", batch.size());
    if (txn_.on && (failed > 0 || !txn_lost_.empty())) {
      // A retry of the batch would put its produced part in twice.
      FailTransaction(failed > 0 ? std::to_string(failed) + " of " + std::to_string(batch.size()) +
                                       " messages not produced: " + error
                                 : txn_lost_);
      return Status::Unavailable(txn_failed_);
    }
    if (failed > 0) {
      return Status::Unavailable("kafka output: " + std::to_string(failed) + " of " +
                                 std::to_string(batch.size()) + " messages not produced: " +
                                 error);
    }
    return Status::Ok();
  }

  void Tick(int64_t now_ms) override {
    (void)now_ms;
    if (rk_ == nullptr) return;
    rd_kafka_poll(rk_, 0);
    Status st = Resend();
    if (!st.ok()) KLOG_WARN("{}", st.message());
  }

  // The barrier: every message produced so far is acknowledged by the broker.
  // With transactions they are still invisible to read_committed consumers;
  // the state names the marker the commit of this checkpoint will leave.
  Status Checkpoint(uint64_t id, std::string* state) override {
    if (!txn_.on) return Drain();
    if (rk_ == nullptr) return Status::Unavailable("kafka output: not started");
    if (!AwaitReports()) return NotAcknowledged();
    if (!txn_lost_.empty()) FailTransaction(txn_lost_);
    if (!txn_failed_.empty()) return Status::Unavailable(txn_failed_);
    if (txn_open_) {
      pending_id_ = id;
      pending_marker_ = NewMarker(id);
      pending_marker_ms_ = WallMs();
      marker_sent_ = false;
    }
    // `marker_ms`: the marker is produced after this time (by this
    // producer's clock, which stamps it), so a reader looks from there.
    *state = DumpJson(
        nlohmann::json{{"transactional_id", txn_.id},
                       {"marker", txn_open_ ? pending_marker_ : committed_marker_},
                       {"marker_ms", txn_open_ ? pending_marker_ms_ : committed_marker_ms_},
                       {"marker_topic", txn_.marker_topic}});
    return Status::Ok();
  }

  bool TwoPhase() const override { return txn_.on; }

  // Checkpoint `id` is durable: the marker goes into the transaction, and the
  // transaction is committed.
  Status CommitCheckpoint(uint64_t id) override {
    if (!txn_open_ || id != pending_id_) return Status::Ok();  // nothing written since
    rd_kafka_poll(rk_, 0);
    if (!txn_lost_.empty()) FailTransaction(txn_lost_);
    if (!txn_failed_.empty()) return Status::Invalid(txn_failed_);
    CrashPoint("kafka_before_marker");
    if (!marker_sent_) {
      const std::string value = DumpJson(nlohmann::json{{"transactional_id", txn_.id},
                                               {"checkpoint", id},
                                               {"marker", pending_marker_}});
      const rd_kafka_resp_err_t e =
          Produce(txn_.marker_topic, txn_.id, value, {}, /*has_key=*/true, /*partition=*/0);
      if (e) {
        FailTransaction(std::string("cannot produce the commit marker to ") + txn_.marker_topic +
                        ": " + rd_kafka_err2str(e));
        return Status::Invalid(txn_failed_);
      }
      marker_sent_ = true;
    }
    CrashPoint("kafka_before_commit");
    rd_kafka_error_t* e = rd_kafka_commit_transaction(rk_, 60000);
    if (e == nullptr) {
      txn_open_ = false;
      committed_marker_ = pending_marker_;
      committed_marker_ms_ = pending_marker_ms_;
      CrashPoint("kafka_after_commit");
      return Status::Ok();
    }
    bool retriable = false;
    const std::string why = TakeError(e, &retriable);
    if (retriable) return Status::Unavailable("kafka output: commit: " + why);
    FailTransaction("commit of checkpoint " + std::to_string(id) + ": " + why);
    return Status::Invalid(txn_failed_);
  }

  Status RestoreState(std::string_view state) override {
    if (!txn_.on || state.empty()) return Status::Ok();
    auto j = nlohmann::json::parse(state, nullptr, false);
    if (!j.is_object() || !j["marker"].is_string()) {
      return Status::Corruption("kafka output: not a transaction state");
    }
    committed_marker_ = j["marker"].get<std::string>();
    committed_marker_ms_ = MarkerMs(j);
    return Status::Ok();
  }

  // Whether the commit that `state` expects left its marker, as a
  // read_committed consumer sees it. In doubt (the broker cannot be asked),
  // false: the region replays from the checkpoint before, which may repeat
  // messages but never loses one.
  bool WasCommitted(std::string_view state) override {
    if (!txn_.on || state.empty()) return true;
    auto j = nlohmann::json::parse(state, nullptr, false);
    if (!j.is_object() || !j["marker"].is_string()) return true;  // RestoreState reports it
    const std::string marker = j["marker"].get<std::string>();
    if (marker.empty()) return true;
    const int64_t deadline = MonotonicMs() + kVisibleAskMs;
    std::string why;
    for (int64_t backoff = 200; MonotonicMs() < deadline; backoff = std::min<int64_t>(5000, backoff * 2)) {
      // The producer first: init_transactions aborts the transaction a dead
      // instance left open, so the marker partition is readable to its end
      // (unless another producer's transaction is open there: asked again).
      Status st = Open();
      if (st.ok()) {
        auto found = FindMarker(txn_.marker_topic, txn_.id, marker, MarkerMs(j));
        if (found.ok()) return *found;
        st = found.status();
      }
      why = st.message();
      KLOG_WARN("{}; asking again", why);
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff));
    }
    KLOG_ERROR("kafka output: cannot learn whether marker {} was committed ({}); replaying from "
               "the checkpoint before, which may repeat messages",
               marker, why);
    return false;
  }

  // Another member's marker (or this member's from before a restart). Not
  // seen: the transaction that would leave it is fenced (a producer
  // initialised with its transactional id aborts it and refuses its later
  // commit), and the marker is looked for once more, so the answer cannot
  // change afterwards. A member cut off past its session that published a
  // checkpoint's shards can thus no longer commit it once another member
  // judged it not committed. Asked for kFirstAskMs before the fence and until
  // kVisibleAskMs passes after it (an open transaction ends within the
  // broker's transaction timeout); this member's own, until kVisibleAskMs.
  bool CommitVisible(std::string_view state) const override {
    if (!txn_.on || state.empty()) return true;
    auto j = nlohmann::json::parse(state, nullptr, false);
    if (!j.is_object() || !j["marker"].is_string() || !j["transactional_id"].is_string()) {
      KLOG_WARN("kafka output: a cluster shard names an unreadable transaction state; taken as "
                "not committed");
      return false;
    }
    const std::string marker = j["marker"].get<std::string>();
    if (marker.empty()) return true;
    const std::string topic = j.value("marker_topic", txn_.marker_topic);
    const std::string id = j["transactional_id"].get<std::string>();
    const int64_t since_ms = MarkerMs(j);
    const auto answer = [&](Result<bool> seen) {
      if (seen.ok()) return *seen;
      KLOG_ERROR("kafka output: cannot learn whether marker {} of {} was committed ({}); taken "
                 "as not, which may repeat messages",
                 marker, id, seen.status().message());
      return false;
    };
    // This member's own id: its producer's start fenced the old one already,
    // and the answer is final once it is known.
    if (id == txn_.id) return answer(AskForMarker(topic, id, marker, since_ms, kVisibleAskMs));
    auto seen = AskForMarker(topic, id, marker, since_ms, kFirstAskMs);
    if (seen.ok() && *seen) return true;
    // Not seen, or not known yet (the marker topic's end held back by an open
    // transaction, which may be the old owner's own).
    if (Status st = Fence(id); !st.ok()) {
      KLOG_ERROR("kafka output: cannot fence transactional id {} ({}); its checkpoint is taken "
                 "as not committed, which repeats messages if it still commits",
                 id, st.message());
      return false;
    }
    return answer(AskForMarker(topic, id, marker, since_ms, kVisibleAskMs));
  }

  Status Close() override {
    if (txn_.on) {
      if (rk_ != nullptr && txn_open_) {
        // What it holds comes back from the last checkpoint on the next start.
        if (rd_kafka_error_t* e = rd_kafka_abort_transaction(rk_, 10000)) {
          KLOG_WARN("kafka output: abort of the transaction: {}", TakeError(e));
        }
        KLOG_INFO("kafka output: aborted the transaction open since the last checkpoint");
        txn_open_ = false;
      }
      Destroy();
      return Status::Ok();
    }
    // Bounded: a broker that cannot be reached does not hold the stop for
    // the producer's message timeout. What is left is purged, and comes
    // back from the last checkpoint on the next start (with --state-dir).
    Status st = Drain(kCloseFlushMs);
    if (!st.ok()) {
      KLOG_ERROR("{}; they were not delivered", st.message());
      if (rk_ != nullptr) {
        rd_kafka_purge(rk_, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_poll(rk_, 0);  // the purged messages' reports
      }
    }
    Destroy();
    return st;
  }

  void Interrupt() override { interrupted_.store(true); }

 private:
  // A message the producer gave up on, as the delivery report gave it back.
  struct Undelivered {
    std::string topic, key, value;
    bool has_key = false;
    std::vector<std::pair<std::string, std::string>> headers;
  };

  rd_kafka_resp_err_t Produce(const std::string& topic, const std::string& key,
                              std::string_view value,
                              const std::vector<std::pair<std::string, std::string>>& headers,
                              bool has_key = true, int32_t partition = RD_KAFKA_PARTITION_UA) {
    rd_kafka_headers_t* hdrs = nullptr;
    if (!headers.empty()) {
      hdrs = rd_kafka_headers_new(headers.size());
      for (const auto& [k, v] : headers) {
        rd_kafka_header_add(hdrs, k.data(), static_cast<ssize_t>(k.size()), v.data(),
                            static_cast<ssize_t>(v.size()));
      }
    }
    for (;;) {
      // The producer's queue (queue.buffering.max.messages/kbytes) bounds
      // what is in flight; when it is full, wait for reports.
      const rd_kafka_resp_err_t e =
          topic_handle_ != nullptr && topic == topic_
              ? rd_kafka_producev(
                    rk_, RD_KAFKA_V_RKT(topic_handle_),
                    RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                    RD_KAFKA_V_KEY(has_key ? key.data() : nullptr, has_key ? key.size() : 0),
                    RD_KAFKA_V_PARTITION(partition), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                    RD_KAFKA_V_OPAQUE(this),
                    RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_END)
              : rd_kafka_producev(
                    rk_, RD_KAFKA_V_TOPIC(topic.c_str()),
                    RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                    RD_KAFKA_V_KEY(has_key ? key.data() : nullptr, has_key ? key.size() : 0),
                    RD_KAFKA_V_PARTITION(partition), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                    RD_KAFKA_V_OPAQUE(this),
                    RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_END);
      if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        rd_kafka_poll(rk_, 10);
        continue;
      }
      if (e && hdrs) rd_kafka_headers_destroy(hdrs);
      return e;
    }
  }

  // A marker unique to this commit: the checkpoint id and 64 random bits
  // (a checkpoint id can come again after a fall-back).
  static std::string NewMarker(uint64_t id) {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    char buf[48];
    std::snprintf(buf, sizeof(buf), "%" PRIu64 "-%016" PRIx64, id, rng());
    return buf;
  }

  static int64_t WallMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  // A transaction state's `marker_ms`; 0 in a state written before it was.
  static int64_t MarkerMs(const nlohmann::json& state) {
    auto it = state.find("marker_ms");
    return it != state.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
  }

  // The transaction cannot commit any more: everything written since the last
  // checkpoint is gone from Kafka, and only a replay from that checkpoint
  // brings it back. The output refuses writes and barriers until then.
  void FailTransaction(const std::string& why) {
    if (txn_failed_.empty()) {
      if (rk_ != nullptr && txn_open_) {
        if (rd_kafka_error_t* e = rd_kafka_abort_transaction(rk_, 10000)) {
          KLOG_WARN("kafka output: abort of the transaction: {}", TakeError(e));
        }
      }
      txn_open_ = false;
      txn_failed_ = "kafka output: transaction aborted (" + why +
                    "); what it held comes back from the last checkpoint once pipeline " +
                    txn_.pipeline + " restarts" +
                    (txn_.owner != nullptr ? " (in a cluster it restarts by itself)"
                                           : " (POST /api/v1/pipelines/" + txn_.pipeline +
                                                 "/restart, or restart the server)");
      KLOG_ERROR("{}", txn_failed_);
      if (txn_.owner != nullptr) txn_.owner->Fenced();
    }
  }

  // A client beside the output's producer (`what` names it in errors):
  // the brokers, `p`, and the output's connection and security settings
  // (not its producer ones). The caller destroys it.
  Result<rd_kafka_t*> NewClient(rd_kafka_type_t type, Properties p, const char* what) const {
    p.insert(p.begin(), {"bootstrap.servers", brokers_});
    for (const auto& [k, v] : props_) {
      for (const char* prefix : {"security.", "sasl.", "ssl.", "client.", "socket.", "broker."}) {
        if (k.rfind(prefix, 0) == 0) p.emplace_back(k, v);
      }
    }
    std::string error;
    rd_kafka_conf_t* conf = MakeConf(p, &error);
    if (conf == nullptr) return Status::Invalid(std::string("kafka output: ") + what + ": " + error);
    char err[512];
    rd_kafka_t* rk = rd_kafka_new(type, conf, err, sizeof(err));
    if (rk == nullptr) return Status::Invalid(std::string("kafka output: ") + what + ": " + err);
    return rk;
  }

  // FindMarker, asked again until `ask_ms` passes.
  Result<bool> AskForMarker(const std::string& topic, const std::string& id,
                            const std::string& marker, int64_t since_ms, int64_t ask_ms) const {
    const int64_t deadline = MonotonicMs() + ask_ms;
    std::string why;
    for (int64_t backoff = 200; MonotonicMs() < deadline;
         backoff = std::min<int64_t>(5000, backoff * 2)) {
      auto found = FindMarker(topic, id, marker, since_ms);
      if (found.ok()) return *found;
      why = found.status().message();
      KLOG_WARN("{}; asking again", why);
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff));
    }
    return Status::Unavailable(why);
  }

  // Starts a producer with transactional id `id` and lets it go: the broker
  // aborts the transaction the id's earlier producer left open and refuses
  // that producer from then on.
  Status Fence(const std::string& id) const {
    auto made = NewClient(RD_KAFKA_PRODUCER, {{"transactional.id", id}}, "fencing producer");
    if (!made.ok()) return made.status();
    rd_kafka_t* rk = *made;
    Status st;
    if (rd_kafka_error_t* e = rd_kafka_init_transactions(rk, 30000)) {
      st = Status::Unavailable("kafka output: init_transactions: " + TakeError(e));
    } else {
      KLOG_INFO("kafka output: fenced transactional id {}: its open transaction is aborted and "
                "it commits no more", id);
    }
    rd_kafka_destroy(rk);
    return st;
  }

  // Whether `id`'s `marker` is in partition 0 of `topic`, as a
  // read_committed consumer sees it. It is read from `since_ms` (the time
  // the marker was made, 0 when the state predates it: then the last 1000
  // records), less kMarkerSlackMs for a clock that stepped back, to the
  // partition's end. Unavailable while another producer's transaction holds
  // that end back (its last stable offset below the high watermark): the
  // marker may be past it, committed, and a read_committed reader cannot
  // see it until that transaction ends. Reads only what construction set,
  // so any thread may ask.
  Result<bool> FindMarker(const std::string& topic, const std::string& id,
                          const std::string& marker, int64_t since_ms) const {
    auto made = NewClient(RD_KAFKA_CONSUMER,
                          {{"group.id", id + ".markers"},
                           {"isolation.level", "read_committed"},
                           {"enable.auto.commit", "false"},
                           {"enable.partition.eof", "true"}},
                          "marker reader");
    if (!made.ok()) return made.status();
    rd_kafka_t* c = *made;
    struct Closer {
      rd_kafka_t* c;
      ~Closer() {
        rd_kafka_consumer_close(c);
        rd_kafka_destroy(c);
      }
    } closer{c};
    // The partition's high watermark, not the last stable offset this
    // read_committed consumer would be told.
    auto ends = NewClient(RD_KAFKA_CONSUMER, {{"isolation.level", "read_uncommitted"}},
                          "marker topic's end");
    if (!ends.ok()) return ends.status();
    int64_t low = 0, high = 0;
    const rd_kafka_resp_err_t qe = rd_kafka_query_watermark_offsets(
        *ends, topic.c_str(), 0, &low, &high, 10000);
    rd_kafka_destroy(*ends);
    if (qe == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) return false;  // no marker ever
    if (qe) {
      return Status::Unavailable("kafka output: cannot read " + topic + ": " +
                                 rd_kafka_err2str(qe));
    }
    if (high <= low) return false;
    int64_t from = std::max(low, high - 1000);
    if (since_ms > 0) {
      auto* at = rd_kafka_topic_partition_list_new(1);
      rd_kafka_topic_partition_list_add(at, topic.c_str(), 0)->offset = since_ms - kMarkerSlackMs;
      const rd_kafka_resp_err_t te = rd_kafka_offsets_for_times(c, at, 10000);
      const int64_t found_at = at->elems[0].err ? -1 : at->elems[0].offset;
      rd_kafka_topic_partition_list_destroy(at);
      if (te) {
        return Status::Unavailable("kafka output: cannot find the offset of time " +
                                   std::to_string(since_ms) + " in " + topic + ": " +
                                   rd_kafka_err2str(te));
      }
      // No record from that time on, as far as the broker tells: the last
      // 1000 are read, which decides it either way.
      if (found_at >= 0) from = std::clamp(found_at, low, high - 1);
    }
    auto* list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, topic.c_str(), 0)->offset = from;
    const rd_kafka_resp_err_t ae = rd_kafka_assign(c, list);
    rd_kafka_topic_partition_list_destroy(list);
    if (ae) return Status::Unavailable(std::string("kafka output: assign: ") + rd_kafka_err2str(ae));
    const int64_t deadline = MonotonicMs() + 30000;
    while (MonotonicMs() < deadline) {
      rd_kafka_message_t* m = rd_kafka_consumer_poll(c, 200);
      if (m == nullptr) continue;
      const bool eof = m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF;
      const int64_t offset = m->offset;
      bool found = false;
      if (!m->err && m->payload != nullptr) {
        auto j = nlohmann::json::parse(
            std::string_view(static_cast<const char*>(m->payload), m->len), nullptr, false);
        found = j.is_object() && j.value("transactional_id", "") == id &&
                j.value("marker", "") == marker;
      }
      const std::string merr = m->err && !eof ? rd_kafka_message_errstr(m) : "";
      rd_kafka_message_destroy(m);
      if (!merr.empty()) return Status::Unavailable("kafka output: reading markers: " + merr);
      if (found) return true;
      if (!eof && offset >= high - 1) return false;  // read to the end, committed
      if (eof && offset < high) {
        return Status::Unavailable("kafka output: marker " + marker + " of " + id + " not in " +
                                   topic + " up to offset " + std::to_string(offset) +
                                   ", where a transaction still open holds its end (" +
                                   std::to_string(high) + ")");
      }
      if (eof) return false;
    }
    return Status::Unavailable("kafka output: reading " + topic +
                               " did not reach its end in 30 s");
  }

  // Produces again what the producer gave up on, and waits for it: while a
  // message keeps failing the pipeline is held (and the error is on the card).
  Status Resend(int64_t budget_ms = -1) {
    if (undelivered_.empty()) return Status::Ok();
    std::vector<Undelivered> again;
    again.swap(undelivered_);
    last_failure_.clear();
    for (size_t i = 0; i < again.size(); ++i) {
      const auto& u = again[i];
      const rd_kafka_resp_err_t e = Produce(u.topic, u.key, u.value, u.headers, u.has_key);
      if (e) {
        // Not taken at all: keep it and the rest for the next try.
        undelivered_.insert(undelivered_.end(), std::make_move_iterator(again.begin() + i),
                            std::make_move_iterator(again.end()));
        return Status::Unavailable(std::string("kafka output: cannot produce again: ") +
                                   rd_kafka_err2str(e));
      }
    }
    if (!AwaitReports(budget_ms)) return NotAcknowledged();
    if (!undelivered_.empty()) {
      return Status::Unavailable("kafka output: " + std::to_string(undelivered_.size()) +
                                 " messages not delivered (kept, produced again next time): " +
                                 last_failure_);
    }
    return Status::Ok();
  }

  // Every delivery report of what was produced so far is in.
  // False when it gave up first: interrupted, or `budget_ms` (when not
  // negative) passed.
  bool AwaitReports(int64_t budget_ms = -1) {
    const auto start = std::chrono::steady_clock::now();
    while (rd_kafka_outq_len(rk_) > 0) {
      if (interrupted_.load()) return false;
      if (budget_ms >= 0 &&
          std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(budget_ms)) {
        return false;
      }
      rd_kafka_flush(rk_, 100);
    }
    return true;
  }

  Status NotAcknowledged() const {
    return Status::Unavailable("kafka output: " + std::to_string(rd_kafka_outq_len(rk_)) +
                               " messages not acknowledged by the broker" +
                               (interrupted_.load() ? " when the stop gave up on them" : "") +
                               (last_error_.empty() ? "" : " (" + last_error_ + ")"));
  }

  // Waits for every delivery report, then produces again what failed.
  Status Drain(int64_t budget_ms = -1) {
    if (rk_ == nullptr) return Status::Ok();
    if (!AwaitReports(budget_ms)) return NotAcknowledged();
    return Resend(budget_ms);
  }

  // A broker the producer cannot reach, a refused handshake or login: on the
  // card while the messages wait in the producer's queue (served by the
  // output's own polls), so they are not shown as merely written.
  static void OnError(rd_kafka_t* rk, int err, const char* reason, void* opaque) {
    (void)rk;
    auto* self = static_cast<KafkaOutput*>(opaque);
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN && !self->transport_why_.empty()) {
      // Why the last connection failed (a handshake, a login) says more.
      self->last_error_ = std::string(reason) + " (" + self->transport_why_ + ")";
    } else {
      self->last_error_ = reason + kafka::ScramHint(reason);
    }
    if (err == RD_KAFKA_RESP_ERR__SSL || err == RD_KAFKA_RESP_ERR__AUTHENTICATION ||
        err == RD_KAFKA_RESP_ERR__TRANSPORT) {
      self->transport_why_ = self->last_error_;
    }
    if (self->stats_ == nullptr) return;
    self->stats_->RecordError(std::string("kafka output: ") +
                              rd_kafka_err2str(static_cast<rd_kafka_resp_err_t>(err)) + ": " +
                              self->last_error_);
  }

  static void OnDelivery(rd_kafka_t* rk, const rd_kafka_message_t* m, void* opaque) {
    (void)rk;
    (void)opaque;
    if (!m->err) return;
    auto* self = static_cast<KafkaOutput*>(m->_private);
    Undelivered u;
    u.topic = rd_kafka_topic_name(m->rkt);
    u.has_key = m->key != nullptr;
    if (u.has_key) u.key.assign(static_cast<const char*>(m->key), m->key_len);
    if (m->payload != nullptr) u.value.assign(static_cast<const char*>(m->payload), m->len);
    rd_kafka_headers_t* hdrs = nullptr;
    if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      const char* name = nullptr;
      const void* value = nullptr;
      size_t size = 0;
      for (size_t i = 0; rd_kafka_header_get_all(hdrs, i, &name, &value, &size) ==
                         RD_KAFKA_RESP_ERR_NO_ERROR;
           ++i) {
        u.headers.emplace_back(name, value ? std::string(static_cast<const char*>(value), size)
                                           : std::string());
      }
    }
    self->last_failure_ = rd_kafka_err2str(m->err);
    if (self->txn_.on) {
      // Within a transaction a lost message cannot be produced again: the
      // transaction has to be aborted (Write does it).
      if (self->txn_lost_.empty()) {
        self->txn_lost_ = std::string("a message was not delivered: ") + rd_kafka_err2str(m->err);
      }
      return;
    }
    self->undelivered_.push_back(std::move(u));
  }

  void Destroy() {
    if (rk_ == nullptr) return;
    rd_kafka_flush(rk_, interrupted_.load() ? 0 : 10000);
    if (topic_handle_ != nullptr) rd_kafka_topic_destroy(topic_handle_);
    topic_handle_ = nullptr;
    rd_kafka_destroy(rk_);
    rk_ = nullptr;
  }

  // Delivery reports run inside rd_kafka_poll/flush, on the output's thread.
  std::vector<Undelivered> undelivered_;
  std::string last_failure_;
  // The last error callback's reason, and the last failed connection's
  // (served on the output's thread, inside its polls).
  std::string last_error_;
  std::string transport_why_;
  std::atomic<bool> interrupted_{false};  // a stop gave up on this output (Interrupt)
  const std::string brokers_;
  const std::string topic_;
  const std::shared_ptr<const expr::Expr> topic_expr_;  // per message, instead of topic_
  const std::shared_ptr<const expr::Expr> key_;
  // Reused from message to message by the expressions above.
  expr::Document doc_;
  expr::Scratch scratch_;
  const Properties props_;
  const Transactions txn_;
  const Clock* clock_;
  ComponentStats* const stats_;  // the output's card: messages dropped on their own expression
  rd_kafka_t* rk_ = nullptr;
  rd_kafka_topic_t* topic_handle_ = nullptr;  // for topic_, when set
  // With transactions (output thread only):
  bool txn_open_ = false;         // begun, not yet committed or aborted
  std::string txn_lost_;          // a delivery report's failure inside the transaction
  std::string txn_failed_;        // why the transaction had to be aborted
  uint64_t pending_id_ = 0;       // the checkpoint whose commit is next
  std::string pending_marker_;    // the marker that commit leaves
  bool marker_sent_ = false;      // produced into the open transaction
  std::string committed_marker_;  // the newest commit's marker
  int64_t pending_marker_ms_ = 0;    // when pending_marker_ was made (wall clock, ms)
  int64_t committed_marker_ms_ = 0;  // when committed_marker_ was (0: not known)
};

}  // namespace

ComponentDef KafkaOutputDef() {
  ComponentDef d;
  d.kind = "output";
  d.type = "kafka";
  d.help = "Produces each message to `topic` (or the topic `topic_expr` gives it) with an "
           "idempotent producer (librdkafka). The key "
           "is the `key` expression's value, or the message's own key; its headers go along. "
           "Batches are produced without waiting for each other's delivery reports; a "
           "checkpoint barrier waits for all of them. In a cluster a key goes to the partition "
           "the cluster's `partitioner` gives it (librdkafka's `partitioner` property set to "
           "match, unless `properties` sets it).";
  d.checkpoint = "nothing kept: the barrier passes only once the broker has acknowledged every "
                 "message produced before it";
  d.bad_input = "a message the producer gives up on (message.timeout.ms) is kept and produced "
                "again, holding the pipeline and failing checkpoints until it is delivered; a "
                "message whose `key` or `topic_expr` fails goes to the pipeline's dead letters "
                "(`dead_letter`) or is dropped, counted as an error on the card and logged, never retried (the rest of its batch is produced once); "
                "a bad property name is a config error";
  d.props = {
      PropDef{"brokers", PropType::kStringList, true, "", "bootstrap brokers", PropRole::kTuning},
      {"topic", PropType::kString, false, "", "the topic to produce to"},
      {"topic_expr", PropType::kExpr, false, "",
       "instead of `topic`: an expression giving each message's topic"},
      {"key", PropType::kExpr, false, "",
       "an expression for the message key: a string as it is, another value as compact JSON; "
       "one that names a missing field fails"},
      PropDef{"compression", PropType::kString, false, "none", "none, gzip, snappy, lz4 or zstd",
       PropRole::kTuning}.OneOf({"none", "gzip", "snappy", "lz4", "zstd"}),
      {"exactly_once", PropType::kBool, false, "false",
       "produce in one transaction per checkpoint interval, committed once the checkpoint is "
       "durable (needs --state-dir); read_committed consumers see every message once"},
      {"transactional_id", PropType::kString, false, "",
       "with exactly_once: the transactional.id (default kayak-<pipeline>-<output index>); "
       "unique per output; in a cluster each member adds .<member>"},
      {"marker_topic", PropType::kString, false, "",
       "with exactly_once: where each commit leaves a marker, partition 0 (default "
       "<transactional_id>.markers, one for all members of a cluster); create it with one "
       "partition"},
      PropDef{"properties", PropType::kStringMap, false, "",
       "librdkafka producer properties, by their librdkafka names", PropRole::kTuning}
          .Secret(),
      TlsPropDef(),
      kafka::SaslPropDef(),
  };
  d.make_output = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Output> {
    const std::string comp = o.String("compression");
    Properties props = kafka::SecurityProperties(o);
    props.insert(props.begin(), {"compression.codec", comp});
    // In a cluster, keys go where the cluster's partitioner expects them, so
    // a topic this output writes can be read back by the cluster as shards
    // (a `repartition` step); `properties` may say otherwise.
    if (ctx.partitions != nullptr) {
      props.insert(props.begin(), {"partitioner", ctx.partitions->producer_partitioner()});
    }
    for (auto& kv : o.StringMap("properties")) props.push_back(std::move(kv));
    CheckProperties(o, props);
    auto key = o.Has("key") ? o.Expr("key") : nullptr;
    auto topic_expr = o.Has("topic_expr") ? o.Expr("topic_expr") : nullptr;
    if (o.String("topic").empty() == !o.Has("topic_expr")) {
      o.Error("topic", "give either `topic` or `topic_expr`");
    }
    Transactions txn;
    txn.on = o.Bool("exactly_once");
    txn.pipeline = ctx.pipeline_id;
    if (txn.on) {
      if (!ctx.checkpointing) {
        o.Error("exactly_once", "exactly_once needs a state directory (--state-dir): the "
                                "transactions commit with checkpoints");
      }
      for (const auto& [k, v] : props) {
        if (k == "transactional.id") o.Error("properties", "give `transactional_id` instead");
      }
      txn.id = o.String("transactional_id");
      if (txn.id.empty()) {
        // "outputs[2]" -> "kayak-<pipeline>-2"
        std::string index = ctx.stats != nullptr ? ctx.stats->name() : "";
        const size_t open = index.find('[');
        index = open == std::string::npos ? "0" : index.substr(open + 1, index.size() - open - 2);
        txn.id = "kayak-" + ctx.pipeline_id + "-" + index;
      }
      // The members of a cluster share the marker topic: a marker is keyed
      // by its writer's transactional id.
      txn.marker_topic = o.String("marker_topic");
      if (txn.marker_topic.empty()) txn.marker_topic = txn.id + ".markers";
      // Every member of a cluster runs this output: each needs an id of its
      // own, or they would fence one another.
      if (ctx.partitions != nullptr) txn.id += "." + ctx.partitions->member();
      txn.owner = ctx.partitions;
    } else if (o.Has("transactional_id") || o.Has("marker_topic")) {
      o.Error(o.Has("transactional_id") ? "transactional_id" : "marker_topic",
              "only with exactly_once: true");
    }
    if (o.failed()) return nullptr;
    return std::make_unique<KafkaOutput>(Brokers(o), o.String("topic"), topic_expr, key, props,
                                         std::move(txn), ctx.clock, ctx.stats);
  };
  return d;
}

}  // namespace kayak
