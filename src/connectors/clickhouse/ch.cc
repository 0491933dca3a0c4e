#include "connectors/clickhouse/ch.h"

#include <cstdlib>
#include <set>

#include "common/base64.h"

namespace kayak::ch {

namespace {

// Error codes (ClickHouse's ErrorCodes.cpp) that say the data of an INSERT was
// refused: parse errors, type errors, a NULL for a column that is not
// Nullable.
const std::set<int> kContentCodes = {6,  26, 27, 32, 33,  38,  41,  53,
                                     69, 70, 72, 117, 131, 349, 190};
// Codes that say the server, not the statement, is in trouble: timeouts,
// too many queries or parts, memory, the network, a shutdown, a read-only
// period; and a login or rights refused for a while (an unknown user, a wrong
// password, an address not allowed, access to the database denied: a password
// rotated, a user's rights changed and given back), as postgres's class 28
// and 42501.
const std::set<int> kServerCodes = {159, 164, 192, 193, 194, 195, 202, 203, 209, 210,
                                    241, 242, 252, 291, 319, 394, 425, 497, 516};

// "Code: 60, e.displayText() = DB::Exception: Table x doesn't exist., e.what() = ..."
void ParseError(const std::string& body, int* code, std::string* message) {
  *code = 0;
  if (body.rfind("Code: ", 0) == 0) *code = std::atoi(body.c_str() + 6);
  std::string m = body;
  const size_t at = m.find("DB::Exception: ");
  if (at != std::string::npos) m = m.substr(at + 15);
  const size_t what = m.find(", e.what() = ");
  if (what != std::string::npos) m.resize(what);
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  for (auto& c : m) {
    if (c == '\n') c = ' ';
  }
  *message = m.size() > 500 ? m.substr(0, 500) + "..." : m;
}

}  // namespace

Client::Client(Settings s) : s_(std::move(s)) {}

Status Client::Init() {
  auto url = ParseHttpUrl(s_.url);
  if (!url.ok()) return Status::Invalid("url: " + url.status().message());
  http_ = std::make_unique<HttpClient>(*url, s_.timeout_ms, s_.tls);
  // Basic authentication: the password stays out of the URL, and so out of
  // every error message that names the request.
  std::string cred;
  AppendBase64(s_.user + ":" + s_.password, &cred);
  headers_ = {{"Authorization", "Basic " + cred}};
  return Status::Ok();
}


Result<std::string> Client::Send(std::string target, std::string_view body, Failure* failure) {
  Failure f;
  auto res = http_->Request("POST", headers_, body, target);
  if (!res.ok()) {
    if (failure) *failure = f;
    return res.status();
  }
  if (res->status == 200) return std::move(res->body);
  return ErrorOf(res->status, res->body, failure);
}

Status Client::ErrorOf(unsigned status, const std::string& body, Failure* failure) {
  Failure f;
  std::string message;
  ParseError(body, &f.code, &message);
  if (message.empty()) message = "HTTP " + std::to_string(status);
  f.content = kContentCodes.count(f.code) > 0;
  if (failure) *failure = f;
  const std::string text = "clickhouse: " + message;
  if (f.code == 0 || status == 503 || kServerCodes.count(f.code)) {
    return Status::Unavailable(text);
  }
  return Status::Invalid(text);
}

Status Client::StartQuery(const std::string& sql, const std::string& params) {
  auto status = http_->StartStream("POST", headers_, sql,
                                   "/?database=" + UrlEncode(s_.database) + params);
  if (!status.ok()) return status.status();
  if (*status == 200) return Status::Ok();
  std::string body;
  for (bool done = false; !done && body.size() < (1 << 20);) {
    KAYAK_RETURN_IF_ERROR(http_->ReadStream(&body, 64 << 10, &done));
  }
  http_->AbandonStream();
  return ErrorOf(*status, body, nullptr);
}

Status Client::ReadMore(std::string* out, size_t max, bool* done) {
  return http_->ReadStream(out, max, done);
}

Result<std::string> Client::Query(const std::string& sql, const std::string& params,
                                  Failure* failure) {
  std::string target = "/?database=" + UrlEncode(s_.database) + params;
  return Send(std::move(target), sql, failure);
}

Status Client::Insert(const std::string& sql, std::string_view data, const std::string& params,
                      Failure* failure) {
  std::string target = "/?database=" + UrlEncode(s_.database) + "&query=" + UrlEncode(sql) + params;
  auto res = Send(std::move(target), data, failure);
  return res.ok() ? Status::Ok() : res.status();
}

std::string UrlEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

namespace {

// `s` between `q`s, with `q` and '\\' escaped by a backslash.
std::string Quote(std::string_view s, char q) {
  std::string out(1, q);
  for (char c : s) {
    if (c == q || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back(q);
  return out;
}

}  // namespace

std::string QuoteIdent(std::string_view name) { return Quote(name, '`'); }

std::string QuoteString(std::string_view s) { return Quote(s, '\''); }

int DateTime64Precision(std::string_view type) {
  constexpr std::string_view kPrefix = "DateTime64(";
  if (type.rfind(kPrefix, 0) != 0) return -1;
  int p = 0;
  for (size_t i = kPrefix.size(); i < type.size() && type[i] >= '0' && type[i] <= '9'; ++i) {
    p = p * 10 + (type[i] - '0');
  }
  return p;
}

std::string UtcTextOf(const std::string& quoted, std::string_view type) {
  if (DateTime64Precision(type) < 0) {
    return "formatDateTime(" + quoted + ", '%Y-%m-%dT%H:%M:%SZ', 'UTC')";
  }
  // formatDateTime has no fractional seconds on every server version;
  // toString of a DateTime64 has all of them.
  return "concat(replaceOne(toString(toTimeZone(" + quoted + ", 'UTC')), ' ', 'T'), 'Z')";
}

std::string DateTimeLiteral(std::string_view text, std::string_view type) {
  const int p = DateTime64Precision(type);
  if (p < 0) return "parseDateTimeBestEffort(" + QuoteString(text) + ")";
  return "parseDateTime64BestEffort(" + QuoteString(text) + ", " + std::to_string(p) + ")";
}

}  // namespace kayak::ch
