// The client side of TLS for connectors whose library has none of its own
// (the shared HTTP client, redis through hiredis 0.14): an OpenSSL context
// made from the `tls` block, and a tunnel that hands such a library a local
// socket whose bytes travel encrypted to the server.
#pragma once

#include <boost/asio/ssl/context.hpp>
#include <openssl/ssl.h>

#include <memory>
#include <string>

#include "connectors/shared/tls.h"
#include "kayak/status.h"

namespace kayak {

// TLS 1.2 or later; the server's certificate checked against `ca_file` (the
// system's store without it) unless `insecure_skip_verify`; the client
// certificate when given. An error names the file that did not load.
Result<std::unique_ptr<boost::asio::ssl::context>> MakeTlsClientContext(const TlsOptions& tls);

// Sets what a client connection sends and checks of the server: the name
// for SNI (unless an address) and, unless `insecure_skip_verify`, the name or
// address the certificate must carry: `server_name`, or `host`.
void PrepareTlsClient(SSL* ssl, const TlsOptions& tls, const std::string& host);

// A failed handshake's reason: Asio's error and, when the certificate was
// refused, OpenSSL's word for why (certificate has expired, hostname
// mismatch, unable to get local issuer certificate...).
std::string HandshakeFailure(SSL* ssl, const boost::system::error_code& ec);

// What a connection refused by a server that requires a client certificate
// looks like under TLS 1.3 (the client's handshake ends before the server
// checks it, so the refusal arrives as the connection closing): a note
// naming tls.cert_file, or "" when a client certificate was given.
std::string ClientCertificateHint(const TlsOptions& tls);

// A TLS connection to host:port, made and verified (the name checked is
// `server_name` or `host`), whose plaintext side is one end of a local
// socket pair: the library speaks its protocol on fd() as on a plain
// connection, and a thread of the tunnel's own carries the bytes both ways
// through OpenSSL. When either side closes, both are closed.
class TlsTunnel {
 public:
  // Connects and handshakes within `timeout_ms`; the error says which step
  // failed and OpenSSL's reason (certificate verify failed, ...).
  static Result<std::unique_ptr<TlsTunnel>> Open(const std::string& host, int port,
                                                 const TlsOptions& tls, int timeout_ms);
  ~TlsTunnel();
  TlsTunnel(const TlsTunnel&) = delete;
  TlsTunnel& operator=(const TlsTunnel&) = delete;

  // The plaintext end, handed over once: its new owner closes it.
  int TakeFd();

 private:
  TlsTunnel();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kayak
