// The opcua input: subscribes to data changes of OPC UA variables over the
// binary protocol (client.h), with SecurityPolicy None or signed and
// encrypted under Basic256Sha256 and its successors (security.h), on its
// pipeline's thread. Each change is one message. Not rewindable: changes made while
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
        security_(o.session.policy == nullptr
                      ? std::string()
                      : std::string(o.session.policy->name) +
                            (o.session.mode == opcua::kModeSign ? "/Sign" : "/SignAndEncrypt")),
        verified_(!o.session.server_trust_file.empty()),
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
      const std::string& thumbprint = sub_.session().server_thumbprint();
      if (!thumbprint.empty() && !verified_ && thumbprint != warned_thumbprint_) {
        KLOG_WARN(
            "opcua input: {}: the server's certificate (SHA-1 {}) was taken from its endpoint "
            "without a check; set server_certificate_file to verify it",
            url_, thumbprint);
        warned_thumbprint_ = thumbprint;
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
    const std::string& thumbprint = sub_.session().server_thumbprint();
    if (!thumbprint.empty()) {
      s += "; " + security_ + ", server certificate SHA-1 " + thumbprint +
           (verified_ ? " (verified)" : " (not verified)");
    }
    if (!last_outage_.empty()) s += "; " + last_outage_;
    return s;
  }

 private:
  const std::string url_;
  const std::string security_;  // "Basic256Sha256/SignAndEncrypt", or empty for None
  const bool verified_;         // the server's certificate is checked against a file
  std::string warned_thumbprint_;
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
      "ns=1;s=Plant.Counter), with kayak's own client of the OPC UA binary protocol. Each "
      "change is one message: {\"node\": ..., \"value\": ..., \"status\": \"Good\", "
      "\"source_ts\": ..., \"server_ts\": ...}. SecurityPolicy None by default; with "
      "`security_policy` (Basic256Sha256, Aes128_Sha256_RsaOaep, Aes256_Sha256_RsaPss) every "
      "message is signed, or signed and encrypted (`security_mode`), under kayak's application "
      "instance certificate (`certificate_file`, `private_key_file`, its application URI in "
      "subjectAltName), and the server's certificate is checked against "
      "`server_certificate_file` when given. Logs in anonymously, with `username` and "
      "`password` (encrypted with the server's certificate where a policy allows), or with a "
      "user certificate (`user_certificate_file`, `user_private_key_file`). Not rewindable: "
      "changes made while the connection is down are not received.";
  d.checkpoint =
      "nothing: state stays consistent; changes made while kayak is down are not received";
  d.bad_input =
      "a value of a type the input does not decode (a structure) is an error on the card and "
      "no message; a lost connection is retried with backoff (the card says retrying) and the "
      "session and subscription are made again, the card saying how long the outage was; a "
      "server without an endpoint of the policy and mode, a refused login, a server "
      "certificate that server_certificate_file does not trust or an unknown node stop the "
      "pipeline at its start; a server that does not trust kayak's certificate is retried, "
      "the card naming the certificate's thumbprint";
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
      PropDef{"security_policy", PropType::kString, false, "None",
              "the SecurityPolicy of the channel: None sends everything as it is",
              PropRole::kTuning}
          .OneOf(opcua::PolicyNames()),
      PropDef{"security_mode", PropType::kString, false, "SignAndEncrypt",
              "under a policy other than None: Sign, or SignAndEncrypt", PropRole::kTuning}
          .OneOf({"Sign", "SignAndEncrypt"}),
      PropDef{"certificate_file", PropType::kString, false, "",
              "kayak's application instance certificate (PEM or DER, an RSA key, the "
              "application URI in its subjectAltName): needed under a policy other than None; "
              "the server must trust it",
              PropRole::kTuning},
      PropDef{"private_key_file", PropType::kString, false, "",
              "the certificate's private key (PEM or DER, not encrypted)", PropRole::kTuning},
      PropDef{"server_certificate_file", PropType::kString, false, "",
              "the server's certificate, or the issuer it chains to (PEM or DER): under a "
              "policy, a server whose certificate is not it is refused; without it the "
              "endpoint's certificate is used unchecked (its thumbprint logged and on the card)",
              PropRole::kTuning},
      PropDef{"user_certificate_file", PropType::kString, false, "",
              "log in with this user certificate (PEM or DER) instead of a user name",
              PropRole::kTuning},
      PropDef{"user_private_key_file", PropType::kString, false, "",
              "the user certificate's private key", PropRole::kTuning},
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
      "ENDPOINT [--node ID] [--depth N] [--username USER] [--security-policy POLICY "
      "--certificate FILE --private-key FILE [--security-mode MODE] [--server-certificate "
      "FILE]]: the nodes under Objects (or ID), with each variable's value (password: "
      "$KAYAK_OPCUA_PASSWORD)";
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
    const std::string policy = o.String("security_policy");
    so.session.policy = opcua::FindPolicy(policy);
    const std::string cert = o.String("certificate_file"), key = o.String("private_key_file");
    if (so.session.policy != nullptr) {
      so.session.mode =
          o.String("security_mode") == "Sign" ? opcua::kModeSign : opcua::kModeSignAndEncrypt;
      if (cert.empty() || key.empty()) {
        o.Error(cert.empty() ? "certificate_file" : "private_key_file",
                "security_policy " + policy +
                    " needs kayak's certificate and key (certificate_file and private_key_file)");
      } else {
        auto identity = std::make_shared<opcua::Identity>();
        const Status st = opcua::LoadIdentity(cert, key, identity.get());
        if (!st.ok()) {
          o.Error("certificate_file", st.message());
        } else {
          const int bits = EVP_PKEY_get_bits(identity->key.get());
          if (bits < so.session.policy->min_key_bits || bits > so.session.policy->max_key_bits) {
            o.Error("private_key_file",
                    "a key of " + std::to_string(bits) + " bits; " + policy + " takes " +
                        std::to_string(so.session.policy->min_key_bits) + " to " +
                        std::to_string(so.session.policy->max_key_bits));
          }
          if (identity->application_uri.empty()) {
            o.Error("certificate_file",
                    cert + " has no URI in its subjectAltName: OPC UA takes it as the "
                           "application URI (add URI:urn:... when making the certificate)");
          }
          so.session.identity = std::move(identity);
        }
      }
      so.session.server_trust_file = o.String("server_certificate_file");
    } else {
      for (const char* name : {"certificate_file", "private_key_file", "server_certificate_file"}) {
        if (!o.String(name).empty()) {
          o.Error(name, "is used only under a security_policy other than None");
        }
      }
    }
    const std::string user_cert = o.String("user_certificate_file");
    const std::string user_key = o.String("user_private_key_file");
    if (user_cert.empty() != user_key.empty()) {
      o.Error(user_cert.empty() ? "user_certificate_file" : "user_private_key_file",
              "user_certificate_file and user_private_key_file go together");
    } else if (!user_cert.empty()) {
      if (!so.session.username.empty()) {
        o.Error("user_certificate_file", "log in with a user certificate or a username, not both");
      }
      auto user = std::make_shared<opcua::Identity>();
      const Status st = opcua::LoadIdentity(user_cert, user_key, user.get());
      if (!st.ok()) {
        o.Error("user_certificate_file", st.message());
      } else {
        so.session.user = std::move(user);
      }
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
