// A small blocking HTTP/1.1 client (Boost.Beast) for the connectors that
// speak HTTP (the http output, the http_poll input, clickhouse): http or
// https (Boost.Asio's OpenSSL stream, the certificate and the host name
// verified as the `tls` block says), one keep-alive connection, reconnects
// after an error, a deadline on every request and a limit on the size of an
// answer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "connectors/shared/tls.h"
#include "kayak/status.h"

namespace kayak {

struct HttpUrl {
  std::string host;
  std::string port;    // "80" (http) or "443" (https) when the URL has none
  std::string target;  // path and query, "/" when the URL has none
  bool https = false;
};

// Parses "http://host[:port][/path][?query]" and the same with https://.
Result<HttpUrl> ParseHttpUrl(std::string_view url);

struct HttpResponse {
  unsigned status = 0;
  std::string body;
  std::string retry_after;  // the Retry-After header, if any
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

class HttpClient {
 public:
  // Over TLS when the url is https:// or `tls.enabled` (the system's store
  // without a CA file; the certificate's name checked against
  // tls.server_name, or the url's host).
  HttpClient(HttpUrl url, int64_t timeout_ms, TlsOptions tls = {});
  ~HttpClient();

  // Sends one request and reads the answer. An error Status (Unavailable)
  // for a connection that cannot be made or breaks, or the deadline passing;
  // any HTTP status is a response.
  // `target` (path and query) replaces the URL's when not empty. An answer
  // whose body is larger than kBodyLimit is an error (Invalid); a longer
  // answer is read with StartStream.
  Result<HttpResponse> Request(std::string_view method, const HttpHeaders& headers,
                               std::string_view body, std::string_view target = {});

  // A long answer read as it arrives: StartStream sends the request and reads
  // the answer's head (its status is returned); ReadStream appends up to `max`
  // bytes of the body to `out` and sets `done` at its end. Another request
  // before the end abandons the rest (and the connection).
  Result<unsigned> StartStream(std::string_view method, const HttpHeaders& headers,
                               std::string_view body, std::string_view target = {});
  Status ReadStream(std::string* out, size_t max, bool* done);
  void AbandonStream();

  static constexpr uint64_t kBodyLimit = 8 << 20;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kayak
