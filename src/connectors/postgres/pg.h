// The postgres connector's client side (libpq): a connection that comes back
// after the server went away, errors sorted into retryable and permanent by
// their SQLSTATE, and each column's text turned into JSON.
#pragma once

#include <libpq-fe.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "connectors/shared/tls.h"
#include "kayak/status.h"

namespace kayak::pg {

struct ResultFree {
  void operator()(PGresult* r) const { PQclear(r); }
};
using Result = std::unique_ptr<PGresult, ResultFree>;

// One libpq connection, opened on first use and again after it broke. Every
// session is set to UTC and ISO dates, so timestamps read back the same.
class Connection {
 public:
  explicit Connection(std::string url, int64_t statement_timeout_secs = 60, TlsOptions tls = {})
      : url_(std::move(url)), statement_timeout_secs_(statement_timeout_secs), tls_(std::move(tls)) {}
  ~Connection() { Close(); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Connects if not connected. Unavailable (retryable) when the server
  // cannot be reached.
  Status Ensure();
  void Close();
  bool connected() const { return conn_ != nullptr; }
  PGconn* get() const { return conn_; }

  // Runs `sql` with text parameters (NULL when a pointer is null). An error
  // result becomes a Status (see ErrorOf); a broken connection is closed.
  Status Exec(const std::string& sql, const std::vector<const char*>& params, Result* out);
  Status Exec(const std::string& sql) {
    Result r;
    return Exec(sql, {}, &r);
  }

  // The SQLSTATE of the last failed Exec ("" when it never reached the server).
  const std::string& last_sqlstate() const { return sqlstate_; }

 private:
  std::string url_;
  PGconn* conn_ = nullptr;
  std::string sqlstate_;
  int64_t statement_timeout_secs_;
  TlsOptions tls_;
};

// libpq's keywords for `tls` over a connection to `url` (sslmode verify-full,
// or require with insecure_skip_verify; sslrootcert, sslcert, sslkey;
// server_name through host with hostaddr, which needs the url's host to be
// an address). Empty without the block; Invalid for what libpq cannot do.
Status TlsKeywords(const std::string& url, const TlsOptions& tls,
                   std::vector<std::pair<std::string, std::string>>* out);

// Whether a SQLSTATE says the row's content was refused (data exception,
// integrity constraint): a permanent error of that row, not of the server.
bool IsContentError(std::string_view sqlstate);

// Appends the JSON form of one column value, given as libpq's text for the
// column's type `oid` (docs/components.md, "postgres": the type mapping).
void AppendValue(unsigned oid, std::string_view text, std::string* out);

// A quoted identifier ("ts" -> "\"ts\"").
std::string QuoteIdent(std::string_view name);

// A failed result's primary message (or the connection's, without one).
std::string ErrorText(const PGresult* r, PGconn* conn);

// libpq's message without its trailing newline.
std::string ConnError(PGconn* conn);

}  // namespace kayak::pg
