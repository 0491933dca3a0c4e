// The nats input: a core subscription (subject, optional queue group), or a
// JetStream durable pull consumer acknowledged only once the checkpoint
// holding its messages is durable. docs/components.md, "nats";
// docs/durability.md, "Brokers".
//
// JetStream under checkpointing: the position is the highest stream sequence
// handed over. Messages are acknowledged (explicit acks, in batches) once a
// checkpoint covering them commits (Committed). At every start kayak moves
// the durable to the position it restores (or to the old durable's ack
// floor) with the server's consumer reset (nats-server 2.14), so what the
// dead process held unacknowledged comes again at once and in order, instead
// of after ack_wait, and the durable stays what it is: another client bound
// to it goes on, its ack floor stays. A server without the reset (or a
// durable whose settings changed) gets the durable deleted and created again
// at that position. A message at or below the restored position is
// acknowledged and skipped, since the state already counts it. The same
// after a reconnection: what the broken connection was sent (a fetch whose
// answer was lost) comes again at once, not after ack_wait. Messages the
// stream dropped (max_age, max_msgs) before they were read are counted on
// the card, not passed over in silence.
#include <deque>
#include <mutex>

#include <nlohmann/json.hpp>

#include "connectors/shared/tls.h"
#include "connectors/shared/broker.h"
#include "common/clock.h"
#include "common/json_text.h"
#include "common/log.h"
#include "connectors/nats/conn.h"
#include "kayak/component.h"

namespace kayak {

namespace {

struct JetStreamOptions {
  std::string stream;  // "" = core
  std::string durable;
  std::string deliver;  // all | new: where a new durable starts
  int64_t ack_wait_secs = 300;
  int64_t max_ack_pending = 200000;
};

struct MsgListFree {
  natsMsgList* l;
  ~MsgListFree() { natsMsgList_Destroy(l); }
};

class NatsInput final : public Input {
 public:
  NatsInput(std::string url, std::string subject, std::string queue, JetStreamOptions js,
            int64_t batch_size, int64_t pending_limit, BrokerPayload payload, TlsOptions tls,
            nats::Login login, const ComponentContext& ctx)
      : conn_(url, "nats input", std::move(tls), std::move(login)),
        subject_(std::move(subject)),
        queue_(std::move(queue)),
        js_(std::move(js)),
        batch_size_(static_cast<int>(batch_size)),
        pending_limit_(static_cast<int>(pending_limit)),
        payload_(std::move(payload)),
        ctx_(ctx) {}

  ~NatsInput() override {
    if (sub_ != nullptr) natsSubscription_Destroy(sub_);  // never Unsubscribe: it deletes a durable
    sub_ = nullptr;
    conn_.Flush(2000);  // the last acks
  }

  Status Read(Batch* out, int64_t wait_ms, bool* finished) override {
    (void)finished;
    KAYAK_RETURN_IF_ERROR(conn_.Ensure());
    if (sub_ != nullptr && jetstream() && ctx_.checkpointing &&
        conn_.connections() != subscribed_on_) {
      // The connection broke and was made again: what the server sent on the
      // broken one counts as delivered there and would come again only after
      // ack_wait. The durable is made afresh after what was handed over, so
      // it comes now.
      natsSubscription_Destroy(sub_);  // never Unsubscribe: it deletes a durable
      sub_ = nullptr;
      KLOG_INFO("nats input: connected again; durable {} made afresh after what was handed over",
                js_.durable);
    }
    if (sub_ == nullptr) KAYAK_RETURN_IF_ERROR(Subscribe());
    if (!jetstream()) return ReadCore(out, wait_ms);
    if (!ctx_.checkpointing) AckAll();  // the batch before went through the chain
    return ReadJetStream(out, wait_ms);
  }

  std::string Position() const override {
    if (!jetstream()) return "subject " + subject_;
    std::lock_guard lock(mu_);
    return "stream " + js_.stream + " sequence " + std::to_string(handed_) + ", " +
           std::to_string(unacked_) + " awaiting acknowledgement";
  }

  bool Rewindable() const override { return jetstream(); }

  std::string SavePosition() const override {
    if (!jetstream()) return "";
    std::lock_guard lock(mu_);
    if (handed_ == 0) return "";
    return "{\"stream_seq\":" + std::to_string(handed_) + "}";
  }

  Status RestorePosition(std::string_view position) override {
    if (position.empty() || !jetstream()) return Status::Ok();
    if (!ParsePosition(position, &restored_)) {
      return Status::Corruption("nats input: unreadable checkpointed position");
    }
    handed_ = restored_;
    return Status::Ok();
  }

  // The checkpoint covering stream sequence `position` is durable: every
  // message handed over up to it is acknowledged.
  void Committed(std::string_view position) override {
    uint64_t seq = 0;
    if (jetstream() && ParsePosition(position, &seq)) AckUpTo(seq);
  }

 private:
  struct AckBatch {
    uint64_t last_seq = 0;  // every message of the batch is at or below it
    std::string replies;    // the ack subjects, one a line
    uint64_t count = 0;
  };

  bool jetstream() const { return !js_.stream.empty(); }

  static bool ParsePosition(std::string_view text, uint64_t* seq) {
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (!j.is_object() || !j["stream_seq"].is_number_unsigned()) return false;
    *seq = j["stream_seq"].get<uint64_t>();
    return true;
  }

  Status Subscribe() {
    natsStatus s;
    if (!jetstream()) {
      s = queue_.empty()
              ? natsConnection_SubscribeSync(&sub_, conn_.get(), subject_.c_str())
              : natsConnection_QueueSubscribeSync(&sub_, conn_.get(), subject_.c_str(),
                                                  queue_.c_str());
      if (s != NATS_OK) {
        sub_ = nullptr;
        return nats::ToStatus(s, conn_.Error("subscribing to " + subject_, s));
      }
      // The client's buffer, bounded: past it cnats drops (slow consumer)
      // and the card counts what was dropped.
      natsSubscription_SetPendingLimits(sub_, pending_limit_, 256 * 1024 * 1024);
      KLOG_INFO("nats input: subscribed to {}{}", subject_,
                queue_.empty() ? "" : " in queue group " + queue_);
      return Status::Ok();
    }
    subscribed_on_ = conn_.connections();
    KAYAK_RETURN_IF_ERROR(PrepareDurable());
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = js_.stream.c_str();
    so.Consumer = js_.durable.c_str();
    jsErrCode jerr = static_cast<jsErrCode>(0);
    s = js_PullSubscribe(&sub_, conn_.js(), subject_.c_str(), js_.durable.c_str(), nullptr, &so,
                         &jerr);
    if (s != NATS_OK) {
      sub_ = nullptr;
      return nats::ToStatus(s, conn_.Error("binding to durable " + js_.durable, s));
    }
    return Status::Ok();
  }

  // Makes the durable exist: under checkpointing, moved to just after what
  // was handed over (at a start, the restored position; with nothing
  // restored, the old one's ack floor); otherwise created once and then
  // bound as it is.
  Status PrepareDurable() {
    jsErrCode jerr = static_cast<jsErrCode>(0);
    jsStreamInfo* si = nullptr;
    natsStatus s = js_GetStreamInfo(&si, conn_.js(), js_.stream.c_str(), nullptr, &jerr);
    if (s != NATS_OK) {
      if (jerr == JSStreamNotFoundErr || s == NATS_NOT_FOUND) {
        return Status::Unavailable("nats input: JetStream stream " + js_.stream +
                                   " does not exist (create it; kayak creates only the durable)");
      }
      return nats::ToStatus(s, conn_.Error("reading stream " + js_.stream, s));
    }
    const jsRetentionPolicy retention = si->Config->Retention;
    const uint64_t first_seq = si->State.FirstSeq;
    jsStreamInfo_Destroy(si);

    jsConsumerInfo* ci = nullptr;
    s = js_GetConsumerInfo(&ci, conn_.js(), js_.stream.c_str(), js_.durable.c_str(), nullptr,
                           &jerr);
    const bool exists = s == NATS_OK;
    uint64_t floor = 0;
    bool same_settings = false;
    if (exists) {
      floor = ci->AckFloor.Stream;
      const jsConsumerConfig* c = ci->Config;
      same_settings = c != nullptr && c->AckPolicy == js_AckExplicit &&
                      c->AckWait == js_.ack_wait_secs * 1000000000LL &&
                      c->MaxAckPending == js_.max_ack_pending &&
                      subject_ == (c->FilterSubject != nullptr ? c->FilterSubject : "");
      jsConsumerInfo_Destroy(ci);
    } else if (jerr != JSConsumerNotFoundErr && s != NATS_NOT_FOUND) {
      return nats::ToStatus(s, conn_.Error("reading durable " + js_.durable, s));
    }
    uint64_t start = 0;  // 0: by `deliver`
    if (ctx_.checkpointing) {
      if (retention == js_InterestPolicy) {
        return Status::Invalid(
            "nats input: stream " + js_.stream +
            " has interest retention; a checkpointed input needs limits or work-queue retention "
            "(it moves its durable to the checkpointed position, which would drop messages "
            "of an interest stream)");
      }
      uint64_t handed;
      {
        std::lock_guard lock(mu_);
        handed = handed_;  // the restored position, or more once messages were taken
      }
      if (handed > 0) {
        start = handed + 1;
      } else if (exists) {
        start = floor + 1;
      }
      CountAgedOut(start, first_seq);
      if (exists && same_settings && reset_works_) {
        const Status st = ResetDurable(start);
        if (st.ok()) return Status::Ok();
        if (st.retryable()) return st;
        reset_works_ = false;  // an older server: delete and create from now on
        KLOG_INFO("nats input: {}; durable {} is deleted and created again instead", st.message(),
                  js_.durable);
      }
      if (exists) {
        s = js_DeleteConsumer(conn_.js(), js_.stream.c_str(), js_.durable.c_str(), nullptr, &jerr);
        if (s != NATS_OK && jerr != JSConsumerNotFoundErr) {
          return nats::ToStatus(s, conn_.Error("recreating durable " + js_.durable, s));
        }
      }
    } else if (exists) {
      return Status::Ok();
    }
    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = js_.durable.c_str();
    cc.AckPolicy = js_AckExplicit;
    cc.AckWait = js_.ack_wait_secs * 1000000000LL;
    cc.MaxAckPending = js_.max_ack_pending;
    cc.FilterSubject = subject_.c_str();
    if (start > 0) {
      cc.DeliverPolicy = js_DeliverByStartSequence;
      cc.OptStartSeq = start;
    } else {
      cc.DeliverPolicy = js_.deliver == "new" ? js_DeliverNew : js_DeliverAll;
    }
    s = js_AddConsumer(nullptr, conn_.js(), js_.stream.c_str(), &cc, nullptr, &jerr);
    if (s != NATS_OK) {
      return nats::ToStatus(s, conn_.Error("creating durable " + js_.durable + " on stream " +
                                               js_.stream,
                                           s));
    }
    KLOG_INFO("nats input: durable {} on stream {} {}", js_.durable, js_.stream,
              start > 0 ? "starts at sequence " + std::to_string(start)
                        : "created (" + js_.deliver + ")");
    return Status::Ok();
  }

  // The durable's next message is stream sequence `start`, its ack floor one
  // below, everything it had delivered and not acknowledged forgotten
  // ($JS.API.CONSUMER.RESET, nats-server 2.14). Invalid where the server has
  // no such request (it answers nothing, or an error).
  Status ResetDurable(uint64_t start) {
    const std::string subject = "$JS.API.CONSUMER.RESET." + js_.stream + "." + js_.durable;
    const std::string body = "{\"seq\":" + std::to_string(start) + "}";
    natsMsg* reply = nullptr;
    const natsStatus s = natsConnection_Request(&reply, conn_.get(), subject.c_str(), body.data(),
                                                static_cast<int>(body.size()), 2000);
    if (s == NATS_TIMEOUT || s == NATS_NO_RESPONDERS) {
      return Status::Invalid("the server does not reset a consumer (nats-server 2.14 does)");
    }
    if (s != NATS_OK) return nats::ToStatus(s, conn_.Error("resetting durable " + js_.durable, s));
    const std::string_view data(natsMsg_GetData(reply),
                                static_cast<size_t>(natsMsg_GetDataLength(reply)));
    auto j = nlohmann::json::parse(data, nullptr, false);
    natsMsg_Destroy(reply);
    if (!j.is_object()) return Status::Invalid("the server's answer to a consumer reset is not JSON");
    if (j.contains("error")) {
      return Status::Invalid("the server refused to reset durable " + js_.durable + ": " +
                             j["error"].value("description", std::string("no description")));
    }
    KLOG_INFO("nats input: durable {} on stream {} reset to sequence {}", js_.durable, js_.stream,
              start);
    return Status::Ok();
  }

  // Messages from `start` on that the stream no longer holds (its first is
  // `first_seq`): dropped by its limits before the input read them. Counted
  // once per gap (an upper bound where the durable filters subjects).
  void CountAgedOut(uint64_t start, uint64_t first_seq) {
    if (start == 0 || first_seq <= start || first_seq <= aged_out_until_) return;
    const uint64_t from = std::max(start, aged_out_until_);
    aged_out_until_ = first_seq;
    const std::string what = "nats input: stream " + js_.stream + " dropped sequences " +
                             std::to_string(from) + " to " + std::to_string(first_seq - 1) +
                             " (its max_age or size limits) before they were read";
    KLOG_WARN("{}", what);
    if (ctx_.stats != nullptr) ctx_.stats->RecordError(what, first_seq - from);
  }

  Status ReadCore(Batch* out, int64_t wait_ms) {
    for (int i = 0; i < batch_size_; ++i) {
      natsMsg* m = nullptr;
      // cnats refuses a timeout of 0: 1 ms once the batch has begun
      const natsStatus s = natsSubscription_NextMsg(&m, sub_, i == 0 ? std::max<int64_t>(wait_ms, 1) : 1);
      if (s == NATS_TIMEOUT) break;
      if (s == NATS_SLOW_CONSUMER) {
        int64_t dropped = 0;
        natsSubscription_GetDropped(sub_, &dropped);
        if (ctx_.stats != nullptr) {
          ctx_.stats->RecordError("nats input: the subscription's buffer was full ("
                                  + std::to_string(pending_limit_) +
                                  " messages): the client dropped " +
                                  std::to_string(dropped - dropped_) + " messages",
                                  static_cast<uint64_t>(std::max<int64_t>(dropped - dropped_, 1)));
        }
        dropped_ = dropped;
        continue;
      }
      if (s != NATS_OK) return nats::ToStatus(s, conn_.Error("reading", s));
      Take(m, 0, 0, out);
      natsMsg_Destroy(m);
    }
    if (out->messages.empty()) return conn_.Up();
    return Status::Ok();
  }

  Status ReadJetStream(Batch* out, int64_t wait_ms) {
    natsMsgList list{nullptr, 0};
    jsErrCode jerr = static_cast<jsErrCode>(0);
    const natsStatus s =
        natsSubscription_Fetch(&list, sub_, batch_size_, std::max<int64_t>(wait_ms, 1), &jerr);
    MsgListFree free_list{&list};
    // Whatever the status says, what came is handed over: a message
    // delivered and dropped here would come back only after ack_wait.
    if (list.Count == 0) {
      if (s == NATS_TIMEOUT || s == NATS_OK) return conn_.Up();
      return nats::ToStatus(s, conn_.Error("fetching from " + js_.durable, s));
    }
    AckBatch batch;
    for (int i = 0; i < list.Count; ++i) {
      natsMsg* m = list.Msgs[i];
      jsMsgMetaData* meta = nullptr;
      if (natsMsg_GetMetaData(&meta, m) != NATS_OK) continue;
      const uint64_t seq = meta->Sequence.Stream;
      const int64_t ts_ms = meta->Timestamp / 1000000;
      jsMsgMetaData_Destroy(meta);
      const char* reply = natsMsg_GetReply(m);
      if (reply != nullptr) {
        batch.replies.append(reply);
        batch.replies.push_back('\n');
        ++batch.count;
      }
      uint64_t handed;
      {
        std::lock_guard lock(mu_);
        handed = handed_;
      }
      // At or below what was handed over: the state counts it already (a
      // redelivery, or what the restored checkpoint covers). Acknowledged
      // with this batch, not handed over again.
      if (seq <= handed) continue;
      Take(m, seq, ts_ms, out);
      batch.last_seq = seq;
    }
    std::lock_guard lock(mu_);
    if (batch.last_seq == 0) batch.last_seq = handed_;
    handed_ = std::max(handed_, batch.last_seq);
    unacked_ += batch.count;
    if (batch.count > 0) acks_.push_back(std::move(batch));
    return Status::Ok();
  }

  void Take(natsMsg* m, uint64_t seq, int64_t ts_ms, Batch* out) {
    const std::string_view data(natsMsg_GetData(m), static_cast<size_t>(natsMsg_GetDataLength(m)));
    meta_.clear();
    if (!payload_.meta_field.empty()) {
      meta_ = "{\"subject\":";
      jtext::AppendString(&meta_, natsMsg_GetSubject(m));
      if (seq > 0) {
        meta_ += ",\"stream\":";
        jtext::AppendString(&meta_, js_.stream);
        meta_ += ",\"stream_seq\":" + std::to_string(seq);
      }
      meta_ += ",\"headers\":{";
      const char** keys = nullptr;
      int count = 0;
      if (natsMsgHeader_Keys(m, &keys, &count) == NATS_OK) {
        for (int k = 0; k < count; ++k) {
          const char* value = nullptr;
          natsMsgHeader_Get(m, keys[k], &value);
          if (k > 0) meta_ += ',';
          jtext::AppendString(&meta_, keys[k]);
          meta_ += ':';
          jtext::AppendString(&meta_, value != nullptr ? value : "");
        }
        free(static_cast<void*>(keys));
      }
      meta_ += "}}";
    }
    std::string payload, why;
    if (!MakeBrokerPayload(data, payload_, meta_, &payload, &why)) {
      if (ctx_.stats != nullptr) ctx_.stats->RecordError("nats input: " + why);
      Refuse(data, ts_ms > 0 ? ts_ms : ctx_.clock->NowMs(), why);  // to the dead letters, if any
      return;
    }
    Message msg(std::move(payload), ts_ms > 0 ? ts_ms : ctx_.clock->NowMs());
    msg.MarkJson();
    out->messages.push_back(std::move(msg));
  }

  // Publishes the acknowledgements of every batch whose messages are all at
  // or below `seq`.
  void AckUpTo(uint64_t seq) {
    std::deque<AckBatch> due;
    {
      std::lock_guard lock(mu_);
      while (!acks_.empty() && acks_.front().last_seq <= seq) {
        unacked_ -= acks_.front().count;
        due.push_back(std::move(acks_.front()));
        acks_.pop_front();
      }
    }
    Publish(due);
  }

  void AckAll() {
    std::deque<AckBatch> due;
    {
      std::lock_guard lock(mu_);
      due.swap(acks_);
      unacked_ = 0;
    }
    Publish(due);
  }

  void Publish(const std::deque<AckBatch>& due) {
    natsConnection* nc = conn_.get();
    if (nc == nullptr || due.empty()) return;
    size_t failed = 0;
    for (const auto& b : due) {
      std::string_view rest = b.replies;
      while (!rest.empty()) {
        const size_t nl = rest.find('\n');
        const std::string reply(rest.substr(0, nl));
        rest.remove_prefix(nl + 1);
        if (natsConnection_Publish(nc, reply.c_str(), "+ACK", 4) != NATS_OK) ++failed;
      }
    }
    // While the library reconnects, the acks wait in its reconnect buffer.
    conn_.Flush(2000);
    if (failed > 0 && ctx_.stats != nullptr) {
      // Not lost: the server delivers them again after ack_wait, and the
      // input skips what its state already counts.
      ctx_.stats->RecordError("nats input: " + std::to_string(failed) +
                              " acknowledgements could not be sent (the server redelivers them "
                              "after ack_wait)");
    }
  }

  nats::Connection conn_;
  bool reset_works_ = true;         // the server resets a consumer
  uint64_t aged_out_until_ = 0;     // the stream's first sequence, once a gap was counted
  uint64_t subscribed_on_ = 0;  // conn_.connections() when the durable was bound
  const std::string subject_;
  const std::string queue_;
  const JetStreamOptions js_;
  const int batch_size_;
  const int pending_limit_;
  const BrokerPayload payload_;
  ComponentContext ctx_;
  natsSubscription* sub_ = nullptr;
  int64_t dropped_ = 0;
  std::string meta_;           // reused
  uint64_t restored_ = 0;      // the restored checkpoint's sequence
  mutable std::mutex mu_;      // the pipeline thread and the checkpoint thread
  uint64_t handed_ = 0;        // guarded: the highest sequence handed over
  uint64_t unacked_ = 0;       // guarded
  std::deque<AckBatch> acks_;  // guarded: handed over, not yet acknowledged
};

}  // namespace

ComponentDef NatsInputDef() {
  ComponentDef d;
  d.kind = "input";
  d.type = "nats";
  d.help =
      "Subscribes to `subject` (cnats): core NATS, in queue group `queue` if given, or with "
      "`stream`, a JetStream durable pull consumer (`durable`, created when missing; explicit "
      "acks). A JetStream message is acknowledged only once the checkpoint holding it is "
      "durable (without a state directory: once the outputs took its batch), so the input is "
      "rewindable. A payload that is JSON is the message; another is wrapped or refused "
      "(`non_json`).";
  d.checkpoint = "JetStream: the highest stream sequence handed over; at a restart the durable "
                 "is moved (reset) to just after it, and what the stream dropped before it was read is counted. Core: nothing (messages in flight at a "
                 "crash are lost)";
  d.bad_input = "a payload that is not JSON is wrapped, or counted as an error and sent to the "
                "pipeline's dead letters when it has them (`non_json`); an "
                "unreachable server, or a missing stream, is retried with backoff (the card "
                "says retrying) and the library restores the subscription; messages past the "
                "core subscription's buffer (`pending_limit`) are dropped by the client and "
                "counted";
  d.props = {
      PropDef{"url", PropType::kString, true, "",
              "nats://host:port (several comma-separated; tls://host:port over TLS); "
              "credentials as ${ENV}"}
          .NonEmpty()
          .Secret()
          .Address(),
      TlsPropDef(),
      PropDef{"subject", PropType::kString, true, "", "the subject (wildcards * and >)"}
          .NonEmpty(),
      {"queue", PropType::kString, false, "", "core: a queue group to share the subject in"},
      {"stream", PropType::kString, false, "",
       "a JetStream stream: read through a durable pull consumer instead of core NATS"},
      {"durable", PropType::kString, false, "",
       "with `stream`: the durable consumer's name (default kayak-<pipeline>)"},
      PropDef{"deliver", PropType::kString, false, "all",
              "with `stream`: where a new durable starts, `all` or `new`"}
          .OneOf({"all", "new"}),
      PropDef{"ack_wait_secs", PropType::kInt, false, "300",
              "with `stream`: how long the server waits for an acknowledgement before it "
              "delivers a message again; keep it above the checkpoint interval plus its timeout",
              PropRole::kTuning}
          .Range(1, 86400)
          .Unit("s"),
      PropDef{"max_ack_pending", PropType::kInt, false, "200000",
              "with `stream`: most messages delivered and not yet acknowledged; under "
              "checkpointing, what one checkpoint interval may hold",
              PropRole::kTuning}
          .Range(1, 10000000),
      PropDef{"batch_size", PropType::kInt, false, "1000", "most messages per batch",
              PropRole::kTuning}
          .Range(1, 100000),
      PropDef{"pending_limit", PropType::kInt, false, "65536",
              "core: messages the client buffers while the pipeline is behind; past it the "
              "client drops them (counted on the card)",
              PropRole::kTuning}
          .Range(1, 10000000),
  };
  for (auto& p : nats::LoginProps()) d.props.push_back(std::move(p));
  for (auto& p : BrokerPayloadProps("subject, stream sequence and headers")) {
    d.props.push_back(std::move(p));
  }
  // The server gives each message of a core subject to one subscriber of
  // its queue group.
  d.shared_by_members = [](const Options& o) {
    return o.String("stream").empty() && !o.String("queue").empty();
  };
  d.make_input = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Input> {
    JetStreamOptions js;
    js.stream = o.String("stream");
    js.durable = o.String("durable");
    js.deliver = o.String("deliver");
    js.ack_wait_secs = o.Int("ack_wait_secs");
    js.max_ack_pending = o.Int("max_ack_pending");
    if (js.stream.empty()) {
      for (const char* name : {"durable", "deliver", "ack_wait_secs", "max_ack_pending"}) {
        if (o.Has(name)) o.Error(name, "only with `stream` (a JetStream consumer)");
      }
    } else if (o.Has("queue")) {
      o.Error("queue", "a queue group is for core NATS; a JetStream durable is shared by name");
    }
    if (js.durable.empty()) js.durable = "kayak-" + ctx.pipeline_id;
    TlsOptions tls = ReadTlsOptions(o);
    nats::Login login = nats::ReadLogin(o);
    if (o.failed()) return nullptr;
    return std::make_unique<NatsInput>(o.String("url"), o.String("subject"), o.String("queue"),
                                       std::move(js), o.Int("batch_size"), o.Int("pending_limit"),
                                       ReadBrokerPayload(o), std::move(tls), std::move(login),
                                       ctx);
  };
  return d;
}

}  // namespace kayak
