// The opcua input: subscribes to data changes of OPC UA variables over the
// binary protocol with SecurityPolicy None (client.h), on its pipeline's
// thread. Each change is one message. Not rewindable: changes made while
// kayak or the connection is down are not received (the card says for how
// long). docs/components.md, "opcua"; docs/durability.md.
#include <chrono>

#include "common/clock.h"
#include "common/log.h"
#include "connectors/opcua/client.h"
#include "kayak/component.h"

namespace kayak {

namespace opcua {
int BrowseTool(const std::vector<std::string>& args);  // tool.cc
}  // namespace opcua

namespace {

class OpcuaInput final : public Input {
 public:
  OpcuaInput(opcua::SubscriberOptions o, int64_t batch_size, const ComponentContext& ctx)
      : url_(o.session.endpoint.url),
        nodes_(o.nodes.size()),
        batch_size_(static_cast<size_t>(batch_size)),
        ctx_(ctx),
        sub_(std::move(o)) {}

  Status Read(Batch* out, int64_t wait_ms, bool* finished) override {
    (void)finished;
    if (!sub_.connected()) {
      const Status st = sub_.Connect();
      if (!st.ok()) {
        if (down_since_ms_ == 0) down_since_ms_ = ctx_.clock->NowMs();
        // What a retry cannot mend stops the pipeline at the start; once it
        // ran, the server may be mid-restart, so it is tried again.
        if (st.code() == Code::kInvalidArgument && !ever_connected_) {
          return Status::Invalid("opcua input: " + st.message());
        }
        return Status::Unavailable("opcua input: " + url_ + ": " + st.message());
      }
      const int64_t now = ctx_.clock->NowMs();
      if (ever_connected_) {
        const int64_t outage = now - down_since_ms_;
        KLOG_WARN(
            "opcua input: subscribed again to {} after {} ms; data changes in that time "
            "were not received",
            url_, outage);
        last_outage_ = "resubscribed after an outage of " + std::to_string(outage) +
                       " ms, whose data changes were not received";
      } else {
        KLOG_INFO("opcua input: subscribed to {} nodes at {} (publishing every {} ms)", nodes_,
                  url_, sub_.revised_publishing_ms());
      }
      ever_connected_ = true;
      down_since_ms_ = 0;
    }
    msgs_.clear();
    errors_.clear();
    const Status st = sub_.Poll(static_cast<int>(wait_ms), batch_size_, &msgs_, &errors_);
    for (const auto& e : errors_) {
      if (ctx_.stats != nullptr) ctx_.stats->RecordError("opcua input: " + e);
    }
    const int64_t now = ctx_.clock->NowMs();
    for (auto& text : msgs_) {
      Message m(std::move(text), now);
      m.MarkJson();
      out->messages.push_back(std::move(m));
    }
    if (!st.ok()) {
      down_since_ms_ = now;
      return Status::Unavailable("opcua input: lost " + url_ + ": " + st.message());
    }
    return Status::Ok();
  }

  std::string Position() const override {
    std::string s = sub_.connected()
                        ? "subscribed to " + std::to_string(nodes_) + " nodes at " + url_
                        : "not connected to " + url_;
    if (sub_.missed() > 0) {
      s += "; " + std::to_string(sub_.missed()) + " notifications lost before they were received";
    }
    if (!last_outage_.empty()) s += "; " + last_outage_;
    return s;
  }

 private:
  const std::string url_;
  const size_t nodes_;
  const size_t batch_size_;
  ComponentContext ctx_;
  opcua::Subscriber sub_;
  bool ever_connected_ = false;
  int64_t down_since_ms_ = 0;
  std::string last_outage_;
  std::vector<std::string> msgs_, errors_;  // reused by every Read
};

}  // namespace

ComponentDef OpcuaInputDef() {
  ComponentDef d;
  d.kind = "input";
  d.type = "opcua";
  d.help =
      "Subscribes to data changes of OPC UA variables (`nodes`, as NodeIds like "
      "ns=1;s=Plant.Counter) on a server's SecurityPolicy None endpoint, with kayak's own "
      "client of the OPC UA binary protocol. Each change is one message: {\"node\": ..., "
      "\"value\": ..., \"status\": \"Good\", \"source_ts\": ..., \"server_ts\": ...}. Logs in "
      "anonymously, or with `username` and `password` (encrypted with the server's "
      "certificate when its token policy asks). Encrypted channels (Basic256Sha256 and the "
      "like) are not supported: a server that offers only those is a start error. Not "
      "rewindable: changes made while the connection is down are not received.";
  d.checkpoint =
      "nothing: state stays consistent; changes made while kayak is down are not received";
  d.bad_input =
      "a value of a type the input does not decode (a structure) is an error on the card and "
      "no message; a lost connection is retried with backoff (the card says retrying) and the "
      "session and subscription are made again, the card saying how long the outage was; a "
      "server without a None endpoint, a refused login or an unknown node stop the pipeline "
      "at its start";
  d.props = {
      PropDef{"endpoint", PropType::kString, true, "",
              "the server's endpoint URL with its path, opc.tcp://host:port/path"}
          .NonEmpty()
          .Address(),
      PropDef{"nodes", PropType::kStringList, true, "",
              "NodeIds of the variables whose value changes are read (ns=1;s=Name, ns=2;i=1001, "
              "g= Guid, b= base64)"}
          .NonEmpty(),
      PropDef{"sampling_ms", PropType::kNumber, false, "100",
              "how often the server samples each variable", PropRole::kTuning}
          .Range(0, 3600000)
          .Unit("ms"),
      PropDef{"publishing_ms", PropType::kNumber, false, "500",
              "how often the server sends the changes it collected", PropRole::kTuning}
          .Above(0)
          .Unit("ms"),
      PropDef{"queue_size", PropType::kInt, false, "10",
              "changes the server keeps per variable between publishes; past it the oldest "
              "is dropped",
              PropRole::kTuning}
          .Range(1, 100000),
      PropDef{"username", PropType::kString, false, "", "log in with this user name",
              PropRole::kTuning},
      PropDef{"password", PropType::kString, false, "", "its password; as ${ENV}",
              PropRole::kTuning}
          .Secret(),
      PropDef{"timeout_ms", PropType::kInt, false, "5000",
              "how long connecting and each request may take", PropRole::kTuning}
          .Range(100, 600000)
          .Unit("ms"),
      PropDef{"batch_size", PropType::kInt, false, "1000", "most messages per batch",
              PropRole::kTuning}
          .Range(1, 100000),
  };
  d.tool = opcua::BrowseTool;
  d.tool_usage =
      "ENDPOINT [--node ID] [--depth N] [--username USER]: the nodes under Objects (or ID), "
      "with each variable's value (password: $KAYAK_OPCUA_PASSWORD)";
  d.make_input = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Input> {
    opcua::SubscriberOptions so;
    std::string why;
    if (!opcua::ParseEndpoint(o.String("endpoint"), &so.session.endpoint, &why)) {
      o.Error("endpoint", why);
    }
    for (const auto& text : o.Strings("nodes")) {
      opcua::NodeId id;
      if (!opcua::ParseNodeId(text, &id, &why)) {
        o.Error("nodes", why);
        continue;
      }
      so.node_texts.push_back(text);
      so.nodes.push_back(std::move(id));
    }
    so.session.username = o.String("username");
    so.session.password = o.String("password");
    if (!so.session.username.empty() && so.session.password.empty()) {
      o.Error("password", "a username needs a password");
    }
    if (so.session.username.empty() && !so.session.password.empty()) {
      o.Error("username", "a password needs a username");
    }
    so.sampling_ms = o.Number("sampling_ms");
    so.publishing_ms = o.Number("publishing_ms");
    so.queue_size = static_cast<uint32_t>(o.Int("queue_size"));
    so.session.timeout_ms = static_cast<int>(o.Int("timeout_ms"));
    so.session.session_name = "kayak " + ctx.pipeline_id;
    if (o.failed()) return nullptr;
    return std::make_unique<OpcuaInput>(std::move(so), o.Int("batch_size"), ctx);
  };
  return d;
}

}  // namespace kayak
