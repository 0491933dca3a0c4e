#include "connectors/s3/sigv4.h"

#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <ctime>

namespace kayak::s3 {

namespace {

std::string Hex(const unsigned char* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

std::string Hmac(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &n);
  return std::string(reinterpret_cast<const char*>(out), n);
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// Trimmed, every run of spaces and tabs made one space.
std::string CanonicalValue(std::string_view v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      space = !out.empty();
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}

// Removes "." and ".." segments and empty ones, keeping a trailing slash.
std::string NormalizePath(std::string_view path) {
  std::vector<std::string_view> stack;
  size_t i = 0;
  while (i <= path.size()) {
    const size_t slash = std::min(path.find('/', i), path.size());
    const std::string_view seg = path.substr(i, slash - i);
    if (seg == "..") {
      if (!stack.empty()) stack.pop_back();
    } else if (!seg.empty() && seg != ".") {
      stack.push_back(seg);
    }
    i = slash + 1;
  }
  std::string out = "/";
  for (size_t k = 0; k < stack.size(); ++k) {
    if (k > 0) out += '/';
    out += stack[k];
  }
  if (!stack.empty() && !path.empty() && path.back() == '/') out += '/';
  return out;
}

}  // namespace

std::string Sha256Hex(std::string_view data) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), d);
  return Hex(d, sizeof(d));
}

std::string UriEncode(std::string_view s, bool keep_slash) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
                            c == '~' || (keep_slash && c == '/');
    if (unreserved) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kDigits[c >> 4]);
      out.push_back(kDigits[c & 15]);
    }
  }
  return out;
}

std::string AmzDate(int64_t unix_secs) {
  const std::time_t t = static_cast<std::time_t>(unix_secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

Signed SignV4(const Request& r, const Credentials& c, const Scope& scope,
              std::string_view amz_date, const Options& o) {
  Signed out;
  out.add_headers.emplace_back("x-amz-date", std::string(amz_date));
  if (o.content_sha256_header) out.add_headers.emplace_back("x-amz-content-sha256", r.payload_sha256);
  if (!c.session_token.empty()) out.add_headers.emplace_back("x-amz-security-token", c.session_token);

  // Headers: lower-case names, sorted (stably: repeated names keep their
  // order and are joined with commas), values trimmed.
  std::vector<std::pair<std::string, std::string>> headers;
  for (const Pairs* list : {&r.headers, static_cast<const Pairs*>(&out.add_headers)}) {
    for (const auto& [k, v] : *list) headers.emplace_back(Lower(k), CanonicalValue(v));
  }
  std::stable_sort(headers.begin(), headers.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string canonical_headers, signed_headers;
  for (size_t i = 0; i < headers.size(); ++i) {
    if (i > 0 && headers[i].first == headers[i - 1].first) {
      canonical_headers.back() = ',';  // the newline after the previous value
      canonical_headers += headers[i].second + "\n";
      continue;
    }
    canonical_headers += headers[i].first + ":" + headers[i].second + "\n";
    if (!signed_headers.empty()) signed_headers += ';';
    signed_headers += headers[i].first;
  }

  // Query: every name and value encoded, sorted by name, then value.
  std::vector<std::pair<std::string, std::string>> query;
  for (const auto& [k, v] : r.query) query.emplace_back(UriEncode(k, false), UriEncode(v, false));
  std::sort(query.begin(), query.end());
  std::string canonical_query;
  for (const auto& [k, v] : query) {
    if (!canonical_query.empty()) canonical_query += '&';
    canonical_query += k + "=" + v;
  }

  const std::string path = o.normalize_path ? NormalizePath(r.path) : r.path;
  out.canonical_request = r.method + "\n" + UriEncode(path.empty() ? "/" : path, true) + "\n" +
                          canonical_query + "\n" + canonical_headers + "\n" + signed_headers +
                          "\n" + r.payload_sha256;

  const std::string_view date = amz_date.substr(0, 8);
  const std::string credential_scope =
      std::string(date) + "/" + scope.region + "/" + scope.service + "/aws4_request";
  out.string_to_sign = "AWS4-HMAC-SHA256\n" + std::string(amz_date) + "\n" + credential_scope +
                       "\n" + Sha256Hex(out.canonical_request);

  std::string key = Hmac("AWS4" + c.secret_access_key, date);
  key = Hmac(key, scope.region);
  key = Hmac(key, scope.service);
  key = Hmac(key, "aws4_request");
  const std::string sig = Hmac(key, out.string_to_sign);
  out.signature = Hex(reinterpret_cast<const unsigned char*>(sig.data()), sig.size());
  out.add_headers.emplace_back(
      "Authorization", "AWS4-HMAC-SHA256 Credential=" + c.access_key_id + "/" + credential_scope +
                           ", SignedHeaders=" + signed_headers + ", Signature=" + out.signature);
  return out;
}

}  // namespace kayak::s3
