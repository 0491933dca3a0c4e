// The kafka input on librdkafka (SPEC 4, 5.4).
//
// Input, with a state directory: the partition offsets are the input's
// checkpointed position. They are committed to the broker only once a
// checkpoint holding them is durable (Input::Committed), never by
// auto-commit. On a restart the input first commits the checkpoint's offsets
// for its group and only then subscribes, so the group is never ahead of the
// restored state. On every assignment it seeks each partition it has a
// position for to that position (its own, consistent with its state), and
// leaves the others to the group's committed offset: a revoked partition's
// position is kept in memory and used when the partition comes back. kayak is
// meant to be the only member of its group for an input, except in a cluster
// (docs/cluster.md), where the members share the group and each assignment
// goes through the cluster's PartitionOwner: a partition's state and offset
// come from its shard.

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/json_util.h"
#include "common/log.h"
#include "common/partition_offsets.h"
#include "connectors/shared/kafka_conf.h"
#include "connectors/shared/tls.h"
#include "kayak/component.h"
#include "kayak/thread_annotations.h"

namespace kayak {

namespace {

// The longest a revoked partition is held for its hand-over checkpoint
// (far below max.poll.interval.ms, which bounds how long the group waits).
constexpr int64_t kHandOverMs = 30000;

using kafka::Brokers;
using kafka::CheckProperties;
using kafka::MakeConf;
using kafka::Properties;

using Offsets = PartitionOffsets;  // next offset to read

rd_kafka_topic_partition_list_t* ToList(const Offsets& offsets) {
  auto* list = rd_kafka_topic_partition_list_new(static_cast<int>(offsets.size()) + 1);
  for (const auto& [tp, off] : offsets) {
    rd_kafka_topic_partition_list_add(list, tp.first.c_str(), tp.second)->offset = off;
  }
  return list;
}

std::string JsonEscape(std::string_view s) { return DumpJson(nlohmann::json(std::string(s))); }

class KafkaInput final : public Input {
 public:
  KafkaInput(std::string brokers, std::vector<std::string> topics, std::string group,
             std::string start, int64_t batch_size, int64_t batch_wait_ms, Properties props,
             std::string meta_field, const ComponentContext& ctx)
      : brokers_(std::move(brokers)),
        topics_(std::move(topics)),
        group_(std::move(group)),
        start_(std::move(start)),
        batch_size_(static_cast<size_t>(batch_size)),
        batch_wait_ms_(batch_wait_ms),
        props_(std::move(props)),
        meta_field_(std::move(meta_field)),
        ctx_(ctx) {}

  ~KafkaInput() override {
    rd_kafka_t* rk = rk_.exchange(nullptr);
    DropUnclaimed();
    if (queue_ != nullptr) rd_kafka_queue_destroy(queue_);
    if (rk != nullptr) {
      if (handing_over_) rd_kafka_assign(rk, nullptr);  // closing: nothing to wait for
      rd_kafka_consumer_close(rk);
      rd_kafka_destroy(rk);
    }
  }

  Status Open() override {
    Properties p = {{"bootstrap.servers", brokers_},
                    {"group.id", group_},
                    {"auto.offset.reset", start_},
                    {"enable.partition.eof", "false"},
                    {"enable.auto.offset.store", "false"},
                    // librdkafka 2.0 stops fetching a partition once this many
                    // messages are queued and looks again only after a backoff
                    // (hundreds of ms), even when the queue was drained long
                    // before: a fast pipeline stalls (docs/benchmarks.md).
                    // Memory stays bounded by queued.max.messages.kbytes.
                    {"queued.min.messages", "1000000"},
                    // A quarter of librdkafka's 64 MB: under a backlog the
                    // prefetch was most of the server's peak memory, and 16 MB
                    // (about 0.2 s of 200-byte messages at 300,000 a second)
                    // keeps the pipeline fed (docs/benchmarks.md).
                    {"queued.max.messages.kbytes", "16384"}};
    // A static member (`group.instance.id`) that restarts inside the
    // session timeout takes its own place back at once: no rebalance waits
    // for the killed process's session to end, and in a cluster its
    // partitions, and so its shards, stay where they are. The id is the
    // properties' if set there (empty: none), else the cluster member's
    // name, else the state directory's (docs/operations.md).
    std::string instance;
    bool instance_given = false;
    for (const auto& kv : props_) {
      if (kv.first == "group.instance.id") {
        instance = kv.second;
        instance_given = true;
      } else {
        p.push_back(kv);
      }
    }
    if (!instance_given && ctx_.partitions != nullptr) {
      instance = ctx_.partitions->member() + "." + ctx_.pipeline_id;
    } else if (!instance_given && !ctx_.instance_id.empty()) {
      instance = "kayak-" + ctx_.instance_id + "." + ctx_.pipeline_id;
    }
    static_member_ = !instance.empty();
    if (static_member_) {
      p.emplace_back("group.instance.id", instance);
      KLOG_INFO("kafka input {}: a static member of group {} as {}", ctx_.pipeline_id, group_,
                instance);
    }
    // Under checkpointing the checkpoint decides what is committed, whatever
    // the properties say.
    p.emplace_back("enable.auto.commit", ctx_.checkpointing ? "false" : "true");
    std::string error;
    rd_kafka_conf_t* conf = MakeConf(p, &error);
    if (conf == nullptr) return Status::Invalid("kafka input: " + error);
    rd_kafka_conf_set_opaque(conf, this);
    rd_kafka_conf_set_rebalance_cb(conf, &KafkaInput::OnRebalance);
    rd_kafka_conf_set_error_cb(conf, &KafkaInput::OnError);
    char err[512];
    rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    if (rk == nullptr) return Status::Invalid(std::string("kafka input: ") + err);
    rd_kafka_poll_set_consumer(rk);
    queue_ = rd_kafka_queue_get_consumer(rk);
    rk_.store(rk);
    return Status::Ok();
  }

  Status Read(Batch* out, int64_t wait_ms, bool* finished) override {
    (void)finished;
    rd_kafka_t* rk = rk_.load();
    if (!subscribed_) KAYAK_RETURN_IF_ERROR(Subscribe(rk));
    if (unclaimed_ != nullptr) KAYAK_RETURN_IF_ERROR(AssignClaimed(rk, unclaimed_));
    if (unreachable_.load()) {
      // No broker answered: the card says retrying (not running) until one
      // answers a metadata request or a message comes.
      const rd_kafka_metadata_t* md = nullptr;
      if (rd_kafka_metadata(rk, 0, nullptr, &md, 500) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_metadata_destroy(md);
        unreachable_.store(false);
      } else {
        MutexLock lock(unreachable_mu_);
        return Status::Unavailable("kafka: no broker reachable: " + unreachable_why_);
      }
    }
    if (handing_over_ && !HandOverDone(rk)) {
      // Held, paused, until the cluster published a checkpoint covering
      // all that was read; what a paused partition still delivers is
      // dropped, unread: its next owner reads it.
      rd_kafka_message_t* m = rd_kafka_consumer_poll(
          rk, static_cast<int>(std::clamp<int64_t>(wait_ms, 0, 100)));
      if (m != nullptr) rd_kafka_message_destroy(m);
      return Status::Ok();
    }
    if (!ctx_.checkpointing) StoreOffsets(rk);  // the previous batch went through the chain
    ReportProgress();
    // Up to wait_ms for the first message, then up to batch_wait_ms for a
    // full batch; messages are taken from the consumer's queue in bulk.
    const int64_t start = MonotonicMs();
    if (taken_.size() < batch_size_) taken_.resize(batch_size_);
    auto take = [&](int64_t timeout_ms) {
      const size_t want = batch_size_ - out->messages.size();
      const ssize_t n = rd_kafka_consume_batch_queue(
          queue_, static_cast<int>(std::max<int64_t>(timeout_ms, 0)), taken_.data(), want);
      for (ssize_t i = 0; i < n; ++i) Consume(taken_[static_cast<size_t>(i)], out);
    };
    take(0);
    if (out->messages.empty()) {
      rd_kafka_message_t* m =
          rd_kafka_consumer_poll(rk, static_cast<int>(std::max<int64_t>(wait_ms, 0)));
      if (m == nullptr) return Status::Ok();
      Consume(m, out);
    }
    if (!out->messages.empty() && out->messages.size() < batch_size_) {
      // Once there is data, linger at most batch_wait_ms for a fuller batch.
      take(std::min<int64_t>(batch_wait_ms_, wait_ms) - (MonotonicMs() - start));
    }
    return Status::Ok();
  }

  // In a cluster: each partition's offset and lag for the overview, about
  // once a second (the lag from the client's cached high watermark).
  void ReportProgress() {
    if (ctx_.partitions == nullptr) return;
    const int64_t now = MonotonicMs();
    if (now < next_progress_ms_) return;
    next_progress_ms_ = now + 1000;
    for (const auto& [tp, off] : positions_) {
      ctx_.partitions->Progress(tp.first, tp.second, off, PartitionLag(tp, off));
    }
  }

  // topic/partition@offset per partition, with its lag where the client
  // knows the partition's high watermark (from its last fetch: no request).
  std::string Position() const override {
    std::string s;
    for (const auto& [tp, off] : positions_) {
      if (!s.empty()) s += ", ";
      s += tp.first + "/" + std::to_string(tp.second) + "@" + std::to_string(off);
      const int64_t lag = PartitionLag(tp, off);
      if (lag >= 0) s += " (lag " + std::to_string(lag) + ")";
    }
    return s.empty() ? "no partition read yet" : s;
  }

  // Messages behind the high watermarks, summed over the partitions read.
  Lag Behind() const override {
    int64_t total = -1;
    for (const auto& [tp, off] : positions_) {
      const int64_t lag = PartitionLag(tp, off);
      if (lag >= 0) total = std::max<int64_t>(total, 0) + lag;
    }
    return {total, "messages"};
  }

  bool Rewindable() const override { return true; }
  std::string SavePosition() const override { return PartitionOffsetsToJson(positions_); }
  Status RestorePosition(std::string_view position) override {
    Offsets o;
    if (!PartitionOffsetsFromJson(position, &o)) {
      return Status::Corruption("kafka input: unreadable checkpointed offsets");
    }
    positions_ = o;
    last_valid_ = false;  // its iterator pointed into the old map
    // In a cluster the shards hold each partition's offset; the group's are
    // only where a shard without a checkpoint starts, and other members own
    // some of these partitions now.
    restore_commit_ = !o.empty() && ctx_.partitions == nullptr;
    return Status::Ok();
  }

  // The checkpoint holding these offsets is durable: now the group may
  // move to them.
  void Committed(std::string_view position) override {
    rd_kafka_t* rk = rk_.load();
    Offsets o;
    // Outside the group (joining, or after a revocation) a commit is refused
    // and can upset the join; the next checkpoint after the assignment commits.
    if (rk == nullptr || !ctx_.checkpointing || !assigned_.load() ||
        !PartitionOffsetsFromJson(position, &o) || o.empty()) {
      return;
    }
    auto* list = ToList(o);
    const rd_kafka_resp_err_t e = rd_kafka_commit(rk, list, /*async=*/1);
    rd_kafka_topic_partition_list_destroy(list);
    if (e && ctx_.stats) {
      ctx_.stats->RecordError(std::string("kafka: committing offsets: ") + rd_kafka_err2str(e));
    }
  }

 private:
  int64_t PartitionLag(const std::pair<std::string, int32_t>& tp, int64_t offset) const {
    rd_kafka_t* rk = rk_.load();
    int64_t low = -1, high = -1;
    if (rk == nullptr || offset < 0 ||
        rd_kafka_get_watermark_offsets(rk, tp.first.c_str(), tp.second, &low, &high) !=
            RD_KAFKA_RESP_ERR_NO_ERROR ||
        high < 0) {
      return -1;
    }
    return std::max<int64_t>(0, high - offset);
  }

  Status Subscribe(rd_kafka_t* rk) {
    if (restore_commit_ && static_member_) {
      // The broker keeps a killed predecessor's membership under the same
      // id until its session ends, and fences a commit made outside the
      // group in its name, fatally for the client. The restored offsets
      // wait for the assignment instead, which comes at once: this member
      // takes the old one's place.
      commit_after_assign_ = true;
      restore_commit_ = false;
    }
    if (restore_commit_) {
      // The group must not be ahead of the restored state: the checkpoint's
      // offsets go to the group before anything is consumed. A broker that
      // still counts a killed predecessor as a member refuses a commit from
      // outside the group; then it is made right after the first assignment
      // (the input reads from its own positions either way).
      auto* list = ToList(positions_);
      const rd_kafka_resp_err_t e = rd_kafka_commit(rk, list, /*async=*/0);
      rd_kafka_topic_partition_list_destroy(list);
      if (e) {
        KLOG_INFO("kafka input: the restored offsets will be committed once the group assigns "
                  "partitions ({})", rd_kafka_err2str(e));
        commit_after_assign_ = true;
      }
      restore_commit_ = false;
    }
    auto* topics = rd_kafka_topic_partition_list_new(static_cast<int>(topics_.size()));
    for (const auto& t : topics_) {
      rd_kafka_topic_partition_list_add(topics, t.c_str(), RD_KAFKA_PARTITION_UA);
    }
    const rd_kafka_resp_err_t e = rd_kafka_subscribe(rk, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    if (e) return Status::Unavailable(std::string("kafka: subscribe: ") + rd_kafka_err2str(e));
    subscribed_ = true;
    return Status::Ok();
  }

  void StoreOffsets(rd_kafka_t* rk) {
    if (unstored_.empty()) return;
    auto* list = ToList(unstored_);
    rd_kafka_offsets_store(rk, list);
    rd_kafka_topic_partition_list_destroy(list);
    unstored_.clear();
  }

  // A message or an error event from the consumer queue; destroys it.
  void Consume(rd_kafka_message_t* m, Batch* out) {
    if (handing_over_) {
      // Revoked earlier in this read: not taken, so not past the position
      // the hand-over's checkpoint holds.
      rd_kafka_message_destroy(m);
      return;
    }
    if (m->err) {
      if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF && ctx_.stats) {
        ctx_.stats->RecordError(std::string("kafka: ") + rd_kafka_message_errstr(m));
      }
    } else {
      Take(m, out);
    }
    rd_kafka_message_destroy(m);
  }

  void Take(rd_kafka_message_t* m, Batch* out) {
    if (unreachable_.load(std::memory_order_relaxed)) unreachable_.store(false);
    const char* topic_name = rd_kafka_topic_name(m->rkt);
    if (!last_valid_ || m->partition != last_partition_ || last_topic_ != topic_name) {
      last_valid_ = true;
      last_partition_ = m->partition;
      last_topic_ = topic_name;
      last_position_ = positions_.try_emplace({last_topic_, m->partition}, 0).first;
    }
    const std::string& topic = last_topic_;
    rd_kafka_timestamp_type_t tstype;
    int64_t ts = rd_kafka_message_timestamp(m, &tstype);
    if (ts < 0) ts = ctx_.clock->NowMs();
    std::string payload(static_cast<const char*>(m->payload), m->len);
    std::string key = m->key ? std::string(static_cast<const char*>(m->key), m->key_len) : "";
    std::vector<std::pair<std::string, std::string>> headers;
    rd_kafka_headers_t* hdrs = nullptr;
    if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      const char* name;
      const void* value;
      size_t size;
      for (size_t i = 0; rd_kafka_header_get_all(hdrs, i, &name, &value, &size) == 0; ++i) {
        headers.emplace_back(name, value ? std::string(static_cast<const char*>(value), size) : "");
      }
    }
    if (!meta_field_.empty()) AddMeta(&payload, topic, m, key, ts, headers);
    Message msg(std::move(payload), ts);
    msg.set_key(std::move(key));
    msg.headers() = std::move(headers);
    out->messages.push_back(std::move(msg));
    last_position_->second = m->offset + 1;
    if (!ctx_.checkpointing) unstored_[{topic, m->partition}] = m->offset + 1;
  }

  // Puts {"topic","partition","offset","key","timestamp","headers"} into an
  // object payload under meta_field_, without parsing it.
  void AddMeta(std::string* payload, const std::string& topic, const rd_kafka_message_t* m,
               const std::string& key, int64_t ts,
               const std::vector<std::pair<std::string, std::string>>& headers) {
    size_t brace = payload->find_first_not_of(" \t\r\n");
    if (brace == std::string::npos || (*payload)[brace] != '{') return;  // not an object
    std::string meta = JsonEscape(meta_field_) + ":{\"topic\":" + JsonEscape(topic) +
                       ",\"partition\":" + std::to_string(m->partition) +
                       ",\"offset\":" + std::to_string(m->offset) + ",\"key\":" + JsonEscape(key) +
                       ",\"timestamp\":" + std::to_string(ts) + ",\"headers\":{";
    for (size_t i = 0; i < headers.size(); ++i) {
      if (i > 0) meta += ",";
      meta += JsonEscape(headers[i].first) + ":" + JsonEscape(headers[i].second);
    }
    meta += "}}";
    const size_t next = payload->find_first_not_of(" \t\r\n", brace + 1);
    const bool empty = next != std::string::npos && (*payload)[next] == '}';
    payload->insert(brace + 1, empty ? meta : meta + ",");
  }

  static void OnRebalance(rd_kafka_t* rk, rd_kafka_resp_err_t err,
                          rd_kafka_topic_partition_list_t* parts, void* opaque) {
    auto* self = static_cast<KafkaInput*>(opaque);
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS && self->ctx_.partitions != nullptr) {
      // In a cluster: each partition's shard is kept or claimed and restored
      // before it is read; on an error the partitions wait for Read to try
      // again.
      if (Status st = self->AssignClaimed(rk, parts); !st.ok()) {
        self->DropUnclaimed();
        self->unclaimed_ = rd_kafka_topic_partition_list_copy(parts);
        KLOG_WARN("kafka input: {}; its partitions wait", st.message());
      }
      return;
    }
    // The cooperative protocol (`cooperative-sticky`) gives and takes only
    // the partitions that move, each list on top of what is held.
    const bool cooperative = std::strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
      for (int i = 0; i < parts->cnt; ++i) {
        auto it = self->positions_.find({parts->elems[i].topic, parts->elems[i].partition});
        if (it != self->positions_.end()) parts->elems[i].offset = it->second;
      }
      if (self->ctx_.checkpointing && self->start_ == "latest") self->PinLatest(rk, parts);
      if (!self->Reassign(rk, parts, cooperative, true)) return;
      KLOG_INFO("kafka input: assigned {} partitions", parts->cnt);
      self->assigned_.store(true);
      if (self->commit_after_assign_ && !self->positions_.empty()) {
        auto* list = ToList(self->positions_);
        rd_kafka_commit(rk, list, /*async=*/1);
        rd_kafka_topic_partition_list_destroy(list);
        self->commit_after_assign_ = false;
      }
    } else {
      self->DropUnclaimed();
      // Not when closing (rk_ is cleared first), nor when the session ended
      // and the partitions are someone else's already.
      if (self->ctx_.partitions != nullptr && self->rk_.load() != nullptr &&
          !rd_kafka_assignment_lost(rk) && self->ctx_.partitions->HandOver()) {
        // In a cluster: the partitions are let go (Read, HandOverDone) once
        // a checkpoint covering what was read is published, so that their
        // next owners go on from there instead of replaying. librdkafka
        // takes the unassign outside the callback; the group waits for it.
        rd_kafka_topic_partition_list_t* held = nullptr;
        if (rd_kafka_assignment(rk, &held) == RD_KAFKA_RESP_ERR_NO_ERROR && held != nullptr) {
          rd_kafka_pause_partitions(rk, held);
          rd_kafka_topic_partition_list_destroy(held);
        }
        self->handing_over_ = true;
        self->handover_deadline_ms_ = MonotonicMs() + kHandOverMs;
        KLOG_INFO("kafka input: partitions revoked ({}); handing them over after a checkpoint",
                  rd_kafka_err2str(err));
        return;
      }
      if (!self->Reassign(rk, parts, cooperative, false)) return;
      self->assigned_.store(cooperative && self->HoldsPartitions(rk));
      KLOG_INFO("kafka input: {} partitions revoked ({})", parts->cnt, rd_kafka_err2str(err));
    }
  }

  // Takes (`add`) or lets go of `parts` as the group's protocol wants it:
  // the eager one replaces the whole assignment, the cooperative one changes
  // it by these. False (and an error on the card) when librdkafka refused.
  bool Reassign(rd_kafka_t* rk, rd_kafka_topic_partition_list_t* parts, bool cooperative,
                bool add) {
    std::string error;
    if (cooperative) {
      rd_kafka_error_t* e =
          add ? rd_kafka_incremental_assign(rk, parts) : rd_kafka_incremental_unassign(rk, parts);
      if (e != nullptr) {
        error = rd_kafka_error_string(e);
        rd_kafka_error_destroy(e);
      }
    } else if (rd_kafka_resp_err_t e = rd_kafka_assign(rk, add ? parts : nullptr); e) {
      error = rd_kafka_err2str(e);
    }
    if (error.empty()) return true;
    const std::string what = add ? "assignment" : "revocation";
    KLOG_ERROR("kafka input: the group's {} could not be applied: {}", what, error);
    if (ctx_.stats) ctx_.stats->RecordError("kafka: applying the group's " + what + ": " + error);
    return false;
  }

  static bool HoldsPartitions(rd_kafka_t* rk) {
    rd_kafka_topic_partition_list_t* held = nullptr;
    if (rd_kafka_assignment(rk, &held) != RD_KAFKA_RESP_ERR_NO_ERROR || held == nullptr) {
      return false;
    }
    const bool any = held->cnt > 0;
    rd_kafka_topic_partition_list_destroy(held);
    return any;
  }

  // A hand-over is over once the cluster published its checkpoint, or after
  // kHandOverMs (a checkpoint that failed: the next owners replay from the
  // last one published). Then the partitions go.
  bool HandOverDone(rd_kafka_t* rk) {
    const bool published = ctx_.partitions->HandedOver();
    if (!published && MonotonicMs() < handover_deadline_ms_) return false;
    handing_over_ = false;
    assigned_.store(false);
    // A partition stays paused across assignments: resumed before it goes,
    // or it would read nothing when it is given back.
    rd_kafka_topic_partition_list_t* held = nullptr;
    if (rd_kafka_assignment(rk, &held) == RD_KAFKA_RESP_ERR_NO_ERROR && held != nullptr) {
      rd_kafka_resume_partitions(rk, held);
      rd_kafka_topic_partition_list_destroy(held);
    }
    rd_kafka_assign(rk, nullptr);
    if (published) {
      KLOG_INFO("kafka input: partitions handed over");
    } else {
      KLOG_WARN("kafka input: no checkpoint published in {} s; partitions let go, their next "
                "owners replay from the last one published", kHandOverMs / 1000);
    }
    return true;
  }

  // The partition count of `topic`, from the brokers (0: unknown).
  static int32_t PartitionCount(rd_kafka_t* rk, const char* topic) {
    rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk, topic, nullptr);
    if (rkt == nullptr) return 0;
    const rd_kafka_metadata_t* md = nullptr;
    int32_t n = 0;
    if (rd_kafka_metadata(rk, 0, rkt, &md, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      for (int i = 0; i < md->topic_cnt; ++i) {
        if (std::strcmp(md->topics[i].topic, topic) == 0 && !md->topics[i].err) {
          n = md->topics[i].partition_cnt;
        }
      }
      rd_kafka_metadata_destroy(md);
    }
    rd_kafka_topic_destroy(rkt);
    return n;
  }

  // In a cluster: the cluster keeps or restores each partition's shard,
  // then `parts` is assigned, each at the offset its state stops at. Takes
  // `parts` over when it is unclaimed_ and succeeds.
  Status AssignClaimed(rd_kafka_t* rk, rd_kafka_topic_partition_list_t* parts) {
    std::vector<PartitionOwner::Assigned> list;
    std::map<std::string, int32_t> counts;
    for (int i = 0; i < parts->cnt; ++i) {
      const auto& e = parts->elems[i];
      auto [c, fresh] = counts.try_emplace(e.topic, 0);
      if (fresh) c->second = PartitionCount(rk, e.topic);
      if (c->second < 1) {
        return Status::Unavailable(std::string("cluster: the partition count of topic ") +
                                   e.topic + " is unknown");
      }
      PartitionOwner::Assigned a;
      a.topic = e.topic;
      a.partition = e.partition;
      a.partitions = c->second;
      a.have_position = positions_.count({a.topic, a.partition}) > 0;
      list.push_back(std::move(a));
    }
    if (Status st = ctx_.partitions->Assign(&list); !st.ok()) {
      if (ctx_.stats) ctx_.stats->RecordError("cluster: " + st.message());
      return Status::Unavailable("cluster: " + st.message());
    }
    Offsets kept;
    for (size_t i = 0; i < list.size(); ++i) {
      const PartitionOwner::Assigned& a = list[i];
      const std::pair<std::string, int32_t> tp{a.topic, a.partition};
      auto it = positions_.find(tp);
      if (a.keep && it != positions_.end()) {
        kept[tp] = it->second;
        parts->elems[i].offset = it->second;
      } else if (!a.keep && a.offset >= 0) {
        kept[tp] = a.offset;
        parts->elems[i].offset = a.offset;
      } else {
        parts->elems[i].offset = RD_KAFKA_OFFSET_INVALID;  // the group's committed offset
      }
    }
    // A partition not given any more, or given without a checkpoint, has
    // no position of this server's: its state went (or starts) with it.
    positions_ = std::move(kept);
    last_valid_ = false;
    if (ctx_.checkpointing && start_ == "latest") PinLatest(rk, parts);
    rd_kafka_assign(rk, parts);
    KLOG_INFO("kafka input: assigned {} partitions, their shards claimed", parts->cnt);
    assigned_.store(true);
    if (parts == unclaimed_) DropUnclaimed();
    return Status::Ok();
  }

  void DropUnclaimed() {
    if (unclaimed_ != nullptr) rd_kafka_topic_partition_list_destroy(unclaimed_);
    unclaimed_ = nullptr;
  }

  // `start: latest` under checkpointing: a partition assigned with neither a
  // checkpointed position nor a committed offset starts at the end it has
  // *now*, and that offset is committed to the group at once, so a restart
  // before the first checkpoint resumes there instead of at a later end
  // (which would skip what came in between). The position is in every
  // checkpoint from then on.
  void PinLatest(rd_kafka_t* rk, rd_kafka_topic_partition_list_t* parts) {
    rd_kafka_topic_partition_list_t* open = rd_kafka_topic_partition_list_new(parts->cnt);
    for (int i = 0; i < parts->cnt; ++i) {
      if (!positions_.count({parts->elems[i].topic, parts->elems[i].partition})) {
        rd_kafka_topic_partition_list_add(open, parts->elems[i].topic, parts->elems[i].partition);
      }
    }
    if (open->cnt > 0 && rd_kafka_committed(rk, open, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      rd_kafka_topic_partition_list_t* pin = rd_kafka_topic_partition_list_new(open->cnt);
      for (int i = 0; i < open->cnt; ++i) {
        const auto& e = open->elems[i];
        int64_t at = e.offset;
        if (at < 0) {
          int64_t low = 0, high = 0;
          if (rd_kafka_query_watermark_offsets(rk, e.topic, e.partition, &low, &high, 10000) !=
              RD_KAFKA_RESP_ERR_NO_ERROR) {
            continue;  // left to auto.offset.reset, as before
          }
          at = high;
          rd_kafka_topic_partition_list_add(pin, e.topic, e.partition)->offset = at;
        }
        positions_[{e.topic, e.partition}] = at;
        for (int k = 0; k < parts->cnt; ++k) {
          if (parts->elems[k].partition == e.partition &&
              std::strcmp(parts->elems[k].topic, e.topic) == 0) {
            parts->elems[k].offset = at;
          }
        }
      }
      if (pin->cnt > 0) {
        const rd_kafka_resp_err_t ce = rd_kafka_commit(rk, pin, /*async=*/0);
        if (ce) KLOG_WARN("kafka input: committing the start offsets: {}", rd_kafka_err2str(ce));
      }
      rd_kafka_topic_partition_list_destroy(pin);
    } else if (open->cnt > 0) {
      KLOG_WARN("kafka input: the group's committed offsets could not be read; partitions "
                "without a checkpointed position start at the latest offset");
    }
    rd_kafka_topic_partition_list_destroy(open);
  }

  static void OnError(rd_kafka_t* rk, int err, const char* reason, void* opaque) {
    (void)rk;
    auto* self = static_cast<KafkaInput*>(opaque);
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN || err == RD_KAFKA_RESP_ERR__RESOLVE) {
      // Counted when Read reports it (the pipeline retries it), with why the
      // last connection failed (a TLS handshake, a login), which says more.
      MutexLock lock(self->unreachable_mu_);
      self->unreachable_why_ = reason;
      if (!self->transport_why_.empty()) self->unreachable_why_ += " (" + self->transport_why_ + ")";
      self->unreachable_.store(true);
      return;
    }
    if (err == RD_KAFKA_RESP_ERR__SSL || err == RD_KAFKA_RESP_ERR__AUTHENTICATION ||
        err == RD_KAFKA_RESP_ERR__TRANSPORT) {
      MutexLock lock(self->unreachable_mu_);
      self->transport_why_ = reason + kafka::ScramHint(reason);
    }
    if (self->ctx_.stats) {
      self->ctx_.stats->RecordError(std::string("kafka: ") +
                                    rd_kafka_err2str(static_cast<rd_kafka_resp_err_t>(err)) +
                                    ": " + reason + kafka::ScramHint(reason));
    }
  }

  const std::string brokers_;
  const std::vector<std::string> topics_;
  const std::string group_;
  const std::string start_;
  const size_t batch_size_;
  const int64_t batch_wait_ms_;
  const Properties props_;
  const std::string meta_field_;
  ComponentContext ctx_;
  std::atomic<rd_kafka_t*> rk_{nullptr};
  bool subscribed_ = false;
  bool restore_commit_ = false;
  bool static_member_ = false;  // with a group.instance.id (set by Open)
  bool commit_after_assign_ = false;
  std::atomic<bool> assigned_{false};  // set by the rebalance callback, read by Committed
  // In a cluster, between a revocation and the publication of the
  // checkpoint that hands the partitions over (pipeline thread only).
  bool handing_over_ = false;
  int64_t handover_deadline_ms_ = 0;
  // Set by the error callback when no broker can be reached; Read clears it.
  std::atomic<bool> unreachable_{false};
  Mutex unreachable_mu_;
  std::string unreachable_why_ KAYAK_GUARDED_BY(unreachable_mu_);
  std::string transport_why_ KAYAK_GUARDED_BY(unreachable_mu_);  // the last failed connection
  Offsets positions_;  // pipeline thread (and the rebalance callback, on it)
  rd_kafka_queue_t* queue_ = nullptr;         // the consumer's queue, read in bulk
  std::vector<rd_kafka_message_t*> taken_;    // reused for every read
  // The partition of the last message taken, and its entry in positions_.
  bool last_valid_ = false;
  int32_t last_partition_ = -1;
  std::string last_topic_;
  Offsets::iterator last_position_;
  int64_t next_progress_ms_ = 0;  // pipeline thread
  Offsets unstored_;   // without a state dir: handed over, not yet stored for auto-commit
  // In a cluster: an assignment whose shards could not be claimed yet.
  rd_kafka_topic_partition_list_t* unclaimed_ = nullptr;
};

}  // namespace

ComponentDef KafkaInputDef() {
  ComponentDef d;
  d.kind = "input";
  d.type = "kafka";
  d.partitioned = true;
  d.help = "Consumes `topics` as consumer group `group` (librdkafka). Each message's value is the "
           "payload; its key, headers and timestamp go with it, and with `meta_field` set, an "
           "object payload also gets {topic, partition, offset, key, timestamp, headers} under "
           "that field for transforms. With a state directory the offsets are checkpointed and "
           "committed to the broker only once a checkpoint holding them is durable, and the input "
           "is a static member of its group, named by the state directory, so a restart after a "
           "kill takes its partitions back at once (docs/operations.md).";
  d.checkpoint = "the next offset of every partition read; committed to the group after the "
                 "checkpoint is durable, and again on a restart (a static member's once the group "
                 "assigns it the partitions)";
  d.bad_input = "an unreachable broker or unknown topic is an error on the card while librdkafka "
                "retries; a bad property name is a config error";
  d.props = {
      PropDef{"brokers", PropType::kStringList, true, "",
              "bootstrap brokers, a list or host:port,...", PropRole::kTuning},
      PropDef{"topics", PropType::kStringList, true, "", "topics to subscribe to"}.NonEmpty(),
      PropDef{"group", PropType::kString, true, "", "the consumer group id"}.NonEmpty(),
      PropDef{"start", PropType::kString, false, "earliest",
       "earliest or latest: where a partition with no committed offset starts"}.OneOf({"earliest", "latest"}),
      PropDef{"batch_size", PropType::kInt, false, "1000", "most messages per batch", PropRole::kTuning}.Range(1, 100000),
      PropDef{"batch_wait_ms", PropType::kInt, false, "50", "how long to wait to fill a batch",
       PropRole::kTuning}.Range(0, 60000).Unit("ms"),
      {"meta_field", PropType::kString, false, "",
       "a field to put the message's Kafka metadata under (object payloads)"},
      PropDef{"properties", PropType::kStringMap, false, "",
       "librdkafka consumer properties, by their librdkafka names; kayak's own defaults, "
       "which these override: queued.max.messages.kbytes 16384, queued.min.messages 1000000, "
       "and with a state directory group.instance.id kayak-<16 hex digits>.<pipeline> (\"\" "
       "for a dynamic member)",
       PropRole::kTuning}
          .Secret(),
      TlsPropDef(),
      kafka::SaslPropDef(),
  };
  d.make_input = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Input> {
    const std::string start = o.String("start");
    Properties props = kafka::SecurityProperties(o);
    for (auto& kv : o.StringMap("properties")) props.push_back(std::move(kv));
    CheckProperties(o, props);
    if (ctx.partitions != nullptr) {
      // A shard is (region, partition): a key must name one partition.
      if (o.Strings("topics").size() != 1) {
        o.Error("topics", "in a cluster a kafka input reads one topic (docs/cluster.md)");
      }
      for (const auto& [k, v] : props) {
        if (k == "partition.assignment.strategy" && v.find("cooperative") != std::string::npos) {
          o.Error("properties", "in a cluster a kafka input uses the eager assignors (range, "
                                "roundrobin): each assignment is the whole set it claims");
        }
      }
    }
    if (o.failed()) return nullptr;
    return std::make_unique<KafkaInput>(Brokers(o), o.Strings("topics"), o.String("group"), start,
                                        o.Int("batch_size"), o.Int("batch_wait_ms"),
                                        std::move(props), o.String("meta_field"), ctx);
  };
  return d;
}

}  // namespace kayak
