// The redis output: XADD into a stream (trimmed to about `maxlen`), or
// PUBLISH to a channel; a batch is one pipelined round of commands, written
// once every reply is in. docs/components.md, "redis".
#include "connectors/shared/broker.h"
#include "common/log.h"
#include "connectors/redis/client.h"
#include "kayak/component.h"

namespace kayak {

namespace {

// Whether an error reply is about the server's state (it says "not now")
// rather than about the message: out of memory, a replica or a loading or
// busy server, a cluster that is not there yet, credentials or permissions
// (a rotated password). Such a batch is retried, holding the pipeline; only
// an error about the message itself (WRONGTYPE, a bad argument) drops it.
bool PassingRefusal(std::string_view error) {
  static constexpr std::string_view kPassing[] = {
      "OOM",        "READONLY", "LOADING",  "MASTERDOWN", "BUSY",   "TRYAGAIN", "CLUSTERDOWN",
      "NOREPLICAS", "MISCONF",  "NOAUTH",   "WRONGPASS",  "NOPERM", "MOVED",    "ASK"};
  const std::string_view code = error.substr(0, error.find(' '));
  for (std::string_view p : kPassing) {
    if (code == p) return true;
  }
  return error.rfind("ERR max number of clients", 0) == 0;
}

class RedisOutput final : public Output {
 public:
  RedisOutput(redis::Address address, TlsOptions tls, FieldTemplate key, bool stream,
              int64_t maxlen, std::string payload_field, ComponentStats* stats)
      : client_(std::move(address), "redis output", std::move(tls)),
        key_(std::move(key)),
        stream_(stream),
        maxlen_(maxlen > 0 ? std::to_string(maxlen) : ""),
        payload_field_(std::move(payload_field)),
        stats_(stats) {}

  Status Write(const Batch& batch) override {
    KAYAK_RETURN_IF_ERROR(client_.Ensure());
    size_t sent = 0;
    Dropped dropped;
    std::string rendered, why;
    sent_.clear();
    for (const auto& m : batch.messages) {
      const std::string* key = &key_.text();
      if (!key_.fixed()) {
        if (!key_.Render(m, &rendered, &why)) {
          dropped.Add(this, m, "key not made: " + why);
          continue;
        }
        key = &rendered;
      }
      sent_.push_back(&m);
      if (!stream_) {
        client_.Append({"PUBLISH", *key, m.payload()});
      } else if (maxlen_.empty()) {
        client_.Append({"XADD", *key, "*", payload_field_, m.payload()});
      } else {
        client_.Append({"XADD", *key, "MAXLEN", "~", maxlen_, "*", payload_field_, m.payload()});
      }
      ++sent;
    }
    std::string passing;
    for (size_t i = 0; i < sent; ++i) {
      redis::Reply r;
      KAYAK_RETURN_IF_ERROR(client_.ReadReply(&r));
      if (r->type != REDIS_REPLY_ERROR) continue;
      const std::string_view error(r->str, r->len);
      if (PassingRefusal(error)) {
        if (passing.empty()) passing = std::string(error);
      } else {
        dropped.Add(this, *sent_[i], "refused: " + std::string(error));
      }
    }
    // The whole batch again (the entries that went in go in twice: at
    // least once), not a drop: the server will take them later.
    if (!passing.empty()) return Status::Unavailable("redis refused for now: " + passing);
    dropped.Report(stats_, "redis output", batch.size());
    return Status::Ok();
  }

 private:
  redis::Client client_;
  const FieldTemplate key_;
  const bool stream_;
  const std::string maxlen_;
  const std::string payload_field_;
  ComponentStats* const stats_;
  std::vector<const Message*> sent_;  // the messages of the batch sent, in order
};

}  // namespace

ComponentDef RedisOutputDef() {
  ComponentDef d;
  d.kind = "output";
  d.type = "redis";
  d.help =
      "Appends each message to `stream` (XADD, its payload in `payload_field`, the stream "
      "trimmed to about `maxlen` entries when given) or publishes it to `channel` (PUBLISH), "
      "with hiredis; `{{field}}` in either is replaced by that field of the message. A batch "
      "is sent as one pipeline of commands and counts as written once every reply is in.";
  d.checkpoint = "nothing kept: every command's reply is in before the next batch, so a "
                 "barrier passes only after the server has everything before it";
  d.bad_input = "a message whose key cannot be made (a missing field, not JSON) or that the "
                "server refuses for itself (WRONGTYPE, a bad argument) goes to the pipeline's "
                "dead letters (`dead_letter`), or is dropped, and is counted on the card, never "
                "retried; a refusal for the server's state (OOM, READONLY, "
                "LOADING, MASTERDOWN, BUSY, TRYAGAIN, CLUSTERDOWN, NOREPLICAS, MISCONF, NOAUTH, "
                "WRONGPASS, NOPERM, MOVED, ASK, too many clients) and an unreachable server are "
                "retried holding the pipeline, the whole batch again (at least once)";
  d.props = {
      PropDef{"url", PropType::kString, true, "",
              "redis://[[user]:password@]host:port[/db] (rediss:// over TLS); a password as "
              "${ENV} or ${file:...}"}
          .NonEmpty()
          .Secret()
          .Address(),
      TlsPropDef(),
      {"stream", PropType::kString, false, "", "a stream key to XADD to; `{{field}}` allowed"},
      {"channel", PropType::kString, false, "", "a channel to PUBLISH to; `{{field}}` allowed"},
      PropDef{"maxlen", PropType::kInt, false, "0",
              "with `stream`: trim it to about this many entries (0: never)"}
          .Range(0, 1e15),
      {"payload_field", PropType::kString, false, "payload",
       "with `stream`: the entry field the message goes into"},
  };
  d.make_output = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Output> {
    redis::Address address;
    std::string error;
    if (!redis::ParseUrl(o.String("url"), &address, &error)) o.Error("url", error);
    TlsOptions tls = ReadTlsOptions(o);
    const bool stream = !o.String("stream").empty();
    if (stream == !o.String("channel").empty()) {
      o.Error("stream", "give either `stream` (XADD) or `channel` (PUBLISH)");
    }
    if (!stream) {
      for (const char* name : {"maxlen", "payload_field"}) {
        if (o.Has(name)) o.Error(name, "only with `stream`");
      }
    }
    const std::string name = stream ? "stream" : "channel";
    FieldTemplate key;
    if (!FieldTemplate::Parse(o.String(name), &key, &error)) o.Error(name, error);
    if (o.failed()) return nullptr;
    return std::make_unique<RedisOutput>(address, std::move(tls), std::move(key), stream,
                                         o.Int("maxlen"),
                                         o.String("payload_field"), ctx.stats);
  };
  return d;
}

}  // namespace kayak
