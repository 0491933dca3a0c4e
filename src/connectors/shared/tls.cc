#include "connectors/shared/tls.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kayak {

PropDef TlsPropDef() {
  return PropDef{"tls", PropType::kStringMap, false, "",
                 "encrypt the connection: {ca_file, cert_file, key_file, server_name, "
                 "insecure_skip_verify}, all optional; the server's certificate is verified "
                 "against ca_file (the system's store without it) and its name "
                 "(docs/security.md)",
                 PropRole::kTuning};
}

namespace {

bool Readable(const Options& o, const std::string& key, const std::string& path) {
  if (path.empty()) {
    o.Error("tls", key + " is empty");
    return false;
  }
  if (::access(path.c_str(), R_OK) != 0) {
    o.Error("tls", key + " '" + path + "' cannot be read: " + std::strerror(errno));
    return false;
  }
  return true;
}

}  // namespace

TlsOptions ReadTlsOptions(const Options& o) {
  TlsOptions t;
  if (!o.Has("tls")) return t;
  t.enabled = true;
  for (const auto& [key, value] : o.StringMap("tls")) {
    if (key == "ca_file") {
      if (Readable(o, key, value)) t.ca_file = value;
    } else if (key == "cert_file") {
      if (Readable(o, key, value)) t.cert_file = value;
    } else if (key == "key_file") {
      if (Readable(o, key, value)) t.key_file = value;
    } else if (key == "server_name") {
      t.server_name = value;
    } else if (key == "insecure_skip_verify") {
      if (value == "true") {
        t.insecure_skip_verify = true;
      } else if (value != "false") {
        o.Error("tls", "insecure_skip_verify is true or false, not '" + value + "'");
      }
    } else {
      o.Error("tls", "unknown key '" + key +
                         "' (ca_file, cert_file, key_file, server_name, insecure_skip_verify)");
    }
  }
  if (t.cert_file.empty() != t.key_file.empty()) {
    o.Error("tls", "cert_file and key_file go together: a client certificate needs its key");
  }
  return t;
}

}  // namespace kayak
