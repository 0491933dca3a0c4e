#include "connectors/shared/kafka_conf.h"

#include <mutex>

#include "common/log.h"
#include "connectors/shared/tls.h"

namespace kayak::kafka {

namespace {

// librdkafka 2.6.1, in rd_kafka_version()'s 0xMMmmrrxx.
constexpr int kScramFixedVersion = 0x020601ff;

}  // namespace


rd_kafka_conf_t* MakeConf(const Properties& props, std::string* error) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char err[512];
  for (const auto& [k, v] : props) {
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof(err)) != RD_KAFKA_CONF_OK) {
      *error = err;
      rd_kafka_conf_destroy(conf);
      return nullptr;
    }
  }
  return conf;
}

void CheckProperties(const Options& o, const Properties& props) {
  std::string error;
  rd_kafka_conf_t* conf = MakeConf(props, &error);
  if (conf == nullptr) {
    o.Error("properties", error);
  } else {
    rd_kafka_conf_destroy(conf);
  }
}

PropDef SaslPropDef() {
  return PropDef{"sasl", PropType::kStringMap, false, "",
                 "authenticate: {mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, username, "
                 "password} (the password as ${ENV} or ${file:...}); over TLS when `tls` is "
                 "given (SASL_SSL)",
                 PropRole::kTuning}
      .Secret();
}

Properties SecurityProperties(const Options& o) {
  Properties p;
  const TlsOptions tls = ReadTlsOptions(o);
  std::string mechanism, username, password;
  for (const auto& [k, v] : o.StringMap("sasl")) {
    if (k == "mechanism") {
      mechanism = v;
    } else if (k == "username") {
      username = v;
    } else if (k == "password") {
      password = v;
    } else {
      o.Error("sasl", "unknown key '" + k + "' (mechanism, username, password)");
    }
  }
  const bool sasl = o.Has("sasl");
  if (sasl) {
    if (mechanism != "PLAIN" && mechanism != "SCRAM-SHA-256" && mechanism != "SCRAM-SHA-512") {
      o.Error("sasl", "mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, not '" + mechanism + "'");
    }
    if (username.empty() || password.empty()) o.Error("sasl", "give username and password");
  }
  if (!tls.server_name.empty()) {
    o.Error("tls", "server_name: librdkafka checks the certificate against the broker's "
                   "advertised host; connect by the name the certificate carries");
  }
  if (tls.enabled) {
    p.emplace_back("security.protocol", sasl ? "SASL_SSL" : "SSL");
    if (!tls.ca_file.empty()) p.emplace_back("ssl.ca.location", tls.ca_file);
    if (!tls.cert_file.empty()) {
      p.emplace_back("ssl.certificate.location", tls.cert_file);
      p.emplace_back("ssl.key.location", tls.key_file);
    }
    p.emplace_back("enable.ssl.certificate.verification",
                   tls.insecure_skip_verify ? "false" : "true");
    p.emplace_back("ssl.endpoint.identification.algorithm",
                   tls.insecure_skip_verify ? "none" : "https");
  } else if (sasl) {
    p.emplace_back("security.protocol", "SASL_PLAINTEXT");
  }
  if (sasl && mechanism.rfind("SCRAM", 0) == 0 && rd_kafka_version() < kScramFixedVersion) {
    static std::once_flag said;
    std::call_once(said, [] {
      KLOG_WARN("kafka: librdkafka {} logs in by SCRAM to Kafka 3 brokers only: Kafka 4 "
                "refuses its proof (fixed in librdkafka 2.6.1)",
                rd_kafka_version_str());
    });
  }
  if (sasl) {
    p.emplace_back("sasl.mechanisms", mechanism);
    p.emplace_back("sasl.username", username);
    p.emplace_back("sasl.password", password);
  }
  return p;
}

std::string ScramHint(std::string_view reason) {
  if (rd_kafka_version() >= kScramFixedVersion) return "";
  if (reason.find("SCRAM") == std::string_view::npos) return "";
  return std::string(" (librdkafka ") + rd_kafka_version_str() +
         " sends a SCRAM proof that Kafka 4 brokers refuse; librdkafka 2.6.1 fixed it: with "
         "such a broker use PLAIN over TLS, or a newer librdkafka)";
}

std::string Brokers(const Options& o) {
  std::string out;
  for (const auto& b : o.Strings("brokers")) {
    if (!out.empty()) out += ",";
    out += b;
  }
  return out;
}

std::string TakeError(rd_kafka_error_t* e, bool* retriable) {
  std::string why = rd_kafka_error_string(e);
  if (retriable != nullptr) *retriable = rd_kafka_error_is_retriable(e);
  rd_kafka_error_destroy(e);
  return why;
}

}  // namespace kayak::kafka
