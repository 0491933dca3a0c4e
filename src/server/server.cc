#include "server/server.h"

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/version.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <map>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/host_port.h"
#include "common/json_util.h"
#include "common/log.h"
#include "kayak/ingest.h"
#include "server/batch_send.h"
#include "server/listener_tls.h"
#include "server/ring_read.h"
#include "kayak/thread_annotations.h"

namespace kayak::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

void JsonError(Response* res, unsigned status, const std::string& message) {
  res->result(status);
  res->set(bhttp::field::content_type, "application/json");
  res->body() = DumpJson(nlohmann::json{{"error", message}});
}

namespace {

// One I/O thread runs every connection, so a session's handlers never run
// at once and need no strand; the executor type is concrete so no handler
// goes through asio's type-erased executor (docs/benchmarks.md).
using Executor = asio::io_context::executor_type;
using Socket = asio::basic_stream_socket<tcp, Executor>;
using Acceptor = asio::basic_socket_acceptor<tcp, Executor>;
using Clock = std::chrono::steady_clock;
using Timer = asio::basic_waitable_timer<Clock, asio::wait_traits<Clock>, Executor>;
// A TLS connection: OpenSSL over the session's own socket.
using TlsStream = asio::ssl::stream<Socket&>;

// A request as read off the wire, in storage its connection reuses: once a
// keep-alive connection is warm, reading a request allocates nothing.
struct RequestParts {
  bhttp::verb method = bhttp::verb::unknown;
  std::string method_string;
  std::string target;
  unsigned version = 11;
  // Only the first `field_count` are this request's; the rest keep their
  // capacity for the next request.
  std::vector<std::pair<std::string, std::string>> fields;
  size_t field_count = 0;
  std::string authorization;
  std::string host;
  std::string origin;
  bool has_origin = false;
  std::string body;

  void Clear() {
    method = bhttp::verb::unknown;
    method_string.clear();
    target.clear();
    version = 11;
    field_count = 0;
    authorization.clear();
    host.clear();
    origin.clear();
    has_origin = false;
    body.clear();
  }

  // The admin API's view: a whole Beast request (allocates; not the hot path).
  Request ToRequest() const {
    Request req;
    if (method == bhttp::verb::unknown) {
      req.method_string(method_string);
    } else {
      req.method(method);
    }
    req.target(target);
    req.version(version);
    for (size_t i = 0; i < field_count; ++i) req.insert(fields[i].first, fields[i].second);
    req.body() = body;
    return req;
  }
};

// A warning that may repeat many times a second (a flood of refused
// connections): one line per interval, with how many it stood for.
class RepeatedWarning {
 public:
  explicit RepeatedWarning(const char* what) : what_(what) {}
  void Note(const std::string& detail) {
    MutexLock lock(mu_);
    ++count_;
    const auto now = Clock::now();
    if (now - last_ < std::chrono::seconds(10) && last_ != Clock::time_point()) return;
    KLOG_WARN("http: {} ({} time{} since the last such line): {}", what_, count_,
              count_ == 1 ? "" : "s", detail);
    count_ = 0;
    last_ = now;
  }

 private:
  const char* what_;
  Mutex mu_;
  uint64_t count_ KAYAK_GUARDED_BY(mu_) = 0;
  Clock::time_point last_ KAYAK_GUARDED_BY(mu_);
};

// What every connection shares: the bodies held, connections by address.
// Sessions end on whichever thread lets go of them last, hence the atomics
// and the lock.
struct Shared {
  std::atomic<uint64_t> body_bytes{0};
  Mutex clients_mu;
  std::map<std::string, size_t> clients KAYAK_GUARDED_BY(clients_mu);
  size_t probes KAYAK_GUARDED_BY(clients_mu) = 0;  // connections in probes' places
  RepeatedWarning refused{"connections refused"};
  RepeatedWarning full{"request bodies refused, limits.max_body_bytes_in_flight reached"};
  RepeatedWarning handshakes{"TLS handshakes failed"};
};

// What a session's reader reports back, besides the request.
struct ReadState {
  uint64_t body_held = 0;     // bytes of this request's body counted in Shared
  bool over_budget = false;   // a body would have passed max_body_bytes_in_flight
  bool header_done = false;
  bool body_deadline_set = false;  // the deadline moved to the read timeout's, once
  bool refused_on_header = false;  // answered on the header alone; the body is not read
};

// Asked when a request's header is in, before its body is read: true when it
// is refused on the header alone (the answer is then ready).
using HeaderRefusal = bool (*)(void* owner);

constexpr size_t kKeptBodyCapacity = 64 * 1024;  // a connection keeps this much between requests

// Beast's HTTP/1 parser (limits, chunked bodies, keep-alive rules) feeding
// RequestParts instead of a freshly allocated message. A body is counted as
// it arrives, against the bodies every connection holds.
class RequestReader final : public bhttp::basic_parser<true> {
 public:
  RequestReader(RequestParts* parts, Shared* shared, uint64_t budget, ReadState* state,
                HeaderRefusal refuse, void* owner)
      : parts_(parts),
        shared_(shared),
        budget_(budget),
        state_(state),
        refuse_(refuse),
        owner_(owner) {
    parts_->Clear();
  }

 private:
  void on_request_impl(bhttp::verb method, beast::string_view method_str,
                       beast::string_view target, int version, beast::error_code&) override {
    parts_->method = method;
    parts_->method_string.assign(method_str.data(), method_str.size());
    parts_->target.assign(target.data(), target.size());
    parts_->version = static_cast<unsigned>(version);
  }
  void on_response_impl(int, beast::string_view, int, beast::error_code& ec) override {
    ec = bhttp::error::bad_method;  // never called for a request parser
  }
  void on_field_impl(bhttp::field name, beast::string_view name_str, beast::string_view value,
                     beast::error_code&) override {
    auto& fields = parts_->fields;
    if (parts_->field_count == fields.size()) fields.emplace_back();
    auto& f = fields[parts_->field_count++];
    f.first.assign(name_str.data(), name_str.size());
    f.second.assign(value.data(), value.size());
    if (name == bhttp::field::authorization) {
      parts_->authorization = f.second;
    } else if (name == bhttp::field::host) {
      parts_->host = f.second;
    } else if (name == bhttp::field::origin) {
      parts_->origin = f.second;
      parts_->has_origin = true;
    }
  }
  void on_header_impl(beast::error_code& ec) override {
    state_->header_done = true;
    if (refuse_(owner_)) {
      state_->refused_on_header = true;
      ec = bhttp::error::bad_value;  // stops the parser before the body
    }
  }
  void on_body_init_impl(const boost::optional<std::uint64_t>& length,
                         beast::error_code&) override {
    // What is declared is not yet here: room for a small body only.
    if (length) parts_->body.reserve(std::min<size_t>(*length, kKeptBodyCapacity));
  }
  size_t on_body_impl(beast::string_view body, beast::error_code& ec) override {
    return Take(body, ec);
  }
  void on_chunk_header_impl(std::uint64_t, beast::string_view, beast::error_code&) override {}
  size_t on_chunk_body_impl(std::uint64_t, beast::string_view body,
                            beast::error_code& ec) override {
    return Take(body, ec);
  }
  void on_finish_impl(beast::error_code&) override {}

  size_t Take(beast::string_view body, beast::error_code& ec) {
    const uint64_t before = shared_->body_bytes.fetch_add(body.size());
    if (before + body.size() > budget_) {
      shared_->body_bytes.fetch_sub(body.size());
      state_->over_budget = true;
      ec = bhttp::error::body_limit;
      return 0;
    }
    state_->body_held += body.size();
    parts_->body.append(body.data(), body.size());
    return body.size();
  }

  RequestParts* parts_;
  Shared* shared_;
  uint64_t budget_;
  ReadState* state_;
  HeaderRefusal refuse_;
  void* owner_;
};

constexpr size_t kReadSize = 16 * 1024;
constexpr int kLingerMs = 2000;  // how long an unread body is drained after an early answer

class Session;

// Answers from an input's writer thread, handed to the I/O thread in one
// post per batch rather than one per answer. Holds at most one answer per
// connection (a connection waits for its answer before reading on).
class AnswerQueue {
 public:
  explicit AnswerQueue(Executor ex) : ex_(ex) {}
  // Queues an answer for the I/O thread; inside an IngestAnswerScope it is
  // held until the scope closes, and the scope's answers are queued at once.
  void Push(std::shared_ptr<Session> session, IngestReply reply);

 private:
  using Answers = std::vector<std::pair<std::shared_ptr<Session>, IngestReply>>;
  // What this thread holds for this queue inside a scope.
  Answers& Held();
  void Queue(Answers* answers);
  void Drain();

  Executor ex_;
  Mutex mu_;
  std::vector<std::pair<std::shared_ptr<Session>, IngestReply>> queued_ KAYAK_GUARDED_BY(mu_);
  std::vector<std::pair<std::shared_ptr<Session>, IngestReply>> draining_;  // I/O thread only
  BatchSender sender_;                  // I/O thread only
  std::vector<BatchSender::Item> sends_;  // I/O thread only
  std::vector<Session*> batched_;         // whose answers sends_ holds; I/O thread only
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Socket socket, const ServerLimits& limits, const Handler& handler,
          const AsyncHandler& async, const HeaderCheck& header_check, IngestRouter* ingest,
          AnswerQueue* answers, RingReader* ring, std::atomic<size_t>* live, Shared* shared,
          std::string client, bool probe_only, std::shared_ptr<asio::ssl::context> tls)
      : socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        buffer_(limits.max_header_bytes + 4 * kReadSize),
        limits_(limits),
        handler_(handler),
        async_(async),
        header_check_(header_check),
        ingest_(ingest),
        answers_(answers),
        ring_(ring),
        live_(live),
        shared_(shared),
        client_(std::move(client)),
        probe_only_(probe_only),
        tls_context_(std::move(tls)) {
    // A TLS connection reads and writes through OpenSSL, so neither the ring
    // nor a batched send (both take the descriptor) may touch its socket.
    if (tls_context_) {
      tls_.emplace(socket_, *tls_context_);
      ring_ = nullptr;
    }
  }
  ~Session() {
    ReleaseBody();
    {
      MutexLock lock(shared_->clients_mu);
      auto it = shared_->clients.find(client_);
      if (it != shared_->clients.end() && --it->second == 0) shared_->clients.erase(it);
      if (probe_only_) --shared_->probes;
    }
    live_->fetch_sub(1);
  }

  void Start() {
    beast::error_code ec;
    socket_.non_blocking(true, ec);
    SetDeadline(limits_.read_timeout_ms);  // arms the timer
    if (!tls_) return Read();
    // The handshake is part of the first request's header: it must end
    // within the header timeout.
    SetDeadline(std::min(limits_.header_timeout_ms, limits_.read_timeout_ms));
    tls_->async_handshake(TlsStream::server, [self = shared_from_this()](beast::error_code ec) {
      if (!ec) return self->Read();
      if (self->closed_) return;
      self->shared_->handshakes.Note(self->client_ + ": " + ec.message());
      if (ec.category() == asio::error::get_ssl_category() &&
          ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == SSL_R_HTTP_REQUEST) {
        return self->RefusePlainHttp();
      }
      self->Close();
    });
  }

  // A plain HTTP request on the TLS listener is answered in plain HTTP,
  // so the client is told what to change rather than seeing a reset.
  void RefusePlainHttp() {
    keep_alive_ = false;
    raw_ = "HTTP/1.1 400 Bad Request\r\nServer: kayak\r\nContent-Type: application/json\r\n"
           "Connection: close\r\nContent-Length: ";
    const std::string body = R"({"error":"this listener speaks HTTPS (the server config's tls); )"
                             R"(use https://"})";
    raw_.append(std::to_string(body.size()) + "\r\n\r\n" + body);
    asio::async_write(socket_, asio::buffer(raw_),
                      [self = shared_from_this()](beast::error_code, size_t) { self->Close(); });
  }

  bool tls() const { return tls_.has_value(); }

 private:
  // Timeouts: one timer a connection that wakes at the deadline, which each
  // read and write moves (cheap: no timer operation per request). A
  // connection whose deadline has passed is closed.
  void SetDeadline(int ms) {
    deadline_ = Clock::now() + std::chrono::milliseconds(ms);
    // Only a deadline earlier than the timer's (an idle timeout shorter than
    // the read timeout) needs the timer moved.
    if (deadline_ < armed_at_ && !closed_) Watch();
  }
  void Watch() {
    // While an input holds a post there is no deadline; look again later.
    armed_at_ = deadline_ == Clock::time_point::max()
                    ? Clock::now() + std::chrono::milliseconds(limits_.read_timeout_ms)
                    : deadline_;
    timer_.expires_at(armed_at_);  // a wait already pending ends with operation_aborted
    timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec || self->closed_) return;
      if (Clock::now() >= self->deadline_) {
        self->Close();
        return;
      }
      self->Watch();
    });
  }

  // The last request's body leaves the budget (and a large one's memory
  // goes back).
  void ReleaseBody() {
    if (read_.body_held > 0) shared_->body_bytes.fetch_sub(read_.body_held);
    read_.body_held = 0;
    if (parts_.body.capacity() > kKeptBodyCapacity) std::string().swap(parts_.body);
  }

  void Read() {
    ReleaseBody();
    read_ = ReadState{};
    reader_.emplace(&parts_, shared_, limits_.max_body_bytes_in_flight, &read_,
                    &Session::RefusedOnHeader, this);
    reader_->eager(true);
    reader_->body_limit(limits_.max_body_bytes);
    reader_->header_limit(limits_.max_header_bytes);
    // The first request's header must arrive within the header timeout (a
    // client that sends it a byte at a time is let go); later ones on a
    // kept-alive connection may wait the shorter of the idle and read
    // timeouts to start. Once the header is in, the body has the rest of
    // the read timeout.
    request_started_ = Clock::now();
    SetDeadline(first_request_
                    ? std::min(limits_.header_timeout_ms, limits_.read_timeout_ms)
                    : std::min(limits_.idle_timeout_ms, limits_.read_timeout_ms));
    Parse();
  }

  // Parses what is buffered (a pipelined request may already be there),
  // reading more while the request is incomplete.
  void Parse() {
    while (buffer_.size() > 0) {
      beast::error_code ec;
      const size_t n = reader_->put(buffer_.data(), ec);
      buffer_.consume(n);
      if (read_.header_done && !read_.body_deadline_set) {
        read_.body_deadline_set = true;
        deadline_ = request_started_ + std::chrono::milliseconds(limits_.read_timeout_ms);
      }
      if (ec == bhttp::error::need_more) break;
      if (ec) return OnRequest(ec);
      if (reader_->is_done()) return OnRequest({});
      if (n == 0) break;
    }
    // The parser consumes a body as it comes and bounds the header, so the
    // buffer holds at most a header and one read.
    const size_t room = buffer_.max_size() - buffer_.size();
    if (room == 0) return OnRequest(bhttp::error::header_limit);
    // Through the ring where the kernel has one: no system call of this
    // connection's own (src/server/ring_read.h).
    if (ring_ != nullptr && ring_->Ready()) {
      const auto into = buffer_.prepare(std::min(kReadSize, room));
      reading_in_ring_ = true;
      ring_->Read(socket_.native_handle(), into.data(), into.size(), shared_from_this(),
                  &Session::AfterRingRead);
      return;
    }
    // An async read, not a wait then a read: Asio (1.74's reactor too)
    // tries a read at once only while the last one filled its buffer
    // (try_speculative_), so after an answer, when the last read drained the
    // socket, the read waits in the reactor at no system call of its own.
    // An async_wait re-arms the descriptor with epoll_ctl every time.
    OnStream([&](auto& stream) {
      stream.async_read_some(buffer_.prepare(std::min(kReadSize, room)),
                             [self = shared_from_this()](beast::error_code ec, size_t n) {
                               self->buffer_.commit(n);
                               if (ec) {
                                 // End of stream, a reset, the timer closing it:
                                 // nothing to answer.
                                 self->Close();
                                 return;
                               }
                               self->Parse();
                             });
    });
  }

  static void AfterRingRead(void* owner, int result) {
    auto* self = static_cast<Session*>(owner);
    self->reading_in_ring_ = false;
    if (self->closed_) return;
    if (result <= 0) {
      // End of stream, a reset: nothing to answer.
      self->Close();
      return;
    }
    self->buffer_.commit(static_cast<size_t>(result));
    self->Parse();
  }

  // A fresh response for the Beast path (an ingest answer is written
  // without one).
  void NewResponse(unsigned version) {
    res_ = {};
    res_.version(version);
    res_.set(bhttp::field::server, "kayak");
  }

  void OnRequest(beast::error_code ec) {
    first_request_ = false;
    if (read_.refused_on_header) {
      keep_alive_ = false;  // its body is not read
      return Send();
    }
    if (ec) NewResponse(11);
    if (read_.over_budget) {
      shared_->full.Note("answered 503");
      JsonError(&res_, 503, "the server holds too many request bodies at once "
                            "(limits.max_body_bytes_in_flight); try again");
      res_.set(bhttp::field::retry_after, "1");
      keep_alive_ = false;
    } else if (ec == bhttp::error::body_limit) {
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
      keep_alive_ = reader_->keep_alive() && !probe_only_;
      if (Ingest()) return;  // answered when the input has logged the post
      NewResponse(parts_.version);
      try {
        const Request req = parts_.ToRequest();
        if (Async(req)) return;  // answered when the handler says (a graph change)
        handler_(req, &res_);
      } catch (const std::exception& e) {
        KLOG_ERROR("http: handler failed on {}: {}", parts_.target, e.what());
        res_ = {};
        res_.version(parts_.version);
        JsonError(&res_, 500, "internal error");
      }
    }
    Send();
  }

  static bool RefusedOnHeader(void* owner) { return static_cast<Session*>(owner)->Refuse(); }

  // What can be answered on the header alone is, before the body is read
  // (a client without the token cannot make the server hold its body): a
  // foreign Host or Origin, a probe's place asked for something else, a
  // missing or wrong token, a method an http input does not take.
  bool Refuse() {
    endpoint_.reset();
    if (const std::string why = RefusedOrigin(); !why.empty()) {
      NewResponse(parts_.version);
      JsonError(&res_, 403, why);
      return true;
    }
    if (probe_only_ && !IsProbe()) {
      // A place kept for probes: the listener is full for anything else.
      NewResponse(parts_.version);
      JsonError(&res_, 503, "the listener is full (limits.max_connections); try again");
      res_.set(bhttp::field::retry_after, "1");
      return true;
    }
    const std::string_view target(parts_.target);
    if (ingest_ != nullptr) endpoint_ = ingest_->Find(target.substr(0, target.find('?')));
    if (endpoint_) {
      if (parts_.method != bhttp::verb::post) {
        NewResponse(parts_.version);
        JsonError(&res_, 405, "an http input takes POST");
        res_.set(bhttp::field::allow, "POST");
        endpoint_.reset();
        return true;
      }
      IngestReply refusal;
      if (endpoint_->Admit(parts_.authorization, &refusal)) return false;
      endpoint_.reset();
      NewResponse(parts_.version);
      res_.result(refusal.status);
      res_.set(bhttp::field::content_type, "application/json");
      if (refusal.status == 401) res_.set(bhttp::field::www_authenticate, "Bearer realm=\"kayak\"");
      if (refusal.retry_after_secs > 0) {
        res_.set(bhttp::field::retry_after, std::to_string(refusal.retry_after_secs));
      }
      res_.body() = std::move(refusal.body);
      return true;
    }
    if (!header_check_) return false;
    NewResponse(parts_.version);
    return header_check_(target, parts_.authorization, &res_);
  }

  // Whether `authority` (a Host header's, or an Origin's after its scheme)
  // names this server.
  bool KnownHost(std::string_view authority) const {
    const std::string_view host = HostOfAuthority(authority);
    if (IsLoopbackHost(host)) return true;
    return std::any_of(limits_.allowed_hosts.begin(), limits_.allowed_hosts.end(),
                       [host](const std::string& h) { return EqualsIgnoreCase(h, host); });
  }

  // Why the request is refused for its Host or Origin, or "".
  std::string RefusedOrigin() const {
    if (limits_.loopback_only_hosts && !parts_.host.empty() && !KnownHost(parts_.host)) {
      return "the Host header does not name this server (a loopback address, localhost, or "
             "one of the server config's allowed_hosts)";
    }
    const auto m = parts_.method;
    if (parts_.has_origin && m != bhttp::verb::get && m != bhttp::verb::head &&
        m != bhttp::verb::options) {
      std::string_view o(parts_.origin);
      const size_t scheme = o.find("://");
      if (o == "null" || scheme == std::string_view::npos || !KnownHost(o.substr(scheme + 3))) {
        return "a request from another origin may not change anything here (Origin is not a "
               "loopback address, localhost, or one of the server config's allowed_hosts)";
      }
    }
    return "";
  }

  bool IsProbe() const {
    const std::string_view target(parts_.target);
    const std::string_view path = target.substr(0, target.find('?'));
    return parts_.method == bhttp::verb::get && (path == "/health" || path == "/ready");
  }

  // A request for an http input's path: handed to the input, which answers
  // through a callback from whichever thread logged it.
  bool Ingest() {
    if (!endpoint_) return false;  // looked up on the header
    const std::shared_ptr<IngestEndpoint> endpoint = std::move(endpoint_);
    deadline_ = Clock::time_point::max();
    posting_thread_.store(std::this_thread::get_id());
    endpoint->Post(parts_.body, parts_.authorization, Replier());
    posting_thread_.store(std::thread::id());
    return true;
  }

  // A request the async handler takes is answered from its thread, through
  // the answer queue, like a post.
  bool Async(const Request& req) {
    if (!async_) return false;
    deadline_ = Clock::time_point::max();
    posting_thread_.store(std::this_thread::get_id());
    const bool taken = async_(req, Replier());
    posting_thread_.store(std::thread::id());
    return taken;
  }

  // The callback that answers a request handed to another thread: at once
  // when it is called inside the hand-over (an input without a state dir, a
  // full change queue), else queued for the I/O thread.
  IngestDone Replier() {
    return [self = shared_from_this()](IngestReply reply) mutable {
      if (self->posting_thread_.load() == std::this_thread::get_id()) {
        self->Answer(std::move(reply));
        return;
      }
      AnswerQueue* q = self->answers_;
      q->Push(std::move(self), std::move(reply));
    };
  }

  // Ingest answers are the hot path: written from one pre-sized string
  // rather than through Beast's generic serializer (docs/benchmarks.md).
  friend class AnswerQueue;
  void Answer(IngestReply reply) {
    Format(reply);
    WriteRaw(0);
  }

  // The answer's bytes, in raw_.
  void Format(const IngestReply& reply) {
    raw_.clear();
    raw_.append("HTTP/1.");
    raw_.push_back(parts_.version == 10 ? '0' : '1');
    raw_.push_back(' ');
    raw_.append(std::to_string(reply.status));
    raw_.push_back(' ');
    const auto reason = bhttp::obsolete_reason(static_cast<bhttp::status>(reply.status));
    raw_.append(reason.data(), reason.size());
    raw_.append("\r\nServer: kayak\r\nContent-Type: ");
    raw_.append(reply.content_type.empty() ? "application/json" : reply.content_type);
    raw_.append("\r\nX-Content-Type-Options: nosniff\r\n"
                "Content-Security-Policy: default-src 'none'; frame-ancestors 'none'\r\n");
    if (reply.retry_after_secs > 0) {
      raw_.append("Retry-After: " + std::to_string(reply.retry_after_secs) + "\r\n");
    }
    if (!keep_alive_) {
      raw_.append("Connection: close\r\n");
    } else if (parts_.version == 10) {
      raw_.append("Connection: keep-alive\r\n");
    }
    raw_.append("Content-Length: " + std::to_string(reply.body.size()) + "\r\n\r\n");
    raw_.append(reply.body);
    SetDeadline(limits_.read_timeout_ms);
  }

  // Writes raw_ from `from` on through Asio (waiting for room as needed).
  void WriteRaw(size_t from) {
    OnStream([&](auto& stream) {
      asio::async_write(stream, asio::buffer(raw_.data() + from, raw_.size() - from),
                        [self = shared_from_this()](beast::error_code wec, size_t) {
                          self->AfterWrite(wec);
                        });
    });
  }

  // The socket for a batched send of raw_, or -1 once closed.
  int SendFd() { return closed_ || !socket_.is_open() ? -1 : socket_.native_handle(); }

  // After a batched send of raw_ returned `result` (bytes or -errno): what
  // did not fit, or was not sent (ECANCELED: the ring did not take it), goes
  // through Asio, which waits for room.
  void AfterSend(int result) {
    if (result >= 0 && static_cast<size_t>(result) == raw_.size()) return AfterWrite({});
    if (result >= 0 || result == -EAGAIN || result == -EINTR || result == -ECANCELED) {
      return WriteRaw(result > 0 ? static_cast<size_t>(result) : 0);
    }
    AfterWrite(beast::error_code(-result, beast::system_category()));
  }

  void Send() {
    res_.keep_alive(keep_alive_);
    res_.set("X-Content-Type-Options", "nosniff");
    // The dashboard's page sets its own policy; every other answer is data.
    if (res_.find("Content-Security-Policy") == res_.end()) {
      res_.set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'");
    }
    res_.prepare_payload();
    SetDeadline(limits_.read_timeout_ms);
    OnStream([&](auto& stream) {
      bhttp::async_write(stream, res_, [self = shared_from_this()](beast::error_code wec, size_t) {
        self->AfterWrite(wec);
      });
    });
  }

  void AfterWrite(beast::error_code ec) {
    if (!ec && !keep_alive_ && !reader_->is_done() && read_.header_done) return Linger();
    if (ec || !keep_alive_) {
      Close();
      return;
    }
    Read();
  }

  // Answered before the body was read whole (refused on the header, too
  // large): the client may still be sending it, and closing with its bytes
  // unread would reset the connection and could lose the answer. So the
  // sending side is shut, and what still comes is read and thrown away for a
  // moment (held nowhere) before the close.
  void Linger() {
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    SetDeadline(std::min(kLingerMs, limits_.read_timeout_ms));
    Discard();
  }
  void Discard() {
    buffer_.clear();
    OnStream([&](auto& stream) {
      stream.async_read_some(buffer_.prepare(kReadSize),
                             [self = shared_from_this()](beast::error_code ec, size_t) {
                               if (ec || self->closed_) return self->Close();
                               self->Discard();
                             });
    });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ec;
    // A read in the ring ends (with 0) only when the socket's receiving side
    // is shut down too: closing the descriptor does not end it.
    socket_.shutdown(reading_in_ring_ ? tcp::socket::shutdown_both : tcp::socket::shutdown_send,
                     ec);
    socket_.close(ec);
    timer_.cancel();
  }

  // Calls f with what this connection reads and writes through: OpenSSL's
  // stream over the socket, or the socket itself.
  template <typename F>
  void OnStream(F&& f) {
    if (tls_) {
      f(*tls_);
    } else {
      f(socket_);
    }
  }

  Socket socket_;
  Timer timer_;
  Clock::time_point deadline_;
  Clock::time_point armed_at_ = Clock::time_point::max();  // when the timer wakes
  beast::flat_buffer buffer_;
  RequestParts parts_;
  std::optional<RequestReader> reader_;
  Response res_;
  const ServerLimits& limits_;
  const Handler& handler_;
  const AsyncHandler& async_;
  const HeaderCheck& header_check_;
  IngestRouter* ingest_;
  std::shared_ptr<IngestEndpoint> endpoint_;  // the http input this request is for, if any
  AnswerQueue* answers_;
  RingReader* ring_;  // null: read through Asio
  std::atomic<std::thread::id> posting_thread_{};  // set while Post runs
  std::string raw_;   // an ingest answer being written
  std::atomic<size_t>* live_;
  Shared* shared_;
  const std::string client_;  // the peer's address
  const bool probe_only_;     // in a place kept for probes
  // The listener's TLS context when this connection began (a reload makes a
  // new one for later connections), and the stream over socket_ it made.
  const std::shared_ptr<asio::ssl::context> tls_context_;
  std::optional<TlsStream> tls_;
  ReadState read_;
  Clock::time_point request_started_;
  bool keep_alive_ = false;
  bool first_request_ = true;
  bool closed_ = false;
  bool reading_in_ring_ = false;  // a read of buffer_ is in the ring
};

AnswerQueue::Answers& AnswerQueue::Held() {
  // Per thread, per queue (a process has one listener, tests several).
  thread_local std::vector<std::pair<const AnswerQueue*, Answers>> held;
  for (auto& [queue, answers] : held) {
    if (queue == this) return answers;
  }
  return held.emplace_back(this, Answers()).second;
}

void AnswerQueue::Push(std::shared_ptr<Session> session, IngestReply reply) {
  if (IngestAnswerScope* scope = IngestAnswerScope::Current()) {
    Answers& held = Held();
    held.emplace_back(std::move(session), std::move(reply));
    if (held.size() == 1) scope->AtClose(this, [this] { Queue(&Held()); });
    return;
  }
  Answers one;
  one.emplace_back(std::move(session), std::move(reply));
  Queue(&one);
}

void AnswerQueue::Queue(Answers* answers) {
  if (answers->empty()) return;
  bool first = false;
  {
    MutexLock lock(mu_);
    first = queued_.empty();
    if (first) {
      queued_.swap(*answers);
    } else {
      for (auto& a : *answers) queued_.push_back(std::move(a));
    }
  }
  answers->clear();
  if (first) asio::post(ex_, [this] { Drain(); });
}

void AnswerQueue::Drain() {
  {
    MutexLock lock(mu_);
    draining_.swap(queued_);
  }
  if (draining_.size() < 2 || !sender_.Ready()) {
    for (auto& [session, reply] : draining_) session->Answer(std::move(reply));
    draining_.clear();
    return;
  }
  // Every answer formatted, then all sent in one call, then each connection
  // goes on (reads its next request, or writes the rest through Asio). A
  // TLS connection's answer is encrypted on its way out: written through its
  // stream instead.
  sends_.clear();
  batched_.clear();
  for (auto& [session, reply] : draining_) {
    if (session->tls()) {
      session->Answer(std::move(reply));
      continue;
    }
    session->Format(reply);
    sends_.push_back({session->SendFd(), session->raw_.data(), session->raw_.size(), 0});
    batched_.push_back(session.get());
  }
  sender_.Send(&sends_);
  for (size_t i = 0; i < batched_.size(); ++i) {
    batched_[i]->AfterSend(sends_[i].fd < 0 ? -EBADF : sends_[i].result);
  }
  draining_.clear();
}

}  // namespace

// Parsing, checking posts and answering run on one thread: two measured
// slower on the 2-core test machine (the load generator, the pipeline and
// the output threads need the other core), and with one, sessions need no
// strands.
constexpr int kThreads = 1;

struct Server::Impl {
  // A new connection: refused past the probes' places or past its address's
  // share; in a probe's place once max_connections are open.
  void Admit(Socket socket) {
    beast::error_code ec;
    const auto peer = socket.remote_endpoint(ec);
    const std::string client = ec ? std::string("?") : peer.address().to_string();
    const size_t open = live.load();
    bool probe_only = false;
    std::string why;
    {
      MutexLock lock(shared.clients_mu);
      size_t& mine = shared.clients[client];
      // Past max_connections, or past its address's share: a probe's place.
      probe_only = open >= limits.max_connections || mine >= limits.max_connections_per_client;
      if (probe_only && shared.probes >= kProbePlaces) {
        why = mine >= limits.max_connections_per_client
                  ? client + " holds " + std::to_string(mine) +
                        " connections (limits.max_connections_per_client)"
                  : std::to_string(open) + " connections open (limits.max_connections)";
      } else {
        ++mine;
        if (probe_only) ++shared.probes;
      }
      if (mine == 0) shared.clients.erase(client);
    }
    if (!why.empty()) {
      shared.refused.Note(why);
      beast::error_code ignored;
      socket.close(ignored);
      return;
    }
    live.fetch_add(1);
    std::make_shared<Session>(std::move(socket), limits, handler, async, header_check, ingest,
                              &answers, &ring, &live, &shared, client, probe_only, tls_context)
        ->Start();
  }

  // Makes a new context when a file changed since the last load, or when
  // `force`: later connections use it, open ones keep theirs. A new
  // certificate that does not load leaves the last good one serving.
  // On the I/O thread.
  void ReloadTls(bool force) {
    std::vector<long long> stamp = StampOf(tls);
    if (!force && stamp == tls_stamp) return;
    tls_stamp = std::move(stamp);
    auto ctx = MakeListenerContext(tls);
    if (!ctx.ok()) {
      KLOG_ERROR("http: the listener's certificate was not reloaded, the last one still serves: {}",
                 ctx.status().message());
      return;
    }
    tls_context = std::move(ctx.value());
    KLOG_INFO("http: the listener's certificate was reloaded from {}", tls.cert_file);
  }

  // Looks at the files' stamps once a second (a few stat calls).
  void WatchTls() {
    tls_timer.expires_after(std::chrono::seconds(1));
    tls_timer.async_wait([this](beast::error_code ec) {
      if (ec) return;
      ReloadTls(false);
      WatchTls();
    });
  }

  // Sessions left in `io` refer to the members above it; it must go first.
  ServerLimits limits;
  Handler handler;
  AsyncHandler async;
  HeaderCheck header_check;
  IngestRouter* ingest = nullptr;
  ListenerTls tls;
  std::vector<long long> tls_stamp;                 // the files' when tls_context was made
  std::shared_ptr<asio::ssl::context> tls_context;  // null: plain HTTP; I/O thread only
  std::atomic<size_t> live{0};
  Shared shared;
  asio::io_context io{kThreads};
  Acceptor acceptor{io.get_executor()};
  AnswerQueue answers{io.get_executor()};
  Timer tls_timer{io.get_executor()};
  // After `io`: destroyed first, it lets go of the sessions whose reads it
  // held (they deregister their sockets from `io`).
  RingReader ring{io.get_executor()};
  std::vector<std::thread> threads;

  void Accept() {
    acceptor.async_accept([this](beast::error_code ec, Socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) Admit(std::move(socket));
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

void Server::SetAsyncHandler(AsyncHandler handler) { impl_->async = std::move(handler); }

void Server::SetHeaderCheck(HeaderCheck check) { impl_->header_check = std::move(check); }

void Server::SetTls(ListenerTls tls) { impl_->tls = std::move(tls); }

void Server::ReloadTls() {
  if (!impl_->tls.enabled() || impl_->threads.empty()) return;
  asio::post(impl_->io, [impl = impl_.get()] { impl->ReloadTls(true); });
}

Status Server::Start() {
  beast::error_code ec;
  const auto addr = asio::ip::make_address(host_, ec);
  if (ec) return Status::Invalid("listen: '" + host_ + "' is not an IP address");
  const tcp::endpoint ep(addr, port_);
  if (impl_->tls.enabled()) {
    impl_->tls_stamp = StampOf(impl_->tls);
    auto ctx = MakeListenerContext(impl_->tls);
    if (!ctx.ok()) return ctx.status();
    impl_->tls_context = std::move(ctx.value());
  }
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
  if (impl_->tls.enabled()) impl_->WatchTls();
  for (int i = 0; i < kThreads; ++i) {
    impl_->threads.emplace_back([this] {
      pthread_setname_np(pthread_self(), "kayak-http");  // in top -H and /proc
      impl_->io.run();
    });
  }
  return Status::Ok();
}

void Server::Stop() {
  if (!impl_ || impl_->threads.empty()) return;
  asio::post(impl_->io, [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
    impl_->tls_timer.cancel();
  });
  impl_->io.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
}

}  // namespace kayak::http
