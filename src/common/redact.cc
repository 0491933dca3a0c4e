#include "common/redact.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <mutex>
#include <string_view>
#include <utility>
#include <shared_mutex>
#include <vector>

namespace kayak {

namespace {

constexpr size_t kMinSecret = 4;
// A config is bounded; so is what it registers, across reloads that rotate
// secrets (the oldest are forgotten first).
constexpr size_t kMaxSecrets = 4096;

struct Registry {
  std::shared_mutex mu;
  std::vector<std::string> secrets;  // longest first: a secret inside another is replaced with it
  std::atomic<bool> any{false};
};

Registry& Secrets() {
  static Registry* r = new Registry;  // never destroyed: logging may run at exit
  return *r;
}

void Keep(std::string piece, std::vector<std::string>* out) {
  if (piece.size() >= kMinSecret) out->push_back(std::move(piece));
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string PercentDecoded(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 && HexValue(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// Where a URL's authority (between "://" and the path) starts and ends, for
// the URL whose "://" is at `sep`.
std::pair<size_t, size_t> Authority(std::string_view text, size_t sep) {
  const size_t begin = sep + 3;
  size_t end = begin;
  while (end < text.size() && text[end] != '/' && text[end] != '?' && text[end] != '#' &&
         !std::isspace(static_cast<unsigned char>(text[end])) && text[end] != '"' &&
         text[end] != '\'') {
    ++end;
  }
  return {begin, end};
}

// The span of the password in the URL whose "://" is at `sep`, if it has one.
bool UrlPassword(std::string_view text, size_t sep, size_t* from, size_t* to) {
  auto [begin, end] = Authority(text, sep);
  const std::string_view auth = text.substr(begin, end - begin);
  const size_t at = auth.rfind('@');
  if (at == std::string_view::npos) return false;
  const size_t colon = auth.find(':');
  if (colon == std::string_view::npos || colon > at) return false;
  *from = begin + colon + 1;
  *to = begin + at;
  return *to > *from;
}

bool IsKeywordChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// A libpq keyword string's `keyword = value` pairs: the keyword, the value
// (quotes and escapes undone).
struct Pair {
  std::string key, value;
};
std::vector<Pair> KeywordPairs(std::string_view s) {
  std::vector<Pair> out;
  size_t i = 0;
  auto skip_space = [&] {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  };
  while (true) {
    skip_space();
    if (i >= s.size()) break;
    Pair p;
    while (i < s.size() && IsKeywordChar(s[i])) p.key.push_back(s[i++]);
    skip_space();
    if (p.key.empty() || i >= s.size() || s[i] != '=') {
      ++i;  // not a pair: go on from the next character
      continue;
    }
    ++i;
    skip_space();
    if (i < s.size() && s[i] == '\'') {
      ++i;
      while (i < s.size() && s[i] != '\'') {
        if (s[i] == '\\' && i + 1 < s.size()) ++i;
        p.value.push_back(s[i++]);
      }
      if (i < s.size()) ++i;
    } else {
      while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) {
        if (s[i] == '\\' && i + 1 < s.size()) ++i;
        p.value.push_back(s[i++]);
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

// After a `password=` at `at` (the value's first byte) in a keyword string:
// the text up to the next `keyword=` (a password with a space, unquoted, runs
// on into words libpq then reads as keywords and quotes in its error).
std::string_view PasswordRun(std::string_view s, size_t at) {
  size_t end = at;
  while (end < s.size()) {
    if (std::isspace(static_cast<unsigned char>(s[end]))) {
      size_t k = end;
      while (k < s.size() && std::isspace(static_cast<unsigned char>(s[k]))) ++k;
      size_t w = k;
      while (w < s.size() && IsKeywordChar(s[w])) ++w;
      while (w < s.size() && std::isspace(static_cast<unsigned char>(s[w]))) ++w;
      if (w > k && w < s.size() && s[w] == '=') break;
    }
    ++end;
  }
  return s.substr(at, end - at);
}

void Pieces(std::string_view value, std::vector<std::string>* out) {
  Keep(std::string(value), out);
  for (size_t sep = value.find("://"); sep != std::string_view::npos;
       sep = value.find("://", sep + 3)) {
    size_t from = 0, to = 0;
    if (UrlPassword(value, sep, &from, &to)) {
      const std::string_view pw = value.substr(from, to - from);
      Keep(std::string(pw), out);
      Keep(PercentDecoded(pw), out);
    }
  }
  for (size_t at = value.find("password"); at != std::string_view::npos;
       at = value.find("password", at + 1)) {
    size_t v = at + 8;
    while (v < value.size() && value[v] == ' ') ++v;
    if (v >= value.size() || value[v] != '=') continue;
    ++v;
    while (v < value.size() && value[v] == ' ') ++v;
    std::string_view run = PasswordRun(value, v);
    if (!run.empty() && run.front() == '\'') run.remove_prefix(1);
    if (!run.empty() && run.back() == '\'') run.remove_suffix(1);
    Keep(std::string(run), out);
    size_t w = 0;
    while (w < run.size()) {
      while (w < run.size() && std::isspace(static_cast<unsigned char>(run[w]))) ++w;
      size_t e = w;
      while (e < run.size() && !std::isspace(static_cast<unsigned char>(run[e]))) ++e;
      Keep(std::string(run.substr(w, e - w)), out);
      w = e;
    }
  }
}

}  // namespace

void RegisterSecret(std::string_view value) {
  std::vector<std::string> pieces;
  Pieces(value, &pieces);
  if (pieces.empty()) return;
  Registry& r = Secrets();
  std::unique_lock lock(r.mu);
  for (auto& p : pieces) {
    auto it = std::find(r.secrets.begin(), r.secrets.end(), p);
    if (it != r.secrets.end()) r.secrets.erase(it);  // registered again: the newest
    r.secrets.insert(r.secrets.begin(), std::move(p));
  }
  if (r.secrets.size() > kMaxSecrets) r.secrets.resize(kMaxSecrets);
  std::stable_sort(r.secrets.begin(), r.secrets.end(),
                   [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  r.any.store(true, std::memory_order_release);
}

std::string Redact(std::string_view text) {
  std::string out(text);
  // URL passwords, registered or not.
  for (size_t sep = out.find("://"); sep != std::string::npos; sep = out.find("://", sep + 3)) {
    size_t from = 0, to = 0;
    if (UrlPassword(out, sep, &from, &to)) out.replace(from, to - from, "***");
  }
  Registry& r = Secrets();
  if (!r.any.load(std::memory_order_acquire)) return out;
  std::shared_lock lock(r.mu);
  for (const auto& s : r.secrets) {
    for (size_t at = out.find(s); at != std::string::npos; at = out.find(s, at + 3)) {
      out.replace(at, s.size(), "***");
    }
  }
  return out;
}

std::string AddressIdentity(std::string_view address) {
  const size_t sep = address.find("://");
  if (sep != std::string_view::npos) {
    // Several URLs of one cluster (nats://a:4222,nats://b:4222) name one system.
    address = address.substr(0, std::min(address.find(','), address.size()));
    std::string scheme(address.substr(0, sep));
    // The same system over TLS or not: the scheme that says TLS is the
    // plain one here, so turning TLS on keeps the state (docs/security.md).
    static constexpr std::pair<std::string_view, std::string_view> kPlain[] = {
        {"https", "http"}, {"mqtts", "mqtt"}, {"rediss", "redis"}, {"tls", "nats"}};
    for (const auto& [secure, plain] : kPlain) {
      if (scheme == secure) scheme = plain;
    }
    auto [begin, end] = Authority(address, sep);
    (void)begin;
    std::string_view rest = address.substr(end);
    const bool web = scheme == "http" || scheme == "https";
    if (!web) rest = rest.substr(0, std::min(rest.find('?'), rest.size()));
    rest = rest.substr(0, std::min(rest.find('#'), rest.size()));
    return scheme + "://" + std::string(rest);
  }
  if (address.find('=') != std::string_view::npos) {
    for (const auto& p : KeywordPairs(address)) {
      if (p.key == "dbname") return "dbname=" + p.value;
    }
    return "";
  }
  return "";  // host:port[,host:port...]
}

}  // namespace kayak
