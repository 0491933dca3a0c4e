// The nats connector's connection (cnats): made on first use, reconnected by
// the library after the server went away (every subscription restored), with
// its state for the card.
#pragma once

#include <nats/nats.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "connectors/shared/tls.h"
#include "kayak/component.h"
#include "kayak/status.h"

namespace kayak::nats {

// A login: `user` and `password`, a `token` (beside what the url may carry,
// nats://user:password@host), an nkey (its public key and its seed's file),
// or a `.creds` file (a user JWT and its seed). The files are read by the
// client at each connection, so a rotated one is taken at the next.
struct Login {
  std::string user, password, token;
  std::string nkey, nkey_seed_file, credentials_file;
};

// The login and TLS options both components take, and reading them (a
// password without a user, two ways to log in at once, an nkey without its
// seed or a file that cannot be read are errors on `o`).
std::vector<PropDef> LoginProps();
Login ReadLogin(const Options& o);

class Connection {
 public:
  // `what` names the component in errors ("nats input"). With tls.enabled
  // (or a tls:// url) the connection is encrypted.
  Connection(std::string url, std::string what, TlsOptions tls = {}, Login login = {})
      : url_(std::move(url)), what_(std::move(what)), tls_(std::move(tls)),
        login_(std::move(login)) {}
  ~Connection() {
    Close();
    natsStatistics_Destroy(stats_);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Connects if not yet connected; Unavailable when no server answers. Once
  // connected, the library reconnects by itself (forever, every 250 ms).
  Status Ensure();
  // Before Ensure: asynchronous JetStream publishing (the output's), at most
  // `max_pending` unacknowledged, failures reported to `on_error`.
  void SetPublishAsync(int64_t max_pending, jsPubAckErrHandler on_error, void* closure) {
    async_max_pending_ = max_pending;
    async_error_ = on_error;
    async_closure_ = closure;
  }
  // Unavailable while the library is reconnecting, with the reason.
  Status Up() const;
  // How many times the connection was lost: what was sent before a loss may
  // have had its reply lost with it.
  uint64_t losses() const { return losses_.load(); }
  // How many connections were made, counted when each is made: unlike
  // losses(), which the library reports on its own thread, this has grown
  // before anything is answered on the new connection. A flush answered
  // with it unchanged went over the connection the publishes before it did.
  uint64_t connections() const;
  // Flushes within `timeout_ms`; at once NATS_CONNECTION_DISCONNECTED while
  // the library is reconnecting (a flush then would wait its whole timeout).
  natsStatus Flush(int64_t timeout_ms);
  void Close();
  natsConnection* get() const { return nc_; }
  jsCtx* js() const { return js_; }
  const std::string& what() const { return what_; }

  // An error text: `doing`, the status's text and cnats's last error.
  std::string Error(const std::string& doing, natsStatus s) const;

 private:
  static void OnDisconnected(natsConnection* nc, void* self);
  static void OnReconnected(natsConnection* nc, void* self);
  // The last callback cnats makes for a connection, on its own thread: Close
  // waits for it, so that no callback runs on a Connection that is gone.
  static void OnClosed(natsConnection* nc, void* self);

  // The tls block onto the options; Invalid for files cnats refuses.
  Status SetTls(natsOptions* opts) const;

  const std::string url_;
  const std::string what_;
  const TlsOptions tls_;
  const Login login_;
  natsConnection* nc_ = nullptr;
  jsCtx* js_ = nullptr;
  std::atomic<bool> down_{false};
  std::mutex closed_mu_;
  std::condition_variable closed_cv_;
  bool closed_ = true;  // no connection whose callbacks could still come
  std::atomic<uint64_t> losses_{0};
  uint64_t made_ = 0;  // connections made by Ensure (each a new cnats connection)
  natsStatistics* stats_ = nullptr;  // made by Ensure, reused by connections()
  int64_t async_max_pending_ = 0;
  jsPubAckErrHandler async_error_ = nullptr;
  void* async_closure_ = nullptr;
};

// A status as an error of the given kind: NATS_TIMEOUT and connection
// failures are retryable.
Status ToStatus(natsStatus s, std::string message);

}  // namespace kayak::nats
