// The redis input: a pub/sub channel (or pattern), or a stream read as
// consumer `consumer` of group `group`, whose entries are acknowledged
// (XACK) only once the checkpoint holding them is durable.
// docs/components.md, "redis"; docs/durability.md, "Brokers".
//
// Streams: the position is the id of the last entry handed over. At a start
// the consumer reads its own pending entries first (what it was given and
// never acknowledged, in id order), then new ones; a pending entry at or
// below the restored position is acknowledged and skipped, since the state
// already counts it. The consumer's name is tuning: the position records it,
// and a consumer renamed since takes over (XCLAIM) the pending entries of its
// previous name before reading its own, so none is left unclaimed.
#include <deque>
#include <mutex>

#include <nlohmann/json.hpp>

#include "connectors/shared/broker.h"
#include "common/clock.h"
#include "common/json_text.h"
#include "common/json_util.h"
#include "common/log.h"
#include "common/ndjson.h"
#include "connectors/redis/client.h"
#include "kayak/component.h"

namespace kayak {

namespace {

struct StreamOptions {
  std::string stream;  // "" = pub/sub
  std::string group, consumer, start;
  std::string payload_field;
};

std::string_view Str(const redisReply* r) {
  return r != nullptr && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)
             ? std::string_view(r->str, r->len)
             : std::string_view();
}

class RedisInput final : public Input {
 public:
  RedisInput(redis::Address address, TlsOptions tls, std::string channel, StreamOptions so,
             int64_t batch_size, BrokerPayload payload, const ComponentContext& ctx)
      : client_(address, "redis input", tls),
        acker_(address, "redis input (acknowledgements)", tls),
        channel_(std::move(channel)),
        so_(std::move(so)),
        batch_size_(std::to_string(batch_size)),
        batch_limit_(static_cast<size_t>(batch_size)),
        payload_(std::move(payload)),
        ctx_(ctx) {
    pattern_ = channel_.find_first_of("*?[") != std::string::npos;
  }

  Status Read(Batch* out, int64_t wait_ms, bool* finished) override {
    (void)finished;
    if (!stream()) return ReadPubSub(out, wait_ms);
    if (!ctx_.checkpointing) KAYAK_RETURN_IF_ERROR(AckAll(&client_));
    return ReadStream(out, wait_ms);
  }

  std::string Position() const override {
    if (!stream()) return (pattern_ ? "pattern " : "channel ") + channel_;
    std::lock_guard lock(mu_);
    return "stream " + so_.stream + " entry " + redis::IdText(handed_) + ", " +
           std::to_string(unacked_) + " awaiting acknowledgement" +
           (reading_pending_ ? " (reading its pending entries)" : "");
  }

  bool Rewindable() const override { return stream(); }

  std::string SavePosition() const override {
    if (!stream()) return "";
    std::lock_guard lock(mu_);
    if (handed_ == redis::EntryId{0, 0}) return "";
    return DumpJson(nlohmann::json{{"id", redis::IdText(handed_)}, {"consumer", so_.consumer}});
  }

  Status RestorePosition(std::string_view position) override {
    if (position.empty() || !stream()) return Status::Ok();
    if (!ParsePosition(position, &restored_)) {
      return Status::Corruption("redis input: unreadable checkpointed position");
    }
    auto j = nlohmann::json::parse(position, nullptr, false);
    if (j.contains("consumer") && j["consumer"].is_string() &&
        j["consumer"].get<std::string>() != so_.consumer) {
      previous_consumer_ = j["consumer"].get<std::string>();
    }
    handed_ = restored_;
    return Status::Ok();
  }

  void Committed(std::string_view position) override {
    redis::EntryId id;
    if (!stream() || !ParsePosition(position, &id)) return;
    std::deque<AckBatch> due;
    {
      std::lock_guard lock(mu_);
      while (!acks_.empty() && acks_.front().last <= id) {
        unacked_ -= acks_.front().ids.size();
        due.push_back(std::move(acks_.front()));
        acks_.pop_front();
      }
    }
    std::lock_guard lock(acker_mu_);
    Status st = Ack(&acker_, &due);
    if (!st.ok()) {
      // Not lost: they stay pending on the server, and go with the next
      // checkpoint's acknowledgement (a restart reads them first and skips
      // what the state counts).
      if (ctx_.stats != nullptr) ctx_.stats->RecordError(st.message() + " (the entries stay pending)");
      std::lock_guard relock(mu_);
      for (auto it = due.rbegin(); it != due.rend(); ++it) {
        unacked_ += it->ids.size();
        acks_.push_front(std::move(*it));
      }
    }
  }

 private:
  // An acknowledgement that waits longer on the server than this fails and
  // goes again with the next checkpoint's.
  static constexpr int kAckTimeoutMs = 5000;

  struct AckBatch {
    redis::EntryId last{0, 0};     // every entry of the batch is at or below it
    std::vector<std::string> ids;  // to XACK
  };

  bool stream() const { return !so_.stream.empty(); }

  static bool ParsePosition(std::string_view text, redis::EntryId* id) {
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (!j.is_object() || !j["id"].is_string()) return false;
    *id = redis::ParseId(j["id"].get<std::string>());
    return true;
  }

  // ---- pub/sub ----
  Status ReadPubSub(Batch* out, int64_t wait_ms) {
    if (!client_.connected() || !subscribed_) {
      subscribed_ = false;
      KAYAK_RETURN_IF_ERROR(client_.Ensure());
      redis::Reply r;
      KAYAK_RETURN_IF_ERROR(client_.Command({pattern_ ? "PSUBSCRIBE" : "SUBSCRIBE", channel_}, &r));
      if (r == nullptr || r->type != REDIS_REPLY_ARRAY) {
        client_.Close();
        return Status::Unavailable("redis input: SUBSCRIBE " + channel_ + ": " +
                                   std::string(r && r->type == REDIS_REPLY_ERROR ? r->str : "refused"));
      }
      subscribed_ = true;
      KLOG_INFO("redis input: subscribed to {}", channel_);
    }
    for (size_t i = 0; i < batch_limit_; ++i) {
      redis::Reply r;
      KAYAK_RETURN_IF_ERROR(client_.Poll(i == 0 ? wait_ms : 0, &r));
      if (r == nullptr) break;
      if (r->type != REDIS_REPLY_ARRAY || r->elements < 3) continue;
      const std::string_view kind = Str(r->element[0]);
      const bool pmessage = kind == "pmessage" && r->elements >= 4;
      if (kind != "message" && !pmessage) continue;  // (un)subscribe confirmations
      const std::string_view channel = Str(r->element[pmessage ? 2 : 1]);
      const std::string_view data = Str(r->element[pmessage ? 3 : 2]);
      meta_.clear();
      if (!payload_.meta_field.empty()) {
        meta_ = "{\"channel\":";
        jtext::AppendString(&meta_, channel);
        meta_ += '}';
      }
      Emit(data, ctx_.clock->NowMs(), out);
    }
    return Status::Ok();
  }

  // ---- streams ----
  Status ReadStream(Batch* out, int64_t wait_ms) {
    if (!client_.connected()) {
      KAYAK_RETURN_IF_ERROR(client_.Ensure());
      KAYAK_RETURN_IF_ERROR(CreateGroup());
      if (!previous_consumer_.empty()) KAYAK_RETURN_IF_ERROR(TakeOver());
      reading_pending_ = true;  // after every (re)connection: ours first
      pending_from_ = "0";
    }
    redis::Reply r;
    if (reading_pending_) {
      KAYAK_RETURN_IF_ERROR(client_.Command({"XREADGROUP", "GROUP", so_.group, so_.consumer,
                                             "COUNT", batch_size_, "STREAMS", so_.stream,
                                             pending_from_},
                                            &r));
    } else {
      const std::string block = std::to_string(std::max<int64_t>(wait_ms, 1));
      KAYAK_RETURN_IF_ERROR(client_.Command({"XREADGROUP", "GROUP", so_.group, so_.consumer,
                                             "COUNT", batch_size_, "BLOCK", block, "STREAMS",
                                             so_.stream, ">"},
                                            &r, static_cast<int>(wait_ms) + 10000));
    }
    if (r->type == REDIS_REPLY_ERROR) {
      const std::string why(r->str, r->len);
      if (why.rfind("NOGROUP", 0) == 0) client_.Close();  // deleted: made again next time
      return Status::Unavailable("redis input: XREADGROUP on " + so_.stream + ": " + why);
    }
    const redisReply* entries = nullptr;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0]->elements == 2) {
      entries = r->element[0]->element[1];
    }
    if (entries == nullptr || entries->elements == 0) {
      if (reading_pending_) {
        reading_pending_ = false;
        KLOG_INFO("redis input: read the pending entries of consumer {}; now new ones",
                  so_.consumer);
      }
      return Status::Ok();
    }
    AckBatch batch;
    size_t deleted = 0;
    std::string first_deleted;
    redis::EntryId handed;
    {
      std::lock_guard lock(mu_);
      handed = handed_;
    }
    for (size_t i = 0; i < entries->elements; ++i) {
      const redisReply* e = entries->element[i];
      if (e->type != REDIS_REPLY_ARRAY || e->elements < 2) continue;
      const std::string_view id_text = Str(e->element[0]);
      const redis::EntryId id = redis::ParseId(id_text);
      batch.ids.emplace_back(id_text);
      if (reading_pending_) pending_from_.assign(id_text);
      // The state counts it already (pending past the restored position's
      // acknowledgement): acknowledged with this batch, not handed over.
      if (id <= handed) continue;
      const redisReply* fields = e->element[1];
      if (fields == nullptr || fields->type != REDIS_REPLY_ARRAY) {
        // Pending here, gone from the stream (XDEL, or trimmed by MAXLEN or
        // MINID): read before the crash, never counted, and now lost.
        if (deleted++ == 0) first_deleted.assign(id_text);
        continue;
      }
      meta_.clear();
      if (!payload_.meta_field.empty()) {
        meta_ = "{\"stream\":";
        jtext::AppendString(&meta_, so_.stream);
        meta_ += ",\"id\":";
        jtext::AppendString(&meta_, id_text);
        meta_ += '}';
      }
      EmitEntry(fields, static_cast<int64_t>(id.first), out);
      batch.last = id;
    }
    if (deleted > 0) ReportDeleted(deleted, first_deleted);
    std::lock_guard lock(mu_);
    if (batch.last == redis::EntryId{0, 0}) batch.last = handed_;
    handed_ = std::max(handed_, batch.last);
    unacked_ += batch.ids.size();
    acks_.push_back(std::move(batch));
    return Status::Ok();
  }

  // Pending entries deleted from the stream before they were read again:
  // counted as errors on the card, logged once per run.
  void ReportDeleted(size_t n, const std::string& first) {
    const std::string why = "redis input: " + std::to_string(n) + " pending entries of consumer " +
                            so_.consumer + " (from " + first + ") were deleted from stream " +
                            so_.stream + " (XDEL or trimmed) before they were read again: lost";
    if (ctx_.stats != nullptr) ctx_.stats->RecordError(why, n);
    if (!deleted_logged_) KLOG_WARN("{}", why);
    deleted_logged_ = true;
  }

  Status CreateGroup() {
    redis::Reply r;
    KAYAK_RETURN_IF_ERROR(client_.Command(
        {"XGROUP", "CREATE", so_.stream, so_.group, so_.start, "MKSTREAM"}, &r));
    if (r->type == REDIS_REPLY_ERROR && std::string_view(r->str, r->len).rfind("BUSYGROUP", 0) != 0) {
      const std::string why(r->str, r->len);
      client_.Close();
      return Status::Invalid("redis input: XGROUP CREATE " + so_.stream + " " + so_.group + ": " +
                             why);
    }
    if (r->type != REDIS_REPLY_ERROR) {
      KLOG_INFO("redis input: created group {} on stream {} at {}", so_.group, so_.stream,
                so_.start);
    }
    return Status::Ok();
  }

  // The pending entries of the name this consumer had at the checkpoint
  // become its own (XCLAIM with no idle minimum: that reader was this one),
  // then the old name leaves the group. The restored position covers them
  // as it covered them under the old name.
  Status TakeOver() {
    size_t moved = 0;
    std::string first;
    for (;;) {
      redis::Reply r;
      KAYAK_RETURN_IF_ERROR(client_.Command({"XPENDING", so_.stream, so_.group, "-", "+",
                                             batch_size_, previous_consumer_},
                                            &r));
      if (r->type == REDIS_REPLY_ERROR) {
        return Status::Unavailable("redis input: XPENDING of " + previous_consumer_ + ": " +
                                   std::string(r->str, r->len));
      }
      if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) break;
      std::vector<std::string> ids;
      for (size_t i = 0; i < r->elements; ++i) {
        const redisReply* e = r->element[i];
        if (e->type == REDIS_REPLY_ARRAY && e->elements >= 1) ids.emplace_back(Str(e->element[0]));
      }
      if (ids.empty() || ids.front() == first) break;  // nothing moved last round
      first = ids.front();
      std::vector<std::string_view> args = {"XCLAIM", so_.stream, so_.group, so_.consumer, "0"};
      for (const auto& id : ids) args.push_back(id);
      args.push_back("JUSTID");
      redis::Reply c;
      KAYAK_RETURN_IF_ERROR(client_.Command(args, &c));
      if (c->type == REDIS_REPLY_ERROR) {
        return Status::Unavailable("redis input: XCLAIM from " + previous_consumer_ + ": " +
                                   std::string(c->str, c->len));
      }
      // An id deleted from the stream may stay in the old reader's list;
      // the loop ends when a round moves nothing new.
      if (c->type != REDIS_REPLY_ARRAY || c->elements == 0) break;
      moved += c->elements;
    }
    redis::Reply d;
    KAYAK_RETURN_IF_ERROR(client_.Command(
        {"XGROUP", "DELCONSUMER", so_.stream, so_.group, previous_consumer_}, &d));
    KLOG_INFO("redis input: consumer {} took over {} pending entries of {}, its name at the "
              "checkpoint",
              so_.consumer, moved, previous_consumer_);
    previous_consumer_.clear();
    return Status::Ok();
  }

  // An entry with payload_field is that payload; one without it becomes an
  // object of its fields, each value as JSON where it parses, else a string.
  void EmitEntry(const redisReply* fields, int64_t ts_ms, Batch* out) {
    for (size_t k = 0; k + 1 < fields->elements; k += 2) {
      if (Str(fields->element[k]) == so_.payload_field) {
        Emit(Str(fields->element[k + 1]), ts_ms, out);
        return;
      }
    }
    object_ = "{";
    for (size_t k = 0; k + 1 < fields->elements; k += 2) {
      if (k > 0) object_ += ',';
      jtext::AppendString(&object_, Str(fields->element[k]));
      object_ += ':';
      const std::string_view v = Str(fields->element[k + 1]);
      if (!v.empty() && IsJson(v)) {
        object_ += v;
      } else {
        jtext::AppendString(&object_, v);
      }
    }
    object_ += '}';
    Emit(object_, ts_ms, out);
  }

  void Emit(std::string_view data, int64_t ts_ms, Batch* out) {
    std::string payload, why;
    if (!MakeBrokerPayload(data, payload_, meta_, &payload, &why)) {
      if (ctx_.stats != nullptr) ctx_.stats->RecordError("redis input: " + why);
      Refuse(data, ts_ms, why);  // to the dead letters, when the pipeline has them
      return;
    }
    Message m(std::move(payload), ts_ms);
    m.MarkJson();
    out->messages.push_back(std::move(m));
  }

  Status AckAll(redis::Client* client) {
    std::deque<AckBatch> due;
    {
      std::lock_guard lock(mu_);
      due.swap(acks_);
      unacked_ = 0;
    }
    Status st = Ack(client, &due);
    if (!st.ok()) {
      std::lock_guard lock(mu_);
      for (auto it = due.rbegin(); it != due.rend(); ++it) {
        unacked_ += it->ids.size();
        acks_.push_front(std::move(*it));
      }
    }
    return st;
  }

  // Acknowledges the batches of `due` in order, removing each once done;
  // those left failed or were not tried.
  Status Ack(redis::Client* client, std::deque<AckBatch>* due) {
    while (!due->empty()) {
      const AckBatch& b = due->front();
      if (!b.ids.empty()) {
        std::vector<std::string_view> args = {"XACK", so_.stream, so_.group};
        for (const auto& id : b.ids) args.push_back(id);
        redis::Reply r;
        KAYAK_RETURN_IF_ERROR(client->Command(args, &r, kAckTimeoutMs));
        if (r->type == REDIS_REPLY_ERROR) {
          return Status::Unavailable("redis input: XACK: " + std::string(r->str, r->len));
        }
      }
      due->pop_front();
    }
    return Status::Ok();
  }

  redis::Client client_;   // the pipeline thread
  std::mutex acker_mu_;
  redis::Client acker_;    // the checkpoint thread's acknowledgements
  const std::string channel_;
  bool pattern_ = false;
  bool subscribed_ = false;
  const StreamOptions so_;
  const std::string batch_size_;  // as XREADGROUP's COUNT takes it
  const size_t batch_limit_;
  const BrokerPayload payload_;
  ComponentContext ctx_;
  std::string meta_, object_;  // reused
  bool reading_pending_ = true;
  bool deleted_logged_ = false;  // ReportDeleted logged once
  std::string pending_from_ = "0";
  redis::EntryId restored_{0, 0};
  std::string previous_consumer_;  // the name at the checkpoint, when it differs
  mutable std::mutex mu_;
  redis::EntryId handed_{0, 0};  // guarded: the last entry handed over
  uint64_t unacked_ = 0;         // guarded
  std::deque<AckBatch> acks_;    // guarded
};

}  // namespace

ComponentDef RedisInputDef() {
  ComponentDef d;
  d.kind = "input";
  d.type = "redis";
  d.help =
      "Reads a pub/sub `channel` (a pattern when it has * ? or [), or a `stream` as consumer "
      "`consumer` of group `group` (hiredis; the group is created at `start` when missing, "
      "with MKSTREAM). A stream entry is acknowledged (XACK) only once the checkpoint holding "
      "it is durable (without a state directory: once the outputs took its batch), and a "
      "restarted consumer reads its own pending entries first, so the input is rewindable. An "
      "entry with `payload_field` is that payload; one without it becomes an object of its "
      "fields, each value as JSON where it parses (numbers) and a string otherwise.";
  d.checkpoint = "streams: the id of the last entry handed over; pending entries up to it are "
                 "acknowledged, not read again. Pub/sub: nothing (messages in flight at a crash "
                 "are lost)";
  d.bad_input = "a payload that is not JSON is wrapped, or counted as an error and sent to the "
                "pipeline's dead letters when it has them (`non_json`); an "
                "unreachable server is retried with backoff (the card says retrying), then the "
                "subscription or the group read is made again; a key of the wrong type is "
                "retried with its error on the card";
  d.props = {
      PropDef{"url", PropType::kString, true, "",
              "redis://[[user]:password@]host:port[/db] (rediss:// over TLS); a password as "
              "${ENV} or ${file:...}"}
          .NonEmpty()
          .Secret()
          .Address(),
      TlsPropDef(),
      {"channel", PropType::kString, false, "", "a pub/sub channel or pattern"},
      {"stream", PropType::kString, false, "", "a stream key, read through a consumer group"},
      {"group", PropType::kString, false, "", "with `stream`: the consumer group (default kayak)"},
      PropDef{"consumer", PropType::kString, false, "",
              "with `stream`: this reader's name in the group (default kayak-<pipeline>); "
              "renamed, it takes over the pending entries of its name at the checkpoint",
              PropRole::kTuning},
      {"start", PropType::kString, false, "0",
       "with `stream`: where a new group starts: 0 (everything), $ (new entries) or an id"},
      {"payload_field", PropType::kString, false, "payload",
       "with `stream`: the entry field that holds the message"},
      PropDef{"batch_size", PropType::kInt, false, "1000", "most messages per batch",
              PropRole::kTuning}
          .Range(1, 100000),
  };
  for (auto& p : BrokerPayloadProps("channel, or stream and entry id")) {
    d.props.push_back(std::move(p));
  }
  d.make_input = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Input> {
    redis::Address address;
    std::string error;
    if (!redis::ParseUrl(o.String("url"), &address, &error)) o.Error("url", error);
    TlsOptions tls = ReadTlsOptions(o);
    StreamOptions so;
    so.stream = o.String("stream");
    so.group = o.Has("group") ? o.String("group") : "kayak";
    so.consumer = o.Has("consumer") ? o.String("consumer") : "kayak-" + ctx.pipeline_id;
    so.start = o.String("start");
    so.payload_field = o.String("payload_field");
    if (so.stream.empty() == o.String("channel").empty()) {
      o.Error("channel", "give either `channel` (pub/sub) or `stream` (consumer group)");
    }
    if (so.stream.empty()) {
      for (const char* name : {"group", "consumer", "start", "payload_field"}) {
        if (o.Has(name)) o.Error(name, "only with `stream`");
      }
    }
    if (o.failed()) return nullptr;
    return std::make_unique<RedisInput>(address, std::move(tls), o.String("channel"), std::move(so),
                                        o.Int("batch_size"), ReadBrokerPayload(o), ctx);
  };
  return d;
}

}  // namespace kayak
