#include "config/server_config.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/host_port.h"
#include "config/loader.h"
#include "config/yaml_load.h"

namespace kayak {

namespace {

constexpr int64_t kMinMemoryLimitBytes = int64_t{1} << 20;

bool IntOf(const YAML::Node& n, int64_t min, int64_t* out, int64_t max = INT64_MAX) {
  if (!n.IsScalar()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(n.Scalar().c_str(), &end, 10);
  if (n.Scalar().empty() || *end != '\0' || errno != 0 || v < min || v > max) return false;
  *out = v;
  return true;
}

}  // namespace

bool LoadServerConfigText(const std::string& text, const std::string& file, ServerConfig* out,
                          ErrorList* errors) {
  YAML::Node root;
  if (!LoadYamlBounded(text, file, &root, errors)) return false;
  InterpolateEnv(root, file, errors);
  if (root.IsNull() || !root.IsDefined()) return errors->empty();
  if (!root.IsMap()) {
    errors->Add(MarkOf(file, root), "the server config must be a map");
    return false;
  }
  auto err = [&](const YAML::Node& n, const std::string& msg) {
    errors->Add(MarkOf(file, n), msg);
  };
  auto check_keys = [&](const YAML::Node& map, const std::string& where,
                        std::initializer_list<const char*> known) {
    if (!map.IsMap()) {
      err(map, "'" + where + "' must be a map");
      return false;
    }
    std::string list;
    for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    for (const auto& kv : map) {
      bool found = false;
      for (const char* k : known) found = found || kv.first.Scalar() == k;
      if (!found) {
        err(kv.first, "unknown key '" + kv.first.Scalar() + "' in " + where + " (known: " + list +
                          ")");
      }
    }
    return true;
  };
  check_keys(root, "the server config",
             {"listen", "log_level", "auth", "checkpoint", "limits", "stop_timeout_secs",
              "allowed_hosts", "tls", "memory_limit_bytes", "cluster"});
  if (auto n = root["cluster"];
      n.IsDefined() &&
      check_keys(n, "cluster", {"name", "member", "store", "partitioner", "s3"})) {
    struct Field {
      const char* key;
      std::string* field;
      const char* what;
    };
    const Field fields[] = {
        {"name", &out->cluster_name, "the cluster's name (letters, digits, '.', '_', '-')"},
        {"member", &out->cluster_member, "this server's name in the cluster, unique in it"},
        {"store", &out->cluster_store,
         "a directory every member of the cluster mounts, or s3://bucket/prefix"},
        {"partitioner", &out->cluster_partitioner,
         "the producers' partitioner: murmur2 (Java clients, Kafka Streams) or crc32 "
         "(librdkafka's default)"}};
    for (const Field& f : fields) {
      auto v = n[f.key];
      if (!v.IsDefined() || !v.IsScalar() || v.Scalar().empty()) {
        err(v.IsDefined() ? v : n, std::string("cluster.") + f.key + " is required: " + f.what);
        continue;
      }
      *f.field = v.Scalar();
    }
    auto safe = [](const std::string& s) {
      if (s.empty() || s == "." || s == "..") return false;
      for (char c : s) {
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
          return false;
        }
      }
      return true;
    };
    if (!out->cluster_name.empty() && !safe(out->cluster_name)) {
      err(n["name"], "cluster.name may hold only letters, digits, '.', '_' and '-'");
    }
    if (!out->cluster_member.empty() && !safe(out->cluster_member)) {
      err(n["member"], "cluster.member may hold only letters, digits, '.', '_' and '-'");
    }
    const bool in_s3 = out->cluster_store.rfind("s3://", 0) == 0;
    if (auto s3 = n["s3"]; s3.IsDefined()) {
      if (!in_s3) err(s3, "cluster.s3 is for a store in S3 (store: s3://bucket/prefix)");
      if (check_keys(s3, "cluster.s3",
                     {"endpoint", "region", "access_key_id", "secret_access_key", "session_token",
                      "path_style", "ca_file"})) {
        InterpolateEnv(s3, file, errors);
        for (const auto& kv : s3) {
          if (!kv.second.IsScalar() || kv.second.Scalar().empty()) {
            err(kv.second, "cluster.s3." + kv.first.Scalar() + " must be a non-empty string");
            continue;
          }
          out->cluster_s3[kv.first.Scalar()] = kv.second.Scalar();
        }
        if (auto ps = out->cluster_s3.find("path_style");
            ps != out->cluster_s3.end() && ps->second != "true" && ps->second != "false") {
          err(s3["path_style"], "cluster.s3.path_style must be true or false");
        }
      }
    }
    if (in_s3) {
      for (const char* k : {"access_key_id", "secret_access_key"}) {
        if (!out->cluster_s3.count(k)) {
          err(n["s3"].IsDefined() ? n["s3"] : n["store"],
              std::string("cluster.s3.") + k + " is required with a store in S3 (as ${ENV})");
        }
      }
    } else if (!out->cluster_store.empty() && out->cluster_store.find("://") != std::string::npos) {
      err(n["store"], "cluster.store is a directory or s3://bucket/prefix");
    }
    if (!out->cluster_partitioner.empty() && out->cluster_partitioner != "murmur2" &&
        out->cluster_partitioner != "crc32") {
      err(n["partitioner"], "cluster.partitioner must be murmur2 (Java clients, Kafka Streams) "
                            "or crc32 (librdkafka's default)");
    }
  }
  if (auto v = root["memory_limit_bytes"];
      v.IsDefined() && !IntOf(v, kMinMemoryLimitBytes, &out->memory_limit_bytes)) {
    err(v, "memory_limit_bytes must be a whole number of bytes >= " +
               std::to_string(kMinMemoryLimitBytes) + " (1 MiB)");
  }
  if (auto n = root["tls"];
      n.IsDefined() && check_keys(n, "tls", {"cert_file", "key_file", "client_ca_file"})) {
    struct File {
      const char* key;
      std::string* field;
    };
    const File files[] = {{"cert_file", &out->tls_cert_file},
                          {"key_file", &out->tls_key_file},
                          {"client_ca_file", &out->tls_client_ca_file}};
    for (const File& f : files) {
      auto v = n[f.key];
      if (!v.IsDefined()) continue;
      if (!v.IsScalar() || v.Scalar().empty()) {
        err(v, std::string("tls.") + f.key + " must be a path");
        continue;
      }
      *f.field = v.Scalar();
    }
    if (out->tls_cert_file.empty() || out->tls_key_file.empty()) {
      err(n, "tls needs cert_file and key_file (the listener's certificate and its key)");
    }
  }
  if (auto n = root["allowed_hosts"]; n.IsDefined()) {
    if (!n.IsSequence()) {
      err(n, "allowed_hosts must be a list of host names");
    } else {
      for (const auto& h : n) {
        if (!h.IsScalar() || h.Scalar().empty()) {
          err(h, "allowed_hosts must be a list of host names");
          continue;
        }
        out->allowed_hosts.push_back(h.Scalar());
      }
    }
  }
  if (auto v = root["stop_timeout_secs"];
      v.IsDefined() && !IntOf(v, 1, &out->stop_timeout_secs, 86400)) {
    err(v, "stop_timeout_secs must be a whole number of seconds from 1 to 86400");
  }
  if (auto n = root["listen"]; n.IsDefined()) {
    if (!n.IsScalar() || !ParseHostPort(n.Scalar(), &out->listen_host, &out->listen_port)) {
      err(n, "listen must be host:port, for example 127.0.0.1:7070");
    }
  }
  if (auto n = root["log_level"]; n.IsDefined()) {
    const std::string v = n.IsScalar() ? n.Scalar() : "";
    if (v != "trace" && v != "debug" && v != "info" && v != "warn" && v != "error") {
      err(n, "log_level must be one of trace, debug, info, warn, error");
    } else {
      out->log_level = v;
    }
  }
  if (auto n = root["auth"]; n.IsDefined() && n.IsScalar() && n.Scalar() == "none") {
    out->auth_none = true;
  } else if (n.IsDefined() && check_keys(n, "auth", {"token_file"})) {
    if (auto t = n["token_file"]; t.IsDefined()) {
      if (!t.IsScalar() || t.Scalar().empty()) {
        err(t, "auth.token_file must be a path");
      } else {
        out->auth_token_file = t.Scalar();
      }
    }
  }
  if (auto n = root["checkpoint"];
      n.IsDefined() && check_keys(n, "checkpoint", {"interval_secs", "timeout_secs"})) {
    if (auto v = n["interval_secs"]; v.IsDefined() && !IntOf(v, 1, &out->checkpoint_interval_secs)) {
      err(v, "checkpoint.interval_secs must be a whole number of seconds >= 1");
    }
    if (auto v = n["timeout_secs"]; v.IsDefined() && !IntOf(v, 1, &out->checkpoint_timeout_secs)) {
      err(v, "checkpoint.timeout_secs must be a whole number of seconds >= 1");
    }
  }
  if (auto n = root["limits"];
      n.IsDefined() && check_keys(n, "limits", {"max_body_bytes", "max_header_bytes",
                                                "read_timeout_secs", "idle_timeout_secs",
                                                "header_timeout_secs", "max_connections",
                                                "max_connections_per_client",
                                                "max_body_bytes_in_flight"})) {
    // Each limit: its key, its field, its range and the unit its error names.
    struct Limit {
      const char* key;
      int64_t* field;
      int64_t min;
      int64_t max;
      const char* unit;  // "bytes", "seconds", or "" for a count
    };
    const Limit table[] = {
        {"max_body_bytes", &out->max_body_bytes, 1, INT64_MAX, "bytes"},
        {"max_header_bytes", &out->max_header_bytes, 1024, 1 << 20, "bytes"},
        {"read_timeout_secs", &out->read_timeout_secs, 1, 86400, "seconds"},
        {"idle_timeout_secs", &out->idle_timeout_secs, 1, 86400, "seconds"},
        {"header_timeout_secs", &out->header_timeout_secs, 1, 86400, "seconds"},
        {"max_connections", &out->max_connections, 1, 1000000, ""},
        {"max_connections_per_client", &out->max_connections_per_client, 1, 1000000, ""},
        {"max_body_bytes_in_flight", &out->max_body_bytes_in_flight, 1, INT64_MAX, "bytes"},
    };
    for (const Limit& l : table) {
      auto v = n[l.key];
      if (!v.IsDefined() || IntOf(v, l.min, l.field, l.max)) continue;
      const std::string what = *l.unit ? std::string(" of ") + l.unit : std::string();
      err(v, std::string("limits.") + l.key + " must be a whole number" + what +
                 (l.max == INT64_MAX ? " >= " + std::to_string(l.min)
                                     : " from " + std::to_string(l.min) + " to " +
                                           std::to_string(l.max)));
    }
  }
  return errors->empty();
}

bool LoadServerConfigFile(const std::string& path, ServerConfig* out, ErrorList* errors) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    errors->Add(SourceMark{path, 0, 0}, "cannot read the server config file");
    return false;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return LoadServerConfigText(ss.str(), path, out, errors);
}

}  // namespace kayak
