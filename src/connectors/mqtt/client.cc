#include "connectors/mqtt/client.h"

#include <cstring>
#include <mutex>

#include "common/clock.h"
#include "common/host_port.h"
#include "common/log.h"

namespace kayak::mqtt {

bool ParseUrl(std::string_view url, Address* out, std::string* error) {
  std::string_view rest;
  if (url.substr(0, 7) == "mqtt://") {
    rest = url.substr(7);
    out->port = 1883;
  } else if (url.substr(0, 8) == "mqtts://") {
    rest = url.substr(8);
    out->port = 8883;
    out->tls.enabled = true;
  } else {
    *error = "an mqtt URL begins with mqtt:// or mqtts:// (TLS)";
    return false;
  }
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.find_first_of("/@") != std::string_view::npos) {
    *error = "mqtt://host:port, with the credentials in `username` and `password`";
    return false;
  }
  if (!ParseHostMaybePort(std::string(rest), &out->host, &out->port)) {
    *error = "mqtt://host:port, the port a number from 1 to 65535";
    return false;
  }
  return true;
}

std::vector<PropDef> ConnectionProps() {
  return {
      PropDef{"url", PropType::kString, true, "", "mqtt://host:port, or mqtts://host:port over TLS"}
          .NonEmpty()
          .Address(),
      {"client_id", PropType::kString, false, "",
       "the MQTT client id (default kayak-<pipeline> for an input, kayak-<pipeline>-out<N> "
       "for output N); unique per broker: another client with it takes the session over"},
      PropDef{"username", PropType::kString, false, "", "the MQTT user name", PropRole::kTuning},
      PropDef{"password", PropType::kString, false, "", "the MQTT password, as ${ENV}",
              PropRole::kTuning}
          .Secret(),
      PropDef{"keepalive_secs", PropType::kInt, false, "60",
              "the keepalive interval; the broker drops a client silent for 1.5 times it",
              PropRole::kTuning}
          .Range(5, 3600)
          .Unit("s"),
      TlsPropDef(),
  };
}

Address ReadAddress(const Options& o, const std::string& default_client_id) {
  Address a;
  std::string error;
  if (!ParseUrl(o.String("url"), &a, &error)) o.Error("url", error);
  const bool by_scheme = a.tls.enabled;
  a.tls = ReadTlsOptions(o);
  a.tls.enabled = a.tls.enabled || by_scheme;
  if (!a.tls.server_name.empty()) {
    o.Error("tls", "server_name: libmosquitto checks the certificate against the host of the "
                   "url; connect by the name the certificate carries");
  }
  a.client_id = o.Has("client_id") ? o.String("client_id") : default_client_id;
  if (a.client_id.size() > 23) {
    // 3.1.1 brokers must take 1 to 23 characters; mosquitto takes more
    KLOG_DEBUG("mqtt: client id {} is longer than 23 characters", a.client_id);
  }
  a.username = o.String("username");
  a.password = o.String("password");
  if (!a.password.empty() && a.username.empty()) o.Error("password", "give `username` too");
  a.keepalive_secs = static_cast<int>(o.Int("keepalive_secs"));
  return a;
}

Client::Client(Address address, std::string what, Callbacks callbacks)
    : address_(std::move(address)), what_(std::move(what)), callbacks_(callbacks) {
  static std::once_flag init;
  std::call_once(init, [] { mosquitto_lib_init(); });
  m_ = mosquitto_new(address_.client_id.c_str(), /*clean_session=*/true, this);
  if (m_ != nullptr) {
    mosquitto_connect_callback_set(m_, &Client::OnConnect);
    mosquitto_disconnect_callback_set(m_, &Client::OnDisconnect);
    mosquitto_message_callback_set(m_, &Client::OnMessage);
    mosquitto_publish_callback_set(m_, &Client::OnPublish);
    mosquitto_int_option(m_, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V311);
    mosquitto_log_callback_set(m_, &Client::OnLog);
    if (!address_.username.empty()) {
      mosquitto_username_pw_set(m_, address_.username.c_str(),
                                address_.password.empty() ? nullptr : address_.password.c_str());
    }
    const TlsOptions& t = address_.tls;
    if (t.enabled) {
      // Without a CA file, the system's store (a directory of hashed names).
      const int rc = mosquitto_tls_set(
          m_, t.ca_file.empty() ? nullptr : t.ca_file.c_str(),
          t.ca_file.empty() ? "/etc/ssl/certs" : nullptr,
          t.cert_file.empty() ? nullptr : t.cert_file.c_str(),
          t.key_file.empty() ? nullptr : t.key_file.c_str(), nullptr);
      if (rc != MOSQ_ERR_SUCCESS) {
        setup_ = Status::Invalid(what_ + ": the tls files were refused: " + mosquitto_strerror(rc));
      } else if (t.insecure_skip_verify) {
        mosquitto_tls_opts_set(m_, /*SSL_VERIFY_NONE*/ 0, nullptr, nullptr);
        mosquitto_tls_insecure_set(m_, true);
      }
    }
  }
}

void Client::OnLog(mosquitto* m, void* self, int level, const char* text) {
  (void)m;
  if (level != MOSQ_LOG_ERR || text == nullptr) return;
  auto* c = static_cast<Client*>(self);
  // OpenSSL's first error of a failed handshake says why ("certificate
  // verify failed"); the ones after it say where.
  const std::string_view line = text;
  MutexLock lock(c->log_mu_);
  if (line.find("Error[0]") != std::string_view::npos || c->last_log_error_.empty() ||
      line.find("OpenSSL Error[") == std::string_view::npos) {
    c->last_log_error_ = text;
  }
}

std::string Client::Why(int rc) {
  std::string why = rc == MOSQ_ERR_ERRNO ? std::string(strerror(errno)) : mosquitto_strerror(rc);
  if (rc == MOSQ_ERR_TLS) {
    MutexLock lock(log_mu_);
    if (!last_log_error_.empty()) why += " (" + last_log_error_ + ")";
  }
  return why;
}

Client::~Client() {
  if (m_ == nullptr) return;
  if (threaded_) {
    mosquitto_disconnect(m_);
    mosquitto_loop_stop(m_, /*force=*/false);
  } else if (connected_) {
    mosquitto_disconnect(m_);
    mosquitto_loop(m_, 100, 1);
  }
  mosquitto_destroy(m_);
}

Status Client::Ensure() {
  if (m_ == nullptr) return Status::Invalid(what_ + ": cannot make a client");
  if (!setup_.ok()) return setup_;
  if (connected_) return Status::Ok();
  const std::string where = address_.host + ":" + std::to_string(address_.port);
  int rc = ever_connected_ ? mosquitto_reconnect(m_)
                           : mosquitto_connect(m_, address_.host.c_str(), address_.port,
                                               address_.keepalive_secs);
  if (rc != MOSQ_ERR_SUCCESS) {
    return Status::Unavailable(what_ + ": cannot connect to " + where + ": " + Why(rc));
  }
  ever_connected_ = true;
  // The CONNACK, within 10 s
  connack_ = -1;
  const int64_t deadline = MonotonicMs() + 10000;
  while (connack_ < 0 && MonotonicMs() < deadline) {
    rc = mosquitto_loop(m_, 100, 1);
    if (rc != MOSQ_ERR_SUCCESS) break;
  }
  if (connack_ != 0) {
    const std::string why = connack_ > 0 ? mosquitto_connack_string(connack_)
                            : rc != MOSQ_ERR_SUCCESS ? mosquitto_strerror(rc)
                                                     : "no answer in 10 s";
    mosquitto_disconnect(m_);
    if (connack_ == 4 || connack_ == 5) {
      return Status::Invalid(what_ + ": " + where + " refused the connection: " + why);
    }
    return Status::Unavailable(what_ + ": " + where + " did not accept the connection: " + why);
  }
  connected_ = true;
  KLOG_INFO("{}: connected to {} as {}", what_, where, address_.client_id);
  return Status::Ok();
}

Status Client::StartThread() {
  if (m_ == nullptr) return Status::Invalid(what_ + ": cannot make a client");
  if (!setup_.ok()) return setup_;
  if (threaded_) return Status::Ok();
  // The first connection here (the thread would give up on a refused one);
  // every later one by the thread.
  mosquitto_reconnect_delay_set(m_, 1, 10, /*exponential=*/true);
  const std::string where = address_.host + ":" + std::to_string(address_.port);
  int rc = mosquitto_connect(m_, address_.host.c_str(), address_.port, address_.keepalive_secs);
  if (rc != MOSQ_ERR_SUCCESS) {
    return Status::Unavailable(what_ + ": cannot connect to " + where + ": " + Why(rc));
  }
  // Set before the thread starts: its callbacks read it.
  threaded_ = true;
  rc = mosquitto_loop_start(m_);
  if (rc != MOSQ_ERR_SUCCESS) {
    threaded_ = false;
    mosquitto_disconnect(m_);
    return Status::Unavailable(what_ + ": cannot start its thread: " + mosquitto_strerror(rc));
  }
  return Status::Ok();
}

std::string Client::down_reason() const {
  const int connack = connack_.load();
  if (connack > 0) return std::string("refused: ") + mosquitto_connack_string(connack);
  std::string detail;
  {
    MutexLock lock(log_mu_);
    if (!last_log_error_.empty()) detail = " (" + last_log_error_ + ")";
  }
  const int rc = last_disconnect_.load();
  if (rc != 0 && detail.empty() && address_.tls.enabled && connack < 0) {
    // TLS 1.3: the client's handshake ends before the broker checks its
    // certificate, so a refusal arrives as the connection closing.
    detail = " before the broker answered the connection over TLS (a broker that requires a "
             "client certificate closes it so: tls.cert_file)";
  }
  if (rc != 0) {
    return std::string("connection lost") +
           (rc == MOSQ_ERR_ERRNO ? std::string() : std::string(": ") + mosquitto_strerror(rc)) +
           detail;
  }
  return "not connected to " + address_.host + ":" + std::to_string(address_.port) + detail;
}

void Client::OnDisconnect(mosquitto* m, void* self, int rc) {
  (void)m;
  auto* c = static_cast<Client*>(self);
  c->last_disconnect_.store(rc);
  if (c->connected_.exchange(false) && c->threaded_) {
    KLOG_WARN("{}: disconnected ({}); reconnecting", c->what_, mosquitto_strerror(rc));
  }
}

void Client::OnConnect(mosquitto* m, void* self, int rc) {
  (void)m;
  auto* c = static_cast<Client*>(self);
  c->connack_ = rc;
  if (rc == 0) {
    MutexLock lock(c->log_mu_);
    c->last_log_error_.clear();  // what went wrong before is over
  }
  if (c->threaded_ && rc == 0) {
    c->connected_.store(true);
    KLOG_INFO("{}: connected to {}:{} as {}", c->what_, c->address_.host, c->address_.port,
              c->address_.client_id);
  }
  if (rc == 0 && c->callbacks_.connected != nullptr) c->callbacks_.connected(c->callbacks_.owner);
}

void Client::OnMessage(mosquitto* m, void* self, const mosquitto_message* msg) {
  (void)m;
  auto* c = static_cast<Client*>(self);
  if (c->callbacks_.message != nullptr) c->callbacks_.message(c->callbacks_.owner, msg);
}

void Client::OnPublish(mosquitto* m, void* self, int mid) {
  (void)m;
  auto* c = static_cast<Client*>(self);
  if (c->callbacks_.published != nullptr) c->callbacks_.published(c->callbacks_.owner, mid);
}

Status Client::Check(int rc, const std::string& doing) {
  if (rc == MOSQ_ERR_SUCCESS) return Status::Ok();
  connected_ = false;
  const std::string why = rc == MOSQ_ERR_ERRNO ? std::string(strerror(errno)) : mosquitto_strerror(rc);
  KLOG_WARN("{}: {}: {}; reconnecting", what_, doing, why);
  return Status::Unavailable(what_ + ": " + doing + ": " + why + " (reconnecting)");
}

}  // namespace kayak::mqtt
