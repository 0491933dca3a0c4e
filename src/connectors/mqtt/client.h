// The mqtt connector's client side (libmosquitto, MQTT 3.1.1, clean
// session): the address, one connection driven by the thread that owns the
// component (no library thread), reconnected on the next call after it broke.
#pragma once

#include <mosquitto.h>

#include <atomic>
#include <string>
#include <string_view>
#include <vector>

#include "connectors/shared/tls.h"
#include "kayak/component.h"
#include "kayak/thread_annotations.h"

namespace kayak::mqtt {

struct Address {
  std::string host;
  int port = 1883;
  std::string client_id, username, password;
  int keepalive_secs = 60;
  TlsOptions tls;  // tls.enabled: over TLS (mqtts:// or the `tls` block)
};
// mqtt://host[:port] or mqtts://host[:port] (TLS, port 8883 by default);
// false with `error` otherwise.
bool ParseUrl(std::string_view url, Address* out, std::string* error);

// The options both components have (url, client_id, username, password,
// keepalive_secs, tls), and the address they make.
std::vector<PropDef> ConnectionProps();
Address ReadAddress(const Options& o, const std::string& default_client_id);

// What the owning component hears of, on its own thread (inside Ensure and
// the loop calls it makes).
struct Callbacks {
  void* owner = nullptr;
  void (*connected)(void* owner) = nullptr;  // subscribe here
  void (*message)(void* owner, const mosquitto_message* m) = nullptr;
  void (*published)(void* owner, int mid) = nullptr;  // QoS 0 sent, QoS 1 acknowledged
};

class Client {
 public:
  Client(Address address, std::string what, Callbacks callbacks);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Connects (or reconnects) if not connected: Unavailable when the broker
  // cannot be reached or refuses. `on_connect` runs inside (subscribe there).
  Status Ensure();
  // The other way to drive it: connects, then starts libmosquitto's own
  // thread, which reconnects with backoff (1 to 10 s) whenever the
  // connection breaks; callbacks then run on that thread. Unavailable when
  // the first connection fails (call again).
  Status StartThread();
  // With the thread: whether the broker accepted the connection, and why not.
  bool up() const { return connected_.load(); }
  std::string down_reason() const;
  // A libmosquitto result: OK, or (after a lost connection) Unavailable.
  Status Check(int rc, const std::string& doing);
  bool connected() const { return connected_.load(); }
  mosquitto* handle() const { return m_; }
  const std::string& what() const { return what_; }

 private:
  static void OnConnect(mosquitto* m, void* self, int rc);
  static void OnDisconnect(mosquitto* m, void* self, int rc);
  static void OnMessage(mosquitto* m, void* self, const mosquitto_message* msg);
  static void OnPublish(mosquitto* m, void* self, int mid);
  static void OnLog(mosquitto* m, void* self, int level, const char* text);
  // `doing` failed with `rc`: libmosquitto's reason, and for a TLS failure
  // OpenSSL's (from the library's log).
  std::string Why(int rc);

  const Address address_;
  const std::string what_;
  const Callbacks callbacks_;
  mosquitto* m_ = nullptr;
  std::atomic<bool> connected_{false};
  bool ever_connected_ = false;
  bool threaded_ = false;
  std::atomic<int> connack_{-1};
  std::atomic<int> last_disconnect_{0};
  Status setup_;  // a TLS set-up libmosquitto refused (a bad certificate file)
  mutable Mutex log_mu_;
  std::string last_log_error_ KAYAK_GUARDED_BY(log_mu_);  // the library's last error line
};

}  // namespace kayak::mqtt
