#include "common/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <optional>

namespace kayak {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

Result<HttpUrl> ParseHttpUrl(std::string_view url) {
  constexpr std::string_view kHttp = "http://";
  if (url.substr(0, 8) == "https://") {
    return Status::Invalid("https is not supported: kayak links no TLS library; put a local "
                           "TLS proxy in front or use http://");
  }
  if (url.substr(0, kHttp.size()) != kHttp) return Status::Invalid("must start with http://");
  std::string_view rest = url.substr(kHttp.size());
  const size_t slash = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, slash);
  HttpUrl u;
  u.target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  if (u.target[0] == '?') u.target = "/" + u.target;
  if (authority.find('@') != std::string_view::npos) {
    return Status::Invalid("credentials in the URL are not supported; use headers");
  }
  std::string_view host = authority;
  std::string_view port = "80";
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
  uint64_t body_limit = HttpClient::kDefaultBodyLimit;
  asio::io_context io;
  std::optional<beast::tcp_stream> stream;
  beast::flat_buffer buffer;

  void Drop() {
    if (stream) {
      beast::error_code ec;
      stream->socket().shutdown(tcp::socket::shutdown_both, ec);
      stream->close();
    }
    stream.reset();
    buffer.clear();
  }
};

HttpClient::HttpClient(HttpUrl url, int64_t timeout_ms) : impl_(std::make_unique<Impl>()) {
  impl_->url = std::move(url);
  impl_->timeout_ms = timeout_ms;
}

HttpClient::~HttpClient() { impl_->Drop(); }

void HttpClient::set_body_limit(uint64_t bytes) { impl_->body_limit = bytes; }
uint64_t HttpClient::body_limit() const { return impl_->body_limit; }

Result<HttpResponse> HttpClient::Request(std::string_view method, const HttpHeaders& headers,
                                         std::string body, std::string_view target) {
  Impl& im = *impl_;
  const auto verb = bhttp::string_to_verb(beast::string_view(method.data(), method.size()));
  if (verb == bhttp::verb::unknown) return Status::Invalid("unknown method " + std::string(method));
  const std::string path = target.empty() ? im.url.target : std::string(target);
  bhttp::request<bhttp::string_body> req{verb, path, 11};
  req.set(bhttp::field::host, im.url.host);
  req.set(bhttp::field::user_agent, "kayak");
  for (const auto& [k, v] : headers) req.set(k, v);
  req.body() = std::move(body);
  req.keep_alive(true);
  req.prepare_payload();
  // A kept-alive connection the server closed meanwhile fails the first
  // write: one fresh connection is tried before giving up.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool reused = im.stream.has_value();
    beast::error_code ec;
    if (!im.stream) {
      tcp::resolver resolver(im.io);
      auto endpoints = resolver.resolve(im.url.host, im.url.port, ec);
      if (ec) {
        return Status::Unavailable("cannot resolve " + im.url.host + ": " + ec.message());
      }
      im.stream.emplace(im.io);
      im.stream->expires_after(std::chrono::milliseconds(im.timeout_ms));
      im.stream->async_connect(endpoints, [&](beast::error_code e, const tcp::endpoint&) { ec = e; });
      im.io.restart();
      im.io.run();
      if (ec) {
        im.Drop();
        return Status::Unavailable("cannot connect to " + im.url.host + ":" + im.url.port + ": " +
                                   ec.message());
      }
    }
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(im.body_limit);
    im.stream->expires_after(std::chrono::milliseconds(im.timeout_ms));
    bhttp::async_write(*im.stream, req, [&](beast::error_code e, size_t) {
      ec = e;
      if (!ec) {
        bhttp::async_read(*im.stream, im.buffer, parser,
                          [&](beast::error_code e2, size_t) { ec = e2; });
      }
    });
    im.io.restart();
    im.io.run();
    if (ec == bhttp::error::body_limit) {
      im.Drop();
      return Status::Invalid(std::string(method) + " " + im.url.host + ":" + im.url.port + path +
                             ": the answer is larger than " + std::to_string(im.body_limit) +
                             " bytes");
    }
    if (ec) {
      im.Drop();
      if (reused && ec != beast::error::timeout) continue;
      return Status::Unavailable(std::string(method) + " " + im.url.host + ":" + im.url.port +
                                 path + ": " +
                                 (ec == beast::error::timeout ? "timed out" : ec.message()));
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

}  // namespace kayak
