#include "connectors/postgres/pg.h"

#include <arpa/inet.h>

#include <cstring>
#include <utility>
#include <vector>

#include "common/base64.h"
#include "common/json_text.h"

namespace kayak::pg {

namespace {

// Type OIDs from the server's catalog (pg_type.dat); stable across versions.
constexpr unsigned kBool = 16, kBytea = 17, kInt8 = 20, kInt2 = 21, kInt4 = 23, kOid = 26,
                   kJson = 114, kFloat4 = 700, kFloat8 = 701, kDate = 1082, kTimestamp = 1114,
                   kTimestampTz = 1184, kNumeric = 1700, kJsonb = 3802;

// SQLSTATEs that say the server, not the statement, failed: connection
// exceptions, a login refused (class 28: a role made NOLOGIN or a password
// changed for a while), rights taken away (42501), serialization failures
// and deadlocks, insufficient resources, operator intervention (shutdown),
// system errors. Each passes when the server's state changes back, so the
// statement is tried again.
bool IsServerTrouble(std::string_view sqlstate) {
  if (sqlstate.size() != 5) return true;  // no answer at all
  if (sqlstate == "42501") return true;
  const std::string_view c = sqlstate.substr(0, 2);
  return c == "08" || c == "28" || c == "40" || c == "53" || c == "57" || c == "58";
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "2026-01-01 10:00:00.5+00" (ISO DateStyle, UTC session) -> RFC 3339.
void AppendTimestamp(std::string_view t, bool zoned, std::string* out) {
  const bool plain = t.size() >= 19 && t[4] == '-' && t[10] == ' ' &&
                     t.find(' ', 11) == std::string_view::npos;  // no " BC"
  if (!plain) {  // infinity, -infinity, a BC date: as the server wrote it
    jtext::AppendString(out, t);
    return;
  }
  std::string s(t);
  s[10] = 'T';
  if (zoned) {
    // The session is UTC, so the offset is "+00"; keep any other as +hh:mm.
    const size_t z = s.find_first_of("+-", 19);
    if (z != std::string::npos) {
      std::string off = s.substr(z);
      s.resize(z);
      if (off == "+00") {
        s += 'Z';
      } else {
        if (off.size() == 3) off += ":00";
        s += off;
      }
    }
  } else {
    s += 'Z';  // a timestamp without time zone is taken as UTC
  }
  jtext::AppendString(out, s);
}

bool IsJsonNumber(std::string_view t) {
  // The server writes NaN and the infinities as words; everything else it
  // writes for these types is a JSON number.
  return !t.empty() && (t[0] == '-' || (t[0] >= '0' && t[0] <= '9')) &&
         t.find_first_of("IN") == std::string_view::npos;
}

}  // namespace

Status Connection::Ensure() {
  if (conn_ != nullptr && PQstatus(conn_) == CONNECTION_OK) return Status::Ok();
  Close();
  std::vector<std::pair<std::string, std::string>> params = {
      {"dbname", url_}, {"connect_timeout", "10"}, {"application_name", "kayak"}};
  // After dbname: libpq keeps the last value of a keyword, so the block wins
  // over what the url says.
  KAYAK_RETURN_IF_ERROR(TlsKeywords(url_, tls_, &params));
  std::vector<const char*> keys, values;
  for (const auto& [k, v] : params) {
    keys.push_back(k.c_str());
    values.push_back(v.c_str());
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);
  conn_ = PQconnectdbParams(keys.data(), values.data(), /*expand_dbname=*/1);
  if (conn_ == nullptr) return Status::Unavailable("postgres: out of memory");
  if (PQstatus(conn_) != CONNECTION_OK) {
    Status st = Status::Unavailable("cannot connect to postgres: " + ConnError(conn_));
    Close();
    return st;
  }
  // Timestamps in UTC and ISO form, read back exactly; no statement runs for
  // longer than the timeout (a minute unless the input says), so a hung
  // server cannot hold a pipeline forever.
  return Exec("SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'; SET statement_timeout = '" +
              std::to_string(statement_timeout_secs_) + "s'");
}

void Connection::Close() {
  if (conn_ != nullptr) PQfinish(conn_);
  conn_ = nullptr;
}

Status Connection::Exec(const std::string& sql, const std::vector<const char*>& params,
                        Result* out) {
  sqlstate_.clear();
  KAYAK_RETURN_IF_ERROR(Ensure());
  out->reset(params.empty() ? PQexec(conn_, sql.c_str())
                            : PQexecParams(conn_, sql.c_str(), static_cast<int>(params.size()),
                                           nullptr, params.data(), nullptr, nullptr, 0));
  const ExecStatusType s = out->get() != nullptr ? PQresultStatus(out->get()) : PGRES_FATAL_ERROR;
  if (s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK) return Status::Ok();
  const char* state = out->get() != nullptr ? PQresultErrorField(out->get(), PG_DIAG_SQLSTATE)
                                            : nullptr;
  sqlstate_ = state != nullptr ? state : "";
  const std::string msg = ErrorText(out->get(), conn_);
  if (PQstatus(conn_) != CONNECTION_OK || IsServerTrouble(sqlstate_)) {
    if (PQstatus(conn_) != CONNECTION_OK) Close();
    return Status::Unavailable("postgres: " + msg);
  }
  return Status::Invalid("postgres: " + msg);
}

Status TlsKeywords(const std::string& url, const TlsOptions& tls,
                   std::vector<std::pair<std::string, std::string>>* out) {
  if (!tls.enabled) return Status::Ok();
  out->emplace_back("sslmode", tls.insecure_skip_verify ? "require" : "verify-full");
  // libpq 15 has no "system" store: the system's bundle, by its path.
  out->emplace_back("sslrootcert",
                    tls.ca_file.empty() ? "/etc/ssl/certs/ca-certificates.crt" : tls.ca_file);
  if (!tls.cert_file.empty()) {
    out->emplace_back("sslcert", tls.cert_file);
    out->emplace_back("sslkey", tls.key_file);
  }
  if (tls.server_name.empty()) return Status::Ok();
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(url.c_str(), &err);
  if (opts == nullptr) {
    std::string why = err != nullptr ? err : "cannot be parsed";
    PQfreemem(err);
    return Status::Invalid("postgres: the url " + why);
  }
  std::string host;
  for (PQconninfoOption* o = opts; o->keyword != nullptr; ++o) {
    if (std::string_view(o->keyword) == "host" && o->val != nullptr) host = o->val;
  }
  PQconninfoFree(opts);
  unsigned char addr[sizeof(in6_addr)];
  if (inet_pton(AF_INET, host.c_str(), addr) != 1 && inet_pton(AF_INET6, host.c_str(), addr) != 1) {
    return Status::Invalid("postgres: tls.server_name needs the url's host to be an IP address "
                           "(libpq checks the certificate against the host it is given)");
  }
  out->emplace_back("hostaddr", host);
  out->emplace_back("host", tls.server_name);
  return Status::Ok();
}

bool IsContentError(std::string_view sqlstate) {
  return sqlstate.size() == 5 && (sqlstate.substr(0, 2) == "22" || sqlstate.substr(0, 2) == "23");
}

void AppendValue(unsigned oid, std::string_view text, std::string* out) {
  switch (oid) {
    case kBool:
      out->append(text == "t" ? "true" : "false");
      return;
    case kInt2:
    case kInt4:
    case kInt8:
    case kOid:
      out->append(text);  // exact, however big (kayak keeps big integers exact)
      return;
    case kFloat4:
    case kFloat8:
    case kNumeric:
      if (IsJsonNumber(text)) {
        out->append(text);
      } else {
        jtext::AppendString(out, text);  // "NaN", "Infinity", "-Infinity"
      }
      return;
    case kJson:
    case kJsonb:
      out->append(text);  // nested JSON, as the server holds it
      return;
    case kTimestampTz:
      AppendTimestamp(text, true, out);
      return;
    case kTimestamp:
      AppendTimestamp(text, false, out);
      return;
    case kBytea:
      if (text.size() >= 2 && text[0] == '\\' && text[1] == 'x') {
        std::string bytes;
        bytes.reserve((text.size() - 2) / 2);
        for (size_t i = 2; i + 1 < text.size(); i += 2) {
          bytes.push_back(static_cast<char>(HexDigit(text[i]) * 16 + HexDigit(text[i + 1])));
        }
        out->push_back('"');
        AppendBase64(bytes, out);
        out->push_back('"');
        return;
      }
      break;
    case kDate:
    default:
      break;
  }
  jtext::AppendString(out, text);  // dates, text, uuids, arrays, ...: their text
}

std::string QuoteIdent(std::string_view name) {
  std::string q = "\"";
  for (char c : name) {
    if (c == '"') q.push_back('"');
    q.push_back(c);
  }
  q.push_back('"');
  return q;
}

std::string ErrorText(const PGresult* r, PGconn* conn) {
  const char* primary = r != nullptr ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : nullptr;
  return primary != nullptr && *primary != 0 ? std::string(primary) : ConnError(conn);
}

std::string ConnError(PGconn* conn) {
  std::string m = conn != nullptr ? PQerrorMessage(conn) : "no connection";
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  for (auto& c : m) {
    if (c == '\n') c = ' ';
  }
  return m;
}

}  // namespace kayak::pg
