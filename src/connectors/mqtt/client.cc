#include "connectors/mqtt/client.h"

#include <cstring>
#include <mutex>

#include "common/clock.h"
#include "common/host_port.h"
#include "common/log.h"

namespace kayak::mqtt {

bool ParseUrl(std::string_view url, Address* out, std::string* error) {
  if (url.substr(0, 7) != "mqtt://") {
    *error = "an mqtt URL begins with mqtt:// (TLS is not supported yet)";
    return false;
  }
  std::string_view rest = url.substr(7);
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  out->port = 1883;
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
      PropDef{"url", PropType::kString, true, "", "mqtt://host:port"}.NonEmpty().Address(),
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
  };
}

Address ReadAddress(const Options& o, const std::string& default_client_id) {
  Address a;
  std::string error;
  if (!ParseUrl(o.String("url"), &a, &error)) o.Error("url", error);
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
    if (!address_.username.empty()) {
      mosquitto_username_pw_set(m_, address_.username.c_str(),
                                address_.password.empty() ? nullptr : address_.password.c_str());
    }
  }
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
  if (connected_) return Status::Ok();
  const std::string where = address_.host + ":" + std::to_string(address_.port);
  int rc = ever_connected_ ? mosquitto_reconnect(m_)
                           : mosquitto_connect(m_, address_.host.c_str(), address_.port,
                                               address_.keepalive_secs);
  if (rc != MOSQ_ERR_SUCCESS) {
    return Status::Unavailable(what_ + ": cannot connect to " + where + ": " +
                               (rc == MOSQ_ERR_ERRNO ? std::string(strerror(errno))
                                                     : mosquitto_strerror(rc)));
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
  if (threaded_) return Status::Ok();
  // The first connection here (the thread would give up on a refused one);
  // every later one by the thread.
  mosquitto_reconnect_delay_set(m_, 1, 10, /*exponential=*/true);
  const std::string where = address_.host + ":" + std::to_string(address_.port);
  int rc = mosquitto_connect(m_, address_.host.c_str(), address_.port, address_.keepalive_secs);
  if (rc != MOSQ_ERR_SUCCESS) {
    return Status::Unavailable(what_ + ": cannot connect to " + where + ": " +
                               (rc == MOSQ_ERR_ERRNO ? std::string(strerror(errno))
                                                     : mosquitto_strerror(rc)));
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
  const int rc = last_disconnect_.load();
  if (rc != 0) return std::string("connection lost: ") + mosquitto_strerror(rc);
  return "not connected to " + address_.host + ":" + std::to_string(address_.port);
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
