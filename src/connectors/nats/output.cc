// The nats output: core NATS publishes, flushed at every checkpoint barrier
// (a failed flush fails the checkpoint), or JetStream publishes whose acks
// are all in before a batch counts as written. docs/components.md, "nats".
//
// Core publishes are kept until a flush confirms them on a connection that
// did not break meanwhile: one that breaks loses what was in its socket,
// and the reconnected one cannot say what, so they are all published again
// before the flush that lets the barrier pass (at least once).
#include <mutex>

#include "connectors/shared/tls.h"
#include "connectors/shared/broker.h"
#include "common/log.h"
#include "connectors/nats/conn.h"
#include "kayak/component.h"
#include "kayak/thread_annotations.h"

namespace kayak {

namespace {

class NatsOutput final : public Output {
 public:
  NatsOutput(std::string url, FieldTemplate subject, bool jetstream, int64_t max_pending,
             TlsOptions tls, nats::Login login, ComponentStats* stats)
      : conn_(std::move(url), "nats output", std::move(tls), std::move(login)),
        subject_(std::move(subject)),
        jetstream_(jetstream),
        stats_(stats) {
    if (jetstream_) conn_.SetPublishAsync(max_pending, &NatsOutput::OnPublishError, this);
  }

  ~NatsOutput() override {
    conn_.Flush(5000);
  }

  Status Write(const Batch& batch) override {
    KAYAK_RETURN_IF_ERROR(conn_.Ensure());
    KAYAK_RETURN_IF_ERROR(conn_.Up());
    size_t failed = 0;
    std::string error, why;
    Dropped dropped;
    failures_.store(0);
    const uint64_t losses = conn_.losses();
    const size_t kept = journal_.size(), kept_bytes = kept_bytes_.size(), headed = headed_.size();
    for (const auto& m : batch.messages) {
      const std::string* subject = &subject_.text();
      if (!subject_.fixed()) {
        if (!subject_.Render(m, &rendered_, &why)) {
          dropped.Add(this, m, why);
          continue;
        }
        subject = &rendered_;
      }
      if (!jetstream_) Keep(*subject, m);
      const natsStatus s = Publish(*subject, m);
      if (s != NATS_OK && failed++ == 0) error = conn_.Error("publishing to " + *subject, s);
    }
    dropped.Report(stats_, "nats output", batch.size());
    if (failed > 0) {
      // The batch is written again, and kept again then.
      journal_.resize(kept);
      kept_bytes_.resize(kept_bytes);
      headed_.erase(headed_.begin() + static_cast<std::ptrdiff_t>(headed), headed_.end());
      return Status::Unavailable(error + " (" + std::to_string(failed) + " of " +
                                 std::to_string(batch.size()) + " messages)");
    }
    if (jetstream_) return AwaitAcks(losses);
    if (kept_bytes_.size() >= kMaxKeptBytes) return Confirm("flush of the kept publishes");
    return Status::Ok();
  }

  // The barrier: core publishes are flushed to the server (a PING answered
  // after them); JetStream ones were acknowledged by each Write.
  Status Checkpoint(uint64_t id, std::string* state) override {
    (void)id;
    (void)state;
    return Confirm("flush at the checkpoint");
  }

  Status Close() override { return Confirm("flush at close"); }

 private:
  // Core publishes kept past this many bytes are confirmed (flushed) before
  // the batch counts as written: the bound of what a reconnection repeats.
  static constexpr size_t kMaxKeptBytes = 8 << 20;

  struct Kept {
    size_t subject = 0, subject_len = 0, payload = 0, payload_len = 0;
    size_t headed = SIZE_MAX;  // index in headed_: a message with headers
  };

  void Keep(const std::string& subject, const Message& m) {
    if (journal_.empty()) kept_since_ = conn_.connections();
    Kept k;
    k.subject = kept_bytes_.size();
    k.subject_len = subject.size();
    kept_bytes_ += subject;
    if (m.headers().empty()) {
      k.payload = kept_bytes_.size();
      k.payload_len = m.payload().size();
      kept_bytes_ += m.payload();
    } else {
      k.headed = headed_.size();
      headed_.push_back(m);
    }
    journal_.push_back(k);
  }

  // Flushes; when another connection was made since the first kept
  // publish, everything kept is published again first. Confirmed: the server
  // answered a flush after every kept publish on a connection that did
  // not break in between.
  Status Confirm(const char* doing) {
    if (jetstream_) {
      const natsStatus s = conn_.Flush(10000);
      return s == NATS_OK ? Status::Ok() : Status::Unavailable(conn_.Error(doing, s));
    }
    for (int round = 0; round < 3; ++round) {
      const uint64_t connections = conn_.connections();
      if (connections != kept_since_ && !journal_.empty()) {
        KAYAK_RETURN_IF_ERROR(conn_.Up());
        if (Status st = PublishKept(); !st.ok()) return st;
      }
      const natsStatus s = conn_.Flush(10000);
      if (s != NATS_OK) return Status::Unavailable(conn_.Error(doing, s));
      if (conn_.connections() == connections) {
        journal_.clear();
        kept_bytes_.clear();
        headed_.clear();
        return Status::Ok();
      }
    }
    return Status::Unavailable(conn_.what() + ": " + doing +
                               ": the connection broke during every flush");
  }

  Status PublishKept() {
    std::string subject;
    for (const Kept& k : journal_) {
      subject.assign(kept_bytes_, k.subject, k.subject_len);
      natsStatus s;
      if (k.headed != SIZE_MAX) {
        s = Publish(subject, headed_[k.headed]);
      } else {
        s = natsConnection_Publish(conn_.get(), subject.c_str(), kept_bytes_.data() + k.payload,
                                   static_cast<int>(k.payload_len));
      }
      if (s != NATS_OK) {
        return Status::Unavailable(conn_.Error("publishing again after a reconnection", s));
      }
    }
    KLOG_WARN("{}: published {} messages again: the connection broke before a flush confirmed "
              "them",
              conn_.what(), journal_.size());
    return Status::Ok();
  }

  natsStatus Publish(const std::string& subject, const Message& m) {
    const int len = static_cast<int>(m.payload().size());
    if (m.headers().empty()) {
      if (jetstream_) return js_PublishAsync(conn_.js(), subject.c_str(), m.payload().data(), len, nullptr);
      return natsConnection_Publish(conn_.get(), subject.c_str(), m.payload().data(), len);
    }
    natsMsg* msg = nullptr;
    natsStatus s = natsMsg_Create(&msg, subject.c_str(), nullptr, m.payload().data(), len);
    for (const auto& [k, v] : m.headers()) {
      if (s == NATS_OK) s = natsMsgHeader_Add(msg, k.c_str(), v.c_str());
    }
    if (s == NATS_OK) {
      s = jetstream_ ? js_PublishMsgAsync(conn_.js(), &msg, nullptr)
                     : natsConnection_PublishMsg(conn_.get(), msg);
    }
    natsMsg_Destroy(msg);
    return s;
  }

  // Every JetStream publish of the batch acknowledged, or the batch failed
  // (the runner writes it again: at least once). The acks are awaited in
  // slices: a publish sent before the connection was lost may have lost its
  // ack with it, so a loss since the batch began (`losses` then) fails the
  // batch at once instead of after the whole wait.
  Status AwaitAcks(uint64_t losses) {
    constexpr int64_t kSliceMs = 200;
    constexpr int64_t kMaxWaitMs = 30000;
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = kSliceMs;
    natsStatus s = NATS_TIMEOUT;
    std::string why;
    for (int64_t waited = 0;; waited += kSliceMs) {
      s = js_PublishAsyncComplete(conn_.js(), &po);
      if (s != NATS_TIMEOUT) break;
      if (conn_.losses() != losses) {
        why = conn_.what() +
              ": the connection was lost while the batch awaited its JetStream acknowledgements";
        break;
      }
      if (waited + kSliceMs >= kMaxWaitMs) break;
    }
    if (s != NATS_OK) {
      natsMsgList pending{nullptr, 0};
      int unacked = 0;
      if (js_PublishAsyncGetPendingList(&pending, conn_.js()) == NATS_OK) {
        unacked = pending.Count;
        natsMsgList_Destroy(&pending);
      }
      if (why.empty()) why = conn_.Error("waiting for JetStream acknowledgements", s);
      return Status::Unavailable(why + " (" + std::to_string(unacked) +
                                 " unacknowledged; the batch is written again)");
    }
    const uint64_t failures = failures_.load();
    if (failures > 0) {
      MutexLock lock(mu_);
      return Status::Unavailable("nats output: JetStream refused " + std::to_string(failures) +
                                 " messages: " + last_failure_);
    }
    return Status::Ok();
  }

  static void OnPublishError(jsCtx* js, jsPubAckErr* pae, void* closure) {
    (void)js;
    auto* self = static_cast<NatsOutput*>(closure);
    self->failures_.fetch_add(1);
    MutexLock lock(self->mu_);
    self->last_failure_ = pae->ErrText != nullptr ? pae->ErrText : natsStatus_GetText(pae->Err);
    if (pae->Err == NATS_NO_RESPONDERS) {
      self->last_failure_ = "no stream takes the subject (no responders)";
    }
  }

  nats::Connection conn_;
  const FieldTemplate subject_;
  const bool jetstream_;
  ComponentStats* const stats_;
  std::string rendered_;  // reused
  // Core publishes since the last confirmed flush (Confirm): their subjects
  // and payloads in one buffer, reused; messages with headers whole.
  std::vector<Kept> journal_;
  std::string kept_bytes_;
  std::vector<Message> headed_;
  uint64_t kept_since_ = 0;  // conn_.connections() at the first kept publish
  std::atomic<uint64_t> failures_{0};  // JetStream publishes refused (cnats' thread)
  Mutex mu_;
  std::string last_failure_ KAYAK_GUARDED_BY(mu_);
};

}  // namespace

ComponentDef NatsOutputDef() {
  ComponentDef d;
  d.kind = "output";
  d.type = "nats";
  d.help =
      "Publishes each message's payload to `subject` (cnats), where `{{field}}` is replaced by "
      "that field of the message; its headers go as NATS headers. Core NATS: publishes are "
      "flushed at every checkpoint barrier. `jetstream: true`: every publish of a batch is "
      "acknowledged by the stream before the batch counts as written.";
  d.checkpoint = "nothing kept: the barrier passes once the server has everything published "
                 "before it (a flush; JetStream: its acks); a failed flush fails the checkpoint. "
                 "Core publishes since the last flush are kept (up to 8 MiB, then flushed) and "
                 "published again when the connection broke before a flush confirmed them";
  d.bad_input = "a message whose subject cannot be made (a missing field, not JSON) goes to the "
                "pipeline's dead letters (`dead_letter`), or is dropped, and is counted on the "
                "card, never retried; an unreachable server, a refused or "
                "unacknowledged JetStream publish fails the batch, retried holding the pipeline "
                "(a connection lost while acks are awaited fails it at once: their acks may be "
                "lost with it)";
  d.props = {
      PropDef{"url", PropType::kString, true, "",
              "nats://host:port (several comma-separated; tls://host:port over TLS); "
              "credentials as ${ENV}"}
          .NonEmpty()
          .Secret()
          .Address(),
      TlsPropDef(),
      PropDef{"subject", PropType::kString, true, "",
              "the subject; `{{field}}` is replaced by that field of the message"}
          .NonEmpty(),
      {"jetstream", PropType::kBool, false, "false",
       "publish into JetStream and wait for each message's acknowledgement"},
      PropDef{"max_pending", PropType::kInt, false, "4000",
              "JetStream: most publishes awaiting acknowledgement at once", PropRole::kTuning}
          .Range(1, 1000000),
  };
  for (auto& p : nats::LoginProps()) d.props.push_back(std::move(p));
  d.make_output = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Output> {
    FieldTemplate subject;
    std::string error;
    if (!FieldTemplate::Parse(o.String("subject"), &subject, &error)) o.Error("subject", error);
    if (o.Has("max_pending") && !o.Bool("jetstream")) {
      o.Error("max_pending", "only with `jetstream: true`");
    }
    TlsOptions tls = ReadTlsOptions(o);
    nats::Login login = nats::ReadLogin(o);
    if (o.failed()) return nullptr;
    return std::make_unique<NatsOutput>(o.String("url"), std::move(subject), o.Bool("jetstream"),
                                        o.Int("max_pending"), std::move(tls), std::move(login),
                                        ctx.stats);
  };
  return d;
}

}  // namespace kayak
