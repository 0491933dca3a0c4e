#include "common/host_port.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
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

Status BindSocket(const std::string& listen, int socktype, int flags,
                  const std::function<bool(int fd)>& before_bind, int* fd) {
  std::string host;
  uint16_t port_number = 0;
  if (!ParseHostPort(listen, &host, &port_number)) {
    return Status::Invalid("bad listen address " + listen);
  }
  const std::string port = std::to_string(port_number);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return Status::Invalid("listen " + listen + ": " + ::gai_strerror(rc));
  }
  const int s = ::socket(res->ai_family, socktype | SOCK_CLOEXEC | flags, 0);
  int err = 0;
  if (s < 0) {
    err = errno;
  } else if (!before_bind(s) || ::bind(s, res->ai_addr, res->ai_addrlen) != 0) {
    err = errno;
    ::close(s);
  }
  ::freeaddrinfo(res);
  if (err != 0) return Status::FromErrno("listen on " + listen, err);
  *fd = s;
  return Status::Ok();
}

}  // namespace kayak
