#include "common/host_port.h"

#include <arpa/inet.h>

#include <cctype>
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

std::string_view HostOfAuthority(std::string_view a) {
  if (!a.empty() && a.front() == '[') {
    const size_t close = a.find(']');
    return close == std::string_view::npos ? a.substr(1) : a.substr(1, close - 1);
  }
  const size_t colon = a.find(':');
  // One colon: host:port; more: a bare IPv6 address.
  if (colon != std::string_view::npos && a.find(':', colon + 1) == std::string_view::npos) {
    return a.substr(0, colon);
  }
  return a;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

bool IsLoopbackHost(std::string_view host) {
  if (host == "::1" || EqualsIgnoreCase(host, "localhost")) return true;
  // 127.0.0.0/8 as an address: a name such as 127.attacker.example is not one.
  char text[INET_ADDRSTRLEN] = {};
  if (host.substr(0, 4) != "127." || host.size() >= sizeof(text)) return false;
  host.copy(text, host.size());
  in_addr addr{};
  return ::inet_pton(AF_INET, text, &addr) == 1;
}

}  // namespace kayak
