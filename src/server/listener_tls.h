// The listener's TLS: the server config's `tls` block made into an OpenSSL
// context, and the files' identities, so a rotated certificate is noticed.
#pragma once

#include <boost/asio/ssl/context.hpp>

#include <memory>
#include <string>
#include <vector>

#include "kayak/status.h"

namespace kayak::http {

struct ListenerTls {
  std::string cert_file;       // the server's certificate chain, PEM (leaf first)
  std::string key_file;        // its private key, PEM, unencrypted
  std::string client_ca_file;  // "": no client certificate is asked for; else one is required
  bool enabled() const { return !cert_file.empty(); }
};

// A context for the listener's side of the handshake: TLS 1.2 or later, the
// certificate and its key (checked to match), and with `client_ca_file` a
// client certificate that chains to it required. An error names the file
// and OpenSSL's reason.
Result<std::shared_ptr<boost::asio::ssl::context>> MakeListenerContext(const ListenerTls& tls);

// What identifies the files' current contents without reading them: device,
// inode, size and modification time of each (a Kubernetes secret's symlink
// swap changes the inode). Equal stamps: nothing to reload.
std::vector<long long> StampOf(const ListenerTls& tls);

}  // namespace kayak::http
