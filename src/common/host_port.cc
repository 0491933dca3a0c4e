#include "common/host_port.h"

#include <cstdlib>

namespace kayak {

bool ParseHostPort(const std::string& text, std::string* host, uint16_t* port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  std::string h = text.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  const std::string p = text.substr(colon + 1);
  char* end = nullptr;
  const long v = std::strtol(p.c_str(), &end, 10);
  if (h.empty() || p.empty() || *end != '\0' || v < 0 || v > 65535) return false;
  *host = h;
  *port = static_cast<uint16_t>(v);
  return true;
}

bool ParseHostMaybePort(const std::string& text, std::string* host, int* port) {
  if (text.find(':') == std::string::npos) {
    if (text.empty()) return false;
    *host = text;
    return true;
  }
  uint16_t p = 0;
  if (!ParseHostPort(text, host, &p) || p == 0) return false;
  *port = p;
  return true;
}

}  // namespace kayak
