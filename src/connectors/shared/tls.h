// The one TLS block every client connector takes (docs/security.md):
//
//   tls: { ca_file, cert_file, key_file, server_name, insecure_skip_verify }
//
// All optional. A connector maps it onto its library's own options (libpq's
// sslmode/sslrootcert/sslcert/sslkey, libmosquitto's mosquitto_tls_set,
// cnats' natsOptions_SetSecure ...). With the block present, or an address
// whose scheme says TLS (mqtts://, tls://, https://), the connection is
// encrypted and the server's certificate verified against `ca_file` (the
// system's store without it) and the name it is reached by (`server_name`
// where that differs), unless `insecure_skip_verify` says otherwise.
#pragma once

#include <string>

#include "kayak/component.h"

namespace kayak {

struct TlsOptions {
  bool enabled = false;  // the block is given (some connectors also turn TLS on by scheme)
  std::string ca_file;   // PEM: the authorities the server's certificate must chain to
  std::string cert_file;  // PEM: a client certificate, for a server that asks for one
  std::string key_file;   // PEM: its private key
  std::string server_name;  // the name the certificate must carry ("" = the host connected to)
  bool insecure_skip_verify = false;  // encrypt, but accept any certificate
};

// The `tls` property row (tuning: a certificate rotated or a CA changed
// keeps the state).
PropDef TlsPropDef();

// Reads `tls`, recording an error on `o` for an unknown key, a value that is
// not a boolean where one is wanted, a certificate without its key (or the
// other way round), or a file that cannot be read.
TlsOptions ReadTlsOptions(const Options& o);

}  // namespace kayak
