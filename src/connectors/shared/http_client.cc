#include "connectors/shared/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <openssl/ssl.h>

#include <chrono>
#include <optional>
#include <vector>

#include "connectors/shared/tls_client.h"

namespace kayak {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

Result<HttpUrl> ParseHttpUrl(std::string_view url) {
  constexpr std::string_view kHttp = "http://", kHttps = "https://";
  HttpUrl u;
  std::string_view rest;
  if (url.substr(0, kHttps.size()) == kHttps) {
    u.https = true;
    rest = url.substr(kHttps.size());
  } else if (url.substr(0, kHttp.size()) == kHttp) {
    rest = url.substr(kHttp.size());
  } else {
    return Status::Invalid("must start with http:// or https://");
  }
  const size_t slash = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, slash);
  u.target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  if (u.target[0] == '?') u.target = "/" + u.target;
  if (authority.find('@') != std::string_view::npos) {
    return Status::Invalid("credentials in the URL are not supported; use headers");
  }
  std::string_view host = authority;
  std::string_view port = u.https ? "443" : "80";
  if (!authority.empty() && authority[0] == '[') {  // [v6]:port
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return Status::Invalid("unterminated [ in the host");
    host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return Status::Invalid("bad port");
      port = authority.substr(close + 2);
    }
  } else if (const size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (host.empty()) return Status::Invalid("the URL has no host");
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string_view::npos || std::stoi(std::string(port)) > 65535) {
    return Status::Invalid("bad port '" + std::string(port) + "'");
  }
  u.host = std::string(host);
  u.port = std::string(port);
  return u;
}

struct HttpClient::Impl {
  HttpUrl url;
  int64_t timeout_ms;
  TlsOptions tls;
  asio::io_context io;
  // Plain: `stream`; over TLS: `secure` (its lowest layer the connection).
  std::optional<beast::tcp_stream> stream;
  std::unique_ptr<asio::ssl::context> ssl;  // made once, for every connection
  std::string ssl_error;                     // what made it fail
  std::optional<beast::ssl_stream<beast::tcp_stream>> secure;
  beast::flat_buffer buffer;
  // The answer being streamed (StartStream), when there is one.
  std::optional<bhttp::response_parser<bhttp::buffer_body>> streaming;
  std::vector<char> piece;  // what one read of a streamed answer lands in

  bool connected() const { return stream.has_value() || secure.has_value(); }
  beast::tcp_stream& lowest() { return secure ? beast::get_lowest_layer(*secure) : *stream; }
  // Runs `f` with the stream requests go over.
  template <typename F>
  void With(F&& f) {
    if (secure) {
      f(*secure);
    } else {
      f(*stream);
    }
  }

  // The TLS context, once: "" or what is wrong with the block's files.
  std::string MakeContext() {
    if (ssl || !ssl_error.empty()) return ssl_error;
    auto ctx = MakeTlsClientContext(tls);
    if (!ctx.ok()) return ssl_error = ctx.status().message();
    ssl = std::move(ctx.value());
    return "";
  }

  // Connects if not connected: "" or what failed.
  std::string Connect() {
    if (connected()) return "";
    const bool over_tls = url.https || tls.enabled;
    if (over_tls) {
      if (std::string err = MakeContext(); !err.empty()) return err;
    }
    beast::error_code ec;
    tcp::resolver resolver(io);
    auto endpoints = resolver.resolve(url.host, url.port, ec);
    if (ec) return "cannot resolve " + url.host + ": " + ec.message();
    if (over_tls) {
      secure.emplace(io, *ssl);
    } else {
      stream.emplace(io);
    }
    lowest().expires_after(std::chrono::milliseconds(timeout_ms));
    lowest().async_connect(endpoints, [&](beast::error_code e, const tcp::endpoint&) { ec = e; });
    io.restart();
    io.run();
    if (ec) {
      Drop();
      return "cannot connect to " + url.host + ":" + url.port + ": " + ec.message();
    }
    if (over_tls) {
      PrepareTlsClient(secure->native_handle(), tls, url.host);
      lowest().expires_after(std::chrono::milliseconds(timeout_ms));
      secure->async_handshake(asio::ssl::stream_base::client, [&](beast::error_code e) { ec = e; });
      io.restart();
      io.run();
      if (ec) {
        std::string why = "TLS handshake with " + url.host + ":" + url.port +
                          " failed: " + HandshakeFailure(secure->native_handle(), ec);
        Drop();
        return why;
      }
    }
    return "";
  }

  // For a request that broke on a TLS connection made without a client
  // certificate: TLS 1.3 ends the client's handshake before the server checks
  // the client, so a refusal arrives as the connection closing.
  std::string Hint() const { return secure ? ClientCertificateHint(tls) : ""; }

  void Drop() {
    streaming.reset();
    if (connected()) {
      beast::error_code ec;
      lowest().socket().shutdown(tcp::socket::shutdown_both, ec);
      lowest().close();
    }
    stream.reset();
    secure.reset();
    buffer.clear();
  }
};

HttpClient::HttpClient(HttpUrl url, int64_t timeout_ms, TlsOptions tls)
    : impl_(std::make_unique<Impl>()) {
  impl_->url = std::move(url);
  impl_->timeout_ms = timeout_ms;
  impl_->tls = std::move(tls);
}

HttpClient::~HttpClient() { impl_->Drop(); }


namespace {

// A request whose body is sent from the caller's bytes, not copied.
using OutRequest = bhttp::request<bhttp::span_body<const char>>;

Result<OutRequest> MakeRequest(const HttpUrl& url, std::string_view method,
                               const HttpHeaders& headers, std::string_view body,
                               const std::string& path) {
  const auto verb = bhttp::string_to_verb(beast::string_view(method.data(), method.size()));
  if (verb == bhttp::verb::unknown) return Status::Invalid("unknown method " + std::string(method));
  OutRequest req{verb, path, 11};
  req.set(bhttp::field::host, url.host);
  req.set(bhttp::field::user_agent, "kayak");
  for (const auto& [k, v] : headers) req.set(k, v);
  req.body() = bhttp::span_body<const char>::value_type(body.data(), body.size());
  req.keep_alive(true);
  req.prepare_payload();
  return req;
}

Status Broken(const HttpUrl& url, std::string_view method, const std::string& path,
              const beast::error_code& ec, const std::string& hint = "") {
  return Status::Unavailable(std::string(method) + " " + url.host + ":" + url.port + path + ": " +
                             (ec == beast::error::timeout ? "timed out" : ec.message()) + hint);
}

}  // namespace

Result<HttpResponse> HttpClient::Request(std::string_view method, const HttpHeaders& headers,
                                         std::string_view body, std::string_view target) {
  Impl& im = *impl_;
  const std::string path = target.empty() ? im.url.target : std::string(target);
  auto made = MakeRequest(im.url, method, headers, body, path);
  if (!made.ok()) return made.status();
  OutRequest& req = *made;
  // A kept-alive connection the server closed meanwhile fails the first
  // write: one fresh connection is tried before giving up.
  if (im.streaming) im.Drop();  // an answer left half read: the connection cannot be reused
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool reused = im.connected();
    beast::error_code ec;
    if (std::string err = im.Connect(); !err.empty()) return Status::Unavailable(err);
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(kBodyLimit);
    im.buffer.reserve(64 << 10);  // room to read more than a few hundred bytes at a time
    im.lowest().expires_after(std::chrono::milliseconds(im.timeout_ms));
    im.With([&](auto& stream) {
      bhttp::async_write(stream, req, [&](beast::error_code e, size_t) {
        ec = e;
        if (!ec) {
          bhttp::async_read(stream, im.buffer, parser,
                            [&](beast::error_code e2, size_t) { ec = e2; });
        }
      });
    });
    im.io.restart();
    im.io.run();
    if (ec == bhttp::error::body_limit) {
      im.Drop();
      return Status::Invalid(std::string(method) + " " + im.url.host + ":" + im.url.port + path +
                             ": the answer is larger than " + std::to_string(kBodyLimit) +
                             " bytes");
    }
    if (ec) {
      const std::string hint = reused ? "" : im.Hint();
      im.Drop();
      if (reused && ec != beast::error::timeout) continue;
      return Broken(im.url, method, path, ec, hint);
    }
    auto res = parser.release();
    HttpResponse out;
    out.status = res.result_int();
    out.retry_after = std::string(res[bhttp::field::retry_after]);
    out.body = std::move(res.body());
    if (!res.keep_alive()) im.Drop();
    return out;
  }
  return Status::Unavailable("connection lost");
}

Result<unsigned> HttpClient::StartStream(std::string_view method, const HttpHeaders& headers,
                                         std::string_view body, std::string_view target) {
  Impl& im = *impl_;
  if (im.streaming) im.Drop();  // an answer left half read: the connection cannot be reused
  const std::string path = target.empty() ? im.url.target : std::string(target);
  auto made = MakeRequest(im.url, method, headers, body, path);
  if (!made.ok()) return made.status();
  OutRequest& req = *made;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool reused = im.connected();
    if (std::string err = im.Connect(); !err.empty()) return Status::Unavailable(err);
    beast::error_code ec;
    im.streaming.emplace();
    im.streaming->body_limit(boost::none);  // read a piece at a time: no limit
    // Beast reads as much as the buffer has room for: without room, a long
    // answer comes in reads of a few hundred bytes.
    im.buffer.reserve(256 << 10);
    im.lowest().expires_after(std::chrono::milliseconds(im.timeout_ms));
    im.With([&](auto& stream) {
      bhttp::async_write(stream, req, [&](beast::error_code e, size_t) {
        ec = e;
        if (!ec) {
          bhttp::async_read_header(stream, im.buffer, *im.streaming,
                                   [&](beast::error_code e2, size_t) { ec = e2; });
        }
      });
    });
    im.io.restart();
    im.io.run();
    if (ec) {
      const std::string hint = reused ? "" : im.Hint();
      im.Drop();
      if (reused && ec != beast::error::timeout) continue;
      return Broken(im.url, method, path, ec, hint);
    }
    return im.streaming->get().result_int();
  }
  return Status::Unavailable("connection lost");
}

Status HttpClient::ReadStream(std::string* out, size_t max, bool* done) {
  Impl& im = *impl_;
  *done = true;
  if (!im.streaming) return Status::Ok();
  if (im.streaming->is_done()) {
    if (!im.streaming->get().keep_alive()) im.Drop();
    im.streaming.reset();
    return Status::Ok();
  }
  if (im.piece.size() < max) im.piece.resize(max);
  auto& body = im.streaming->get().body();
  body.data = im.piece.data();
  body.size = max;
  beast::error_code ec;
  im.lowest().expires_after(std::chrono::milliseconds(im.timeout_ms));
  im.With([&](auto& stream) {
    bhttp::async_read_some(stream, im.buffer, *im.streaming,
                           [&](beast::error_code e, size_t) { ec = e; });
  });
  im.io.restart();
  im.io.run();
  out->append(im.piece.data(), max - body.size);
  if (ec == bhttp::error::need_buffer) ec = {};
  if (ec) {
    im.Drop();
    return Status::Unavailable(im.url.host + ":" + im.url.port + ": the answer broke off: " +
                               (ec == beast::error::timeout ? "timed out" : ec.message()));
  }
  *done = im.streaming->is_done();
  if (*done) {
    if (!im.streaming->get().keep_alive()) im.Drop();
    im.streaming.reset();
  }
  return Status::Ok();
}

void HttpClient::AbandonStream() {
  if (impl_->streaming) impl_->Drop();
}

}  // namespace kayak
