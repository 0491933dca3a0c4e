// The HTTP listener (Boost.Beast's parser over Asio sockets): the admin API
// and the http inputs' paths. One I/O thread (on two cores a second one
// measured slower, see docs/benchmarks.md) runs every connection; handlers
// must not block. An http input's post is answered later, when its log says
// so (group commit), through a queue the I/O thread drains.
#pragma once

// GCC 12 with -fsanitize=address reports a false -Wmaybe-uninitialized inside
// Beast's parser (an optional<uint64_t> read only once set), through inlining
// into the listener.
#if defined(__clang__)
#include <boost/beast/http.hpp>
#else
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <boost/beast/http.hpp>
#pragma GCC diagnostic pop
#endif

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/defaults.h"
#include "kayak/ingest.h"
#include "kayak/status.h"
#include "server/listener_tls.h"

namespace kayak::http {

using Request = boost::beast::http::request<boost::beast::http::string_body>;
using Response = boost::beast::http::response<boost::beast::http::string_body>;
using Handler = std::function<void(const Request&, Response*)>;
// A handler that answers later: returns true when it took the request and
// will call `done` exactly once, from any thread (the answer is written by
// the I/O thread); false to leave the request to the Handler. Must not block.
using AsyncHandler = std::function<bool(const Request&, IngestDone done)>;
// Asked on a request's header alone, before its body is read: true, with
// `res` filled in, refuses it (a missing token); its body is then never read.
using HeaderCheck = std::function<bool(std::string_view target, std::string_view authorization,
                                       Response* res)>;

struct ServerLimits {
  uint64_t max_body_bytes = defaults::kMaxBodyBytes;      // larger bodies get 413
  uint32_t max_header_bytes = defaults::kMaxHeaderBytes;  // larger headers get 431
  // A request must arrive whole within this.
  int read_timeout_ms = defaults::kReadTimeoutSecs * 1000;
  // A keep-alive connection idle this long is closed.
  int idle_timeout_ms = defaults::kIdleTimeoutSecs * 1000;
  // Further connections: probes only, then closed.
  size_t max_connections = defaults::kMaxConnections;
  // A request's header must arrive within this (a body then has the rest of
  // the read timeout): a connection that sends a header slowly is let go.
  int header_timeout_ms = defaults::kHeaderTimeoutSecs * 1000;
  // Connections one client address may hold; further ones are closed at once.
  size_t max_connections_per_client = defaults::kMaxConnectionsPerClient;
  // Request bodies all connections may hold at once (bytes received, not
  // declared); a body that would pass it gets 503 with Retry-After.
  uint64_t max_body_bytes_in_flight = defaults::kMaxBodyBytesInFlight;
  // With a loopback listen address, the Host a request names must be a
  // loopback one (127.x, localhost, ::1) or one of `allowed_hosts`: a page
  // whose name a DNS rebinding points at 127.0.0.1 is refused. Names compare
  // without regard to case. A request
  // that changes something (POST, PUT, DELETE) with an Origin whose host is
  // not one of those is refused on any listener.
  bool loopback_only_hosts = true;
  std::vector<std::string> allowed_hosts;
};

// Places beyond max_connections kept for /health and /ready, so probes
// answer while the listener is full: a connection in one gets only those.
constexpr size_t kProbePlaces = 16;

class Server {
 public:
  Server(std::string host, uint16_t port, ServerLimits limits, Handler handler);
  ~Server();
  // Requests for a path an http input registered in `router` go to that
  // input (answered when it says so) instead of `handler`. Before Start.
  void SetIngest(IngestRouter* router);
  // Requests the async handler takes are answered when it says. Before Start.
  void SetAsyncHandler(AsyncHandler handler);
  // Requests the check refuses are answered on their header. Before Start.
  void SetHeaderCheck(HeaderCheck check);
  // Serves HTTPS instead of HTTP (the server config's `tls`). Before Start,
  // whose error then names a certificate or key that does not load.
  void SetTls(ListenerTls tls);
  // Loads the certificate and key again (SIGHUP) for the connections that
  // come next; a change of the files is also noticed within a second. A
  // failed load is logged and the last good certificate kept. Any thread.
  void ReloadTls();
  // Binds and starts the I/O thread. An error if the address cannot be bound.
  Status Start();
  void Stop();
  // The bound port (useful when configured as 0).
  uint16_t port() const { return bound_port_; }
  const std::string& host() const { return host_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string host_;
  uint16_t port_;
  uint16_t bound_port_ = 0;
};

// A JSON error body: {"error": message}.
void JsonError(Response* res, unsigned status, const std::string& message);

}  // namespace kayak::http
