// "host:port" addresses, as the listener and the tcp input take them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "kayak/status.h"

namespace kayak {

// Parses "host:port" ("[::1]:port" for IPv6; port 0 to 65535). False when
// it is not one.
bool ParseHostPort(const std::string& text, std::string* host, uint16_t* port);
// "host" or "host:port" (port 1 to 65535): `port` is left as it is without
// one. False when it is neither.
bool ParseHostMaybePort(const std::string& text, std::string* host, int* port);

// The host of an authority ("host", "host:port", "[v6]", "[v6]:port", or a
// bare IPv6 address), brackets and port taken off; no allocation.
std::string_view HostOfAuthority(std::string_view authority);
// Whether `host` (as HostOfAuthority gives it) is a loopback name:
// 127.0.0.0/8, ::1 or localhost, in any case.
bool IsLoopbackHost(std::string_view host);
// ASCII case-insensitive equality (host names).
bool EqualsIgnoreCase(std::string_view a, std::string_view b);

// A socket of `socktype` (SOCK_STREAM, SOCK_DGRAM) bound to `listen`
// ("host:port", a numeric host), made with SOCK_CLOEXEC and `flags` (such as
// SOCK_NONBLOCK); `before_bind` sets its options. Its descriptor in `*fd`.
Status BindSocket(const std::string& listen, int socktype, int flags,
                  const std::function<bool(int fd)>& before_bind, int* fd);

}  // namespace kayak
