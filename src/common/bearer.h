// Bearer tokens: the admin API's (auth.token_file) and an http input's own.
#pragma once

#include <string_view>

namespace kayak {

enum class BearerCheck { kOk, kMissing, kWrong };

// Checks an Authorization header value against `token`. The comparison takes
// time that depends on the token's length only, not on how much of it a
// guess gets right.
inline BearerCheck CheckBearer(std::string_view authorization, std::string_view token) {
  constexpr std::string_view kScheme = "Bearer ";
  if (authorization.size() < kScheme.size()) return BearerCheck::kMissing;
  for (size_t i = 0; i < kScheme.size(); ++i) {  // the scheme is case-insensitive (RFC 9110)
    const char c = authorization[i];
    const char want = kScheme[i];
    if (c != want && !(c >= 'A' && c <= 'Z' && c - 'A' + 'a' == want) &&
        !(c >= 'a' && c <= 'z' && c - 'a' + 'A' == want)) {
      return BearerCheck::kMissing;
    }
  }
  const std::string_view given = authorization.substr(kScheme.size());
  unsigned diff = given.size() == token.size() ? 0u : 1u;
  for (size_t i = 0; i < token.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= g ^ static_cast<unsigned char>(token[i]);
  }
  return diff == 0 ? BearerCheck::kOk : BearerCheck::kWrong;
}

}  // namespace kayak
