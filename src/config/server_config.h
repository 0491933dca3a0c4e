// The server config (--server-config, SPEC section 1). Every key is optional.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/defaults.h"
#include "config/options.h"

namespace kayak {

struct ServerConfig {
  std::string listen_host = defaults::kListenHost;
  uint16_t listen_port = defaults::kListenPort;  // 0 = any free port (the log says which)
  std::string log_level = defaults::kLogLevel;
  std::string auth_token_file;  // "" = no authentication
  bool auth_none = false;       // `auth: none`: an open admin API on any listen address, said so
  std::vector<std::string> allowed_hosts;  // Host names besides the loopback ones
  // The listener over TLS (`tls:`): all "" = plain HTTP. With a client CA,
  // every client must present a certificate that chains to it.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  int64_t checkpoint_interval_secs = defaults::kCheckpointIntervalSecs;
  int64_t checkpoint_timeout_secs = defaults::kCheckpointTimeoutSecs;
  // A graceful stop waits this long for its savepoint, then exits 1 saying
  // which region did not reach it (docs/durability.md).
  int64_t stop_timeout_secs = defaults::kStopTimeoutSecs;
  int64_t max_body_bytes = defaults::kMaxBodyBytes;
  int64_t max_header_bytes = defaults::kMaxHeaderBytes;
  int64_t read_timeout_secs = defaults::kReadTimeoutSecs;
  int64_t idle_timeout_secs = defaults::kIdleTimeoutSecs;
  int64_t max_connections = defaults::kMaxConnections;
  int64_t header_timeout_secs = defaults::kHeaderTimeoutSecs;
  int64_t max_connections_per_client = defaults::kMaxConnectionsPerClient;
  int64_t max_body_bytes_in_flight = defaults::kMaxBodyBytesInFlight;
  // The memory budget (`memory_limit_bytes`): what the engine's queues,
  // buffers and state may hold together; 0 = no limit.
  int64_t memory_limit_bytes = 0;
  // `cluster:` (docs/cluster.md): several servers run the graph over the
  // partitions of its kafka inputs. All "" = one server.
  std::string cluster_name;         // the cluster's directory in the store
  std::string cluster_member;       // this server's name: its group.instance.id, a shard's owner
  std::string cluster_store;        // the shared directory every member mounts, or s3://bucket/prefix
  // `cluster.s3` (with an s3:// store): endpoint, region, access_key_id,
  // secret_access_key, session_token, path_style, ca_file; ${ENV} and
  // ${file:...} replaced.
  std::map<std::string, std::string> cluster_s3;
  std::string cluster_partitioner;  // murmur2 or crc32: the producers' partitioner
};

// Reads and validates `path`; every error is added to `errors`.
bool LoadServerConfigFile(const std::string& path, ServerConfig* out, ErrorList* errors);
bool LoadServerConfigText(const std::string& text, const std::string& file, ServerConfig* out,
                          ErrorList* errors);

}  // namespace kayak
