#include "server/listener_tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/stat.h>

namespace kayak::http {

namespace asio = boost::asio;

Result<std::shared_ptr<asio::ssl::context>> MakeListenerContext(const ListenerTls& tls) {
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
  boost::system::error_code ec;
  ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                       asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                       asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use,
                   ec);
  auto fail = [](const std::string& key, const std::string& path,
                 const boost::system::error_code& e) {
    return Status::Invalid("tls." + key + " " + path + ": " + e.message());
  };
  ctx->use_certificate_chain_file(tls.cert_file, ec);
  if (ec) return fail("cert_file", tls.cert_file, ec);
  ctx->use_private_key_file(tls.key_file, asio::ssl::context::pem, ec);
  const bool mismatch = ec && ec.category() == asio::error::get_ssl_category() &&
                        ERR_GET_REASON(static_cast<unsigned long>(ec.value())) ==
                            X509_R_KEY_VALUES_MISMATCH;
  if (ec && !mismatch) return fail("key_file", tls.key_file, ec);
  if (mismatch || SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    return Status::Invalid("tls.key_file " + tls.key_file + " is not the key of tls.cert_file " +
                           tls.cert_file);
  }
  if (!tls.client_ca_file.empty()) {
    ctx->load_verify_file(tls.client_ca_file, ec);
    if (ec) return fail("client_ca_file", tls.client_ca_file, ec);
    // The names the client is told to pick its certificate by.
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(tls.client_ca_file.c_str());
    if (names == nullptr) {
      return Status::Invalid("tls.client_ca_file " + tls.client_ca_file +
                             ": no certificate in it");
    }
    SSL_CTX_set_client_CA_list(ctx->native_handle(), names);
    ctx->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
    // A resumed session of a verified client needs the context named.
    static const unsigned char kSessionContext[] = "kayak";
    SSL_CTX_set_session_id_context(ctx->native_handle(), kSessionContext,
                                   sizeof(kSessionContext) - 1);
  }
  return ctx;
}

std::vector<long long> StampOf(const ListenerTls& tls) {
  std::vector<long long> stamp;
  for (const std::string* path : {&tls.cert_file, &tls.key_file, &tls.client_ca_file}) {
    struct stat st {};
    if (path->empty() || ::stat(path->c_str(), &st) != 0) {
      stamp.insert(stamp.end(), {-1, -1, -1, -1, -1});
      continue;
    }
    stamp.insert(stamp.end(), {static_cast<long long>(st.st_dev),
                               static_cast<long long>(st.st_ino),
                               static_cast<long long>(st.st_size),
                               static_cast<long long>(st.st_mtim.tv_sec),
                               static_cast<long long>(st.st_mtim.tv_nsec)});
  }
  return stamp;
}

}  // namespace kayak::http
