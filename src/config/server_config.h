// The server config (--server-config, SPEC section 1). Every key is optional.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/options.h"

namespace kayak {

struct ServerConfig {
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 7070;  // 0 = any free port (the log says which)
  std::string log_level = "info";
  std::string auth_token_file;  // "" = no authentication
  bool auth_none = false;       // `auth: none`: an open admin API on any listen address, said so
  std::vector<std::string> allowed_hosts;  // Host names besides the loopback ones
  int64_t checkpoint_interval_secs = 10;
  int64_t checkpoint_timeout_secs = 60;
  // A graceful stop waits this long for its savepoint, then exits 1 saying
  // which region did not reach it (docs/durability.md).
  int64_t stop_timeout_secs = 30;
  int64_t max_body_bytes = 10 * 1024 * 1024;
  int64_t max_header_bytes = 16 * 1024;
  int64_t read_timeout_secs = 30;
  int64_t idle_timeout_secs = 60;
  int64_t max_connections = 512;
  int64_t header_timeout_secs = 10;
  int64_t max_connections_per_client = 256;
  int64_t max_body_bytes_in_flight = 256ll * 1024 * 1024;
};

// Reads and validates `path`; every error is added to `errors`.
bool LoadServerConfigFile(const std::string& path, ServerConfig* out, ErrorList* errors);
bool LoadServerConfigText(const std::string& text, const std::string& file, ServerConfig* out,
                          ErrorList* errors);

}  // namespace kayak
