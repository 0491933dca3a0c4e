// "host:port" addresses, as the listener and the tcp input take them.
#pragma once

#include <cstdint>
#include <string>

namespace kayak {

// Parses "host:port" ("[::1]:port" for IPv6; port 0 to 65535). False when
// it is not one.
bool ParseHostPort(const std::string& text, std::string* host, uint16_t* port);
// "host" or "host:port" (port 1 to 65535): `port` is left as it is without
// one. False when it is neither.
bool ParseHostMaybePort(const std::string& text, std::string* host, int* port);

}  // namespace kayak
