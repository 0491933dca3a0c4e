#include "http/server.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/version.hpp>

#include <atomic>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "core/ingest.h"

namespace kayak::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

void JsonError(Response* res, unsigned status, const std::string& message) {
  res->result(status);
  res->set(bhttp::field::content_type, "application/json");
  res->body() = nlohmann::json{{"error", message}}.dump();
}

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, const ServerLimits& limits, const Handler& handler,
          IngestRouter* ingest, std::atomic<size_t>* live)
      : stream_(std::move(socket)),
        limits_(limits),
        handler_(handler),
        ingest_(ingest),
        live_(live) {}
  ~Session() { live_->fetch_sub(1); }

  void Start() { Read(); }

 private:
  void Read() {
    parser_.emplace();
    parser_->body_limit(limits_.max_body_bytes);
    parser_->header_limit(limits_.max_header_bytes);
    // The first byte of a request may take the idle time; the rest must
    // arrive within the read timeout. Beast has one timer per operation, so
    // the shorter bound applies to the whole request.
    stream_.expires_after(std::chrono::milliseconds(
        first_request_ ? limits_.read_timeout_ms
                       : std::min(limits_.idle_timeout_ms, limits_.read_timeout_ms)));
    bhttp::async_read(stream_, buffer_, *parser_,
                      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    if (ec == bhttp::error::end_of_stream || ec == asio::error::connection_reset ||
        ec == beast::error::timeout || ec == asio::error::operation_aborted) {
      Close();
      return;
    }
    first_request_ = false;
    res_ = {};
    res_.version(11);
    res_.set(bhttp::field::server, "kayak");
    if (ec == bhttp::error::body_limit) {
      JsonError(&res_, 413, "the body is larger than limits.max_body_bytes (" +
                                std::to_string(limits_.max_body_bytes) + " bytes)");
      keep_alive_ = false;
    } else if (ec == bhttp::error::header_limit) {
      JsonError(&res_, 431, "the request headers are too large");
      keep_alive_ = false;
    } else if (ec) {
      JsonError(&res_, 400, "bad request: " + ec.message());
      keep_alive_ = false;
    } else {
      const Request& req = parser_->get();
      keep_alive_ = req.keep_alive();
      res_.version(req.version());
      if (Ingest(req)) return;  // answered when the input has logged the post
      try {
        handler_(req, &res_);
      } catch (const std::exception& e) {
        KLOG_ERROR("http: handler failed on {}: {}", std::string(req.target()), e.what());
        res_ = {};
        res_.version(req.version());
        JsonError(&res_, 500, "internal error");
      }
    }
    Send();
  }

  // A request for an http input's path: handed to the input, which answers
  // through a callback from whichever thread logged it.
  bool Ingest(const Request& req) {
    if (ingest_ == nullptr) return false;
    const std::string_view target(req.target().data(), req.target().size());
    auto endpoint = ingest_->Find(target.substr(0, target.find('?')));
    if (!endpoint) return false;
    version_ = req.version();
    if (req.method() != bhttp::verb::post) {
      JsonError(&res_, 405, "an http input takes POST");
      res_.set(bhttp::field::allow, "POST");
      Send();
      return true;
    }
    const auto auth = req[bhttp::field::authorization];
    // An input that replies inside Post (no state dir) is answered at once;
    // a reply from the log's writer thread goes through the strand.
    posting_thread_.store(std::this_thread::get_id());
    endpoint->Post(req.body(), std::string_view(auth.data(), auth.size()),
                   [self = shared_from_this()](IngestReply reply) {
                     if (self->posting_thread_.load() == std::this_thread::get_id()) {
                       self->Answer(std::move(reply));
                       return;
                     }
                     asio::post(self->stream_.get_executor(),
                                [self, reply = std::move(reply)]() mutable {
                                  self->Answer(std::move(reply));
                                });
                   });
    posting_thread_.store(std::thread::id());
    return true;
  }

  // Ingest answers are the hot path: written from one pre-sized string
  // rather than through Beast's generic serializer (docs/benchmarks.md).
  void Answer(IngestReply reply) {
    raw_.clear();
    raw_.append("HTTP/1.");
    raw_.push_back(version_ == 10 ? '0' : '1');
    raw_.push_back(' ');
    raw_.append(std::to_string(reply.status));
    raw_.push_back(' ');
    const auto reason = bhttp::obsolete_reason(static_cast<bhttp::status>(reply.status));
    raw_.append(reason.data(), reason.size());
    raw_.append("\r\nServer: kayak\r\nContent-Type: application/json\r\n"
                "X-Content-Type-Options: nosniff\r\n");
    if (reply.retry_after_secs > 0) {
      raw_.append("Retry-After: " + std::to_string(reply.retry_after_secs) + "\r\n");
    }
    if (!keep_alive_) {
      raw_.append("Connection: close\r\n");
    } else if (version_ == 10) {
      raw_.append("Connection: keep-alive\r\n");
    }
    raw_.append("Content-Length: " + std::to_string(reply.body.size()) + "\r\n\r\n");
    raw_.append(reply.body);
    stream_.expires_after(std::chrono::milliseconds(limits_.read_timeout_ms));
    asio::async_write(stream_, asio::buffer(raw_),
                      [self = shared_from_this()](beast::error_code wec, size_t) {
                        if (wec || !self->keep_alive_) {
                          self->Close();
                          return;
                        }
                        self->Read();
                      });
  }

  void Send() {
    res_.keep_alive(keep_alive_);
    res_.set("X-Content-Type-Options", "nosniff");
    res_.set("Content-Security-Policy", "default-src 'self'; script-src 'self' 'unsafe-inline'; "
                                        "style-src 'self' 'unsafe-inline'; frame-ancestors 'none'");
    res_.prepare_payload();
    stream_.expires_after(std::chrono::milliseconds(limits_.read_timeout_ms));
    bhttp::async_write(stream_, res_,
                       [self = shared_from_this()](beast::error_code wec, size_t) {
                         if (wec || !self->keep_alive_) {
                           self->Close();
                           return;
                         }
                         self->Read();
                       });
  }

  void Close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.socket().close(ec);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_{8192};
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  Response res_;
  const ServerLimits& limits_;
  const Handler& handler_;
  IngestRouter* ingest_;
  std::atomic<std::thread::id> posting_thread_{};  // set while Post runs
  std::string raw_;   // an ingest answer being written
  unsigned version_ = 11;
  std::atomic<size_t>* live_;
  bool keep_alive_ = false;
  bool first_request_ = true;
};

}  // namespace

// Parsing, checking posts and answering run on this many threads. Two
// measured slower than one on the 2-core test machine (the load generator,
// the pipeline and the output threads need the other core).
constexpr int kThreads = 1;

struct Server::Impl {
  // Sessions left in `io` refer to the members above it; it must go first.
  ServerLimits limits;
  Handler handler;
  IngestRouter* ingest = nullptr;
  std::atomic<size_t> live{0};
  asio::io_context io{kThreads};
  tcp::acceptor acceptor{io};
  std::vector<std::thread> threads;

  void Accept() {
    // Each connection on its own strand: its handlers never run at once,
    // while different connections use both I/O threads.
    acceptor.async_accept(asio::make_strand(io), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) {
        if (live.load() >= limits.max_connections) {
          KLOG_WARN("http: {} connections open, refusing another", live.load());
          beast::error_code ignored;
          socket.close(ignored);
        } else {
          live.fetch_add(1);
          std::make_shared<Session>(std::move(socket), limits, handler, ingest, &live)->Start();
        }
      }
      Accept();
    });
  }
};

Server::Server(std::string host, uint16_t port, ServerLimits limits, Handler handler)
    : impl_(std::make_unique<Impl>()), host_(std::move(host)), port_(port) {
  impl_->limits = limits;
  impl_->handler = std::move(handler);
}

Server::~Server() { Stop(); }

void Server::SetIngest(IngestRouter* router) { impl_->ingest = router; }

Status Server::Start() {
  beast::error_code ec;
  const auto addr = asio::ip::make_address(host_, ec);
  if (ec) return Status::Invalid("listen: '" + host_ + "' is not an IP address");
  const tcp::endpoint ep(addr, port_);
  auto& acc = impl_->acceptor;
  acc.open(ep.protocol(), ec);
  if (!ec) acc.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acc.bind(ep, ec);
  if (!ec) acc.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status::Io("cannot listen on " + host_ + ":" + std::to_string(port_) + ": " +
                      ec.message());
  }
  bound_port_ = acc.local_endpoint().port();
  impl_->Accept();
  for (int i = 0; i < kThreads; ++i) impl_->threads.emplace_back([this] { impl_->io.run(); });
  return Status::Ok();
}

void Server::Stop() {
  if (!impl_ || impl_->threads.empty()) return;
  asio::post(impl_->io, [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
  });
  impl_->io.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
}

}  // namespace kayak::http
