// The clickhouse connector's client side: statements over ClickHouse's HTTP
// interface (the project's HTTP client), its errors sorted by their code into
// retryable, content and permanent, and SQL literals for the cursor.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "connectors/shared/http_client.h"
#include "connectors/shared/tls.h"
#include "kayak/component.h"
#include "kayak/status.h"

namespace kayak::ch {

struct Settings {
  std::string url;  // http://host:port or https://host:port
  std::string user, password, database;
  int64_t timeout_ms = 30000;
  TlsOptions tls;
};

// What a failed statement said.
struct Failure {
  int code = 0;         // ClickHouse's error code; 0 when it did not answer
  bool content = false;  // the data was refused (a parse or type error)
};

class Client {
 public:
  explicit Client(Settings s);
  // A URL that is not http://host:port (Invalid, naming `url`).
  Status Init();

  // Runs `sql` (the request body) with `params` (URL query parameters, each
  // "&name=value", already encoded) and returns the answer's body. Errors:
  // Unavailable when the server cannot be reached or is overloaded, Invalid
  // otherwise, with ClickHouse's message; `failure` says which.
  Result<std::string> Query(const std::string& sql, const std::string& params = "",
                            Failure* failure = nullptr);
  // Sends `data` as the body of the statement `sql` (an INSERT ... FORMAT),
  // which goes in the URL.
  Status Insert(const std::string& sql, std::string_view data, const std::string& params,
                Failure* failure);

  // A SELECT whose answer is read as it arrives: StartQuery sends it (an
  // error answer is read whole and returned); ReadMore appends up to `max`
  // bytes of the answer to `out`, `done` at its end.
  Status StartQuery(const std::string& sql, const std::string& params);
  Status ReadMore(std::string* out, size_t max, bool* done);
  void Abandon() { http_->AbandonStream(); }

 private:
  Settings s_;
  std::unique_ptr<HttpClient> http_;
  HttpHeaders headers_;

  Result<std::string> Send(std::string target, std::string_view body, Failure* failure);
  Status ErrorOf(unsigned status, const std::string& body, Failure* failure);
};

// Percent-encodes a URL query value.
std::string UrlEncode(std::string_view s);
// `name` as a quoted identifier: `na``me`.
std::string QuoteIdent(std::string_view name);
// `s` as a quoted string literal: 'it\'s'.
std::string QuoteString(std::string_view s);

// The fractional digits of a DateTime64(P[, tz]) type; -1 for any other.
int DateTime64Precision(std::string_view type);
// The column `quoted` of a DateTime or DateTime64 `type` as RFC 3339 text in
// UTC: "2026-01-02T03:04:05Z", a DateTime64 with its P digits
// ("...05.123Z"), so that a cursor kept as that text loses nothing.
std::string UtcTextOf(const std::string& quoted, std::string_view type);
// That text back as a value of the column's `type`, for a comparison.
std::string DateTimeLiteral(std::string_view text, std::string_view type);

}  // namespace kayak::ch

namespace kayak {
// The options both clickhouse components have (url, user, password,
// database, timeout_ms), and their values.
std::vector<PropDef> ChConnectionProps();
ch::Settings ChSettings(const Options& o);
}  // namespace kayak
