// Base64 (RFC 4648, with padding): bytea columns as JSON strings, HTTP basic
// authentication.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kayak {

inline void AppendBase64(std::string_view bytes, std::string* out) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (uint32_t(uint8_t(bytes[i])) << 16) |
                       (uint32_t(uint8_t(bytes[i + 1])) << 8) | uint8_t(bytes[i + 2]);
    out->push_back(kAlphabet[v >> 18]);
    out->push_back(kAlphabet[(v >> 12) & 63]);
    out->push_back(kAlphabet[(v >> 6) & 63]);
    out->push_back(kAlphabet[v & 63]);
  }
  if (i < bytes.size()) {
    const bool two = i + 1 < bytes.size();
    const uint32_t v = (uint32_t(uint8_t(bytes[i])) << 16) |
                       (two ? uint32_t(uint8_t(bytes[i + 1])) << 8 : 0);
    out->push_back(kAlphabet[v >> 18]);
    out->push_back(kAlphabet[(v >> 12) & 63]);
    out->push_back(two ? kAlphabet[(v >> 6) & 63] : '=');
    out->push_back('=');
  }
}

}  // namespace kayak
