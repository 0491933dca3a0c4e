#include "connectors/shared/tls_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <optional>
#include <thread>

namespace kayak {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

Result<std::unique_ptr<asio::ssl::context>> MakeTlsClientContext(const TlsOptions& tls) {
  auto ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
  boost::system::error_code ec;
  ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                       asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                       asio::ssl::context::no_tlsv1_1,
                   ec);
  if (tls.ca_file.empty()) {
    ctx->set_default_verify_paths(ec);
  } else {
    ctx->load_verify_file(tls.ca_file, ec);
  }
  if (ec) return Status::Invalid("tls: the CA cannot be loaded: " + ec.message());
  if (!tls.cert_file.empty()) {
    ctx->use_certificate_chain_file(tls.cert_file, ec);
    if (!ec) ctx->use_private_key_file(tls.key_file, asio::ssl::context::pem, ec);
    if (ec) {
      return Status::Invalid("tls: the client certificate cannot be loaded: " + ec.message());
    }
  }
  ctx->set_verify_mode(tls.insecure_skip_verify ? asio::ssl::verify_none : asio::ssl::verify_peer,
                       ec);
  return ctx;
}

void PrepareTlsClient(SSL* ssl, const TlsOptions& tls, const std::string& host) {
  const std::string& name = tls.server_name.empty() ? host : tls.server_name;
  boost::system::error_code ec;
  const bool address = !asio::ip::make_address(name, ec).is_unspecified() && !ec;
  if (!address) SSL_set_tlsext_host_name(ssl, name.c_str());
  if (tls.insecure_skip_verify) return;
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  if (address) {
    X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str());
  } else {
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    X509_VERIFY_PARAM_set1_host(param, name.c_str(), name.size());
  }
}

std::string HandshakeFailure(SSL* ssl, const boost::system::error_code& ec) {
  std::string why = ec.message();
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) {
    why += std::string(": ") + X509_verify_cert_error_string(verify);
  }
  return why;
}

std::string ClientCertificateHint(const TlsOptions& tls) {
  if (!tls.cert_file.empty()) return "";
  return " (the server closed the TLS connection; a server that requires a client certificate "
         "does so: tls.cert_file)";
}

struct TlsTunnel::Impl {
  asio::io_context io{1};
  std::unique_ptr<asio::ssl::context> ctx;
  std::optional<asio::ssl::stream<tcp::socket>> tls;
  std::optional<asio::local::stream_protocol::socket> inner;  // the tunnel's end of the pair
  int outer = -1;                                             // the library's end
  std::array<char, 16 * 1024> up{};    // from the library, on its way to the server
  std::array<char, 64 * 1024> down{};  // from the server, on its way to the library
  bool shut = false;
  std::thread thread;

  // Runs the io_context until `done` or `timeout_ms`; false on the timeout
  // (the pending operation then cancelled and run to its end).
  bool RunUntil(const bool& done, int timeout_ms) {
    io.restart();
    io.run_for(std::chrono::milliseconds(timeout_ms));
    if (done) return true;
    boost::system::error_code ignored;
    tls->lowest_layer().close(ignored);
    io.restart();
    io.run();
    return false;
  }

  void ReadInner() {
    inner->async_read_some(asio::buffer(up), [this](boost::system::error_code ec, size_t n) {
      if (ec) return Shut();
      asio::async_write(*tls, asio::buffer(up.data(), n),
                        [this](boost::system::error_code wec, size_t) {
                          if (wec) return Shut();
                          ReadInner();
                        });
    });
  }
  void ReadTls() {
    tls->async_read_some(asio::buffer(down), [this](boost::system::error_code ec, size_t n) {
      if (ec) return Shut();
      asio::async_write(*inner, asio::buffer(down.data(), n),
                        [this](boost::system::error_code wec, size_t) {
                          if (wec) return Shut();
                          ReadTls();
                        });
    });
  }
  // Either side ended: both do, so the library sees its connection close.
  void Shut() {
    if (shut) return;
    shut = true;
    boost::system::error_code ignored;
    inner->shutdown(asio::socket_base::shutdown_both, ignored);
    inner->close(ignored);
    tls->lowest_layer().shutdown(asio::socket_base::shutdown_both, ignored);
    tls->lowest_layer().close(ignored);
  }
};

TlsTunnel::TlsTunnel() : impl_(std::make_unique<Impl>()) {}

TlsTunnel::~TlsTunnel() {
  if (impl_->thread.joinable()) {
    asio::post(impl_->io, [impl = impl_.get()] { impl->Shut(); });
    impl_->thread.join();
  }
  if (impl_->outer >= 0) ::close(impl_->outer);
}

int TlsTunnel::TakeFd() {
  const int fd = impl_->outer;
  impl_->outer = -1;
  return fd;
}

Result<std::unique_ptr<TlsTunnel>> TlsTunnel::Open(const std::string& host, int port,
                                                   const TlsOptions& tls, int timeout_ms) {
  auto ctx = MakeTlsClientContext(tls);
  if (!ctx.ok()) return ctx.status();
  std::unique_ptr<TlsTunnel> t(new TlsTunnel());
  Impl& im = *t->impl_;
  im.ctx = std::move(ctx.value());
  im.tls.emplace(im.io, *im.ctx);
  const std::string where = host + ":" + std::to_string(port);
  boost::system::error_code ec;
  tcp::resolver resolver(im.io);
  auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec) return Status::Unavailable("cannot resolve " + host + ": " + ec.message());
  bool done = false;
  asio::async_connect(im.tls->lowest_layer(), endpoints,
                      [&](boost::system::error_code e, const tcp::endpoint&) {
                        ec = e;
                        done = true;
                      });
  if (!im.RunUntil(done, timeout_ms)) {
    return Status::Unavailable("cannot connect to " + where + ": timed out");
  }
  if (ec) return Status::Unavailable("cannot connect to " + where + ": " + ec.message());
  im.tls->lowest_layer().set_option(asio::socket_base::keep_alive(true), ec);
  // As hiredis does for its own sockets: a request is one small write, and
  // Nagle's algorithm would hold it for the server's delayed ACK (40 ms a
  // round trip: a measured 14x loss on the redis stream benchmark).
  im.tls->lowest_layer().set_option(tcp::no_delay(true), ec);
  PrepareTlsClient(im.tls->native_handle(), tls, host);
  done = false;
  im.tls->async_handshake(asio::ssl::stream_base::client, [&](boost::system::error_code e) {
    ec = e;
    done = true;
  });
  if (!im.RunUntil(done, timeout_ms)) {
    return Status::Unavailable("TLS handshake with " + where + " timed out");
  }
  if (ec) {
    return Status::Unavailable("TLS handshake with " + where +
                               " failed: " + HandshakeFailure(im.tls->native_handle(), ec));
  }
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return Status::Io("socketpair: " + std::string(std::strerror(errno)));
  }
  im.inner.emplace(im.io, asio::local::stream_protocol(), fds[0]);
  im.outer = fds[1];
  im.io.restart();
  im.ReadInner();
  im.ReadTls();
  im.thread = std::thread([&im] {
    pthread_setname_np(pthread_self(), "kayak-tls");
    im.io.run();
  });
  return t;
}

}  // namespace kayak
