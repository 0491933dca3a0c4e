// tcp: NDJSON lines from any number of TCP connections (the shape syslog-ng's
// and Fluent Bit's tcp outputs send). One I/O thread accepts and reads with
// poll(); complete lines go into a bounded queue the pipeline reads. When the
// queue is full the thread stops reading the sockets, so the kernel's windows
// fill and the senders slow down: backpressure, never an unbounded buffer.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/host_port.h"
#include "common/log.h"
#include "common/ndjson.h"
#include "kayak/component.h"
#include "kayak/thread_annotations.h"

namespace kayak {

namespace {

constexpr size_t kReadChunk = 64 * 1024;

class TcpInput final : public Input {
 public:
  TcpInput(std::string listen, int64_t batch_size, int64_t max_line_bytes,
           int64_t max_connections, int64_t buffer_bytes, const ComponentContext& ctx)
      : listen_(std::move(listen)),
        batch_size_(static_cast<size_t>(batch_size)),
        max_line_(static_cast<size_t>(max_line_bytes)),
        max_conns_(static_cast<size_t>(max_connections)),
        buffer_bytes_(static_cast<size_t>(buffer_bytes)),
        clock_(ctx.clock),
        stats_(ctx.stats) {}

  ~TcpInput() override {
    stop_ = true;
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    for (auto& c : conns_) ::close(c.fd);
    if (listen_fd_ >= 0) ::close(listen_fd_);
  }

  Status Open() override {
    int fd = -1;
    KAYAK_RETURN_IF_ERROR(BindSocket(listen_, SOCK_STREAM, 0, [](int s) {
      const int one = 1;
      return ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0;
    }, &fd));
    if (::listen(fd, 128) != 0) {
      const int err = errno;
      ::close(fd);
      return Status::FromErrno("listen on " + listen_, err);
    }
    listen_fd_ = fd;
    thread_ = std::thread([this] { Loop(); });
    return Status::Ok();
  }

  Status Read(Batch* out, int64_t wait_ms, bool*) override {
    MutexLock lock(mu_);
    lock.WaitFor(cv_, std::chrono::milliseconds(wait_ms),
                 [&]() KAYAK_REQUIRES(mu_) { return !lines_.empty() || stop_; });
    const int64_t now = clock_->NowMs();
    size_t n = 0;
    while (!lines_.empty() && n < batch_size_) {
      queued_bytes_ -= lines_.front().size();
      out->messages.emplace_back(std::move(lines_.front()), now).MarkJson();  // checked in Take
      lines_.pop_front();
      ++n;
    }
    if (n > 0) cv_.notify_all();  // room for the I/O thread
    return Status::Ok();
  }

  // Without a state directory, a graceful stop: no new connections or
  // lines; what is queued is still read.
  bool StopAccepting() override {
    stop_ = true;
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    return true;
  }

  std::string Position() const override {
    MutexLock lock(mu_);
    return "listening on " + listen_ + ", " + std::to_string(open_conns_) + " connections";
  }

 private:
  struct Conn {
    int fd;
    std::string partial;  // bytes of a line not yet ended
    bool skipping = false;  // inside a line over max_line_bytes
  };

  void Loop() {
    std::vector<pollfd> fds;
    std::vector<char> buf(kReadChunk);
    while (!stop_) {
      {
        // A full queue: read nothing until the pipeline takes some.
        MutexLock lock(mu_);
        while (!stop_ && queued_bytes_ >= buffer_bytes_) lock.Wait(cv_);
        if (stop_) break;
        open_conns_ = conns_.size();
      }
      fds.clear();
      fds.push_back({listen_fd_, POLLIN, 0});
      for (const auto& c : conns_) fds.push_back({c.fd, POLLIN, 0});
      const int ready = ::poll(fds.data(), fds.size(), 100);
      if (ready <= 0) continue;
      for (size_t i = fds.size(); i-- > 1;) {
        if (fds[i].revents == 0) continue;
        if (!ReadConn(&conns_[i - 1], &buf)) {
          ::close(conns_[i - 1].fd);
          conns_.erase(conns_.begin() + static_cast<std::ptrdiff_t>(i - 1));
        }
      }
      if (fds[0].revents & POLLIN) Accept();
    }
  }

  void Accept() {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    if (conns_.size() >= max_conns_) {
      stats_->RecordError("a connection over max_connections (" + std::to_string(max_conns_) +
                          ") was refused");
      ::close(fd);
      return;
    }
    conns_.push_back(Conn{fd, {}, false});
  }

  // False when the connection ended (EOF or an error); a last line without
  // its newline is taken then.
  bool ReadConn(Conn* c, std::vector<char>* buf) {
    const ssize_t n = ::read(c->fd, buf->data(), buf->size());
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (n <= 0) {
      if (!c->partial.empty() && !c->skipping) Take(std::move(c->partial));
      return false;
    }
    std::string_view data(buf->data(), static_cast<size_t>(n));
    while (!data.empty()) {
      const size_t nl = data.find('\n');
      const std::string_view piece = data.substr(0, nl);
      if (!c->skipping) {
        if (c->partial.size() + piece.size() > max_line_) {
          stats_->RecordError("a line longer than max_line_bytes (" + std::to_string(max_line_) +
                              ") was skipped");
          c->partial.clear();
          c->skipping = true;
        } else {
          c->partial.append(piece);
        }
      }
      if (nl == std::string_view::npos) break;
      if (!c->skipping) Take(std::move(c->partial));
      c->partial.clear();
      c->skipping = false;
      data.remove_prefix(nl + 1);
    }
    return true;
  }

  void Take(std::string line) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) return;
    if (!IsJson(line)) {
      stats_->RecordError("a line that is not JSON was skipped: " + line.substr(0, 80));
      return;
    }
    MutexLock lock(mu_);
    queued_bytes_ += line.size();
    lines_.push_back(std::move(line));
    cv_.notify_all();
  }

  const std::string listen_;
  const size_t batch_size_, max_line_, max_conns_, buffer_bytes_;
  const Clock* clock_;
  ComponentStats* stats_;
  int listen_fd_ = -1;
  std::vector<Conn> conns_;  // I/O thread only
  std::thread thread_;
  std::atomic<bool> stop_{false};
  mutable Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> lines_ KAYAK_GUARDED_BY(mu_);
  size_t queued_bytes_ KAYAK_GUARDED_BY(mu_) = 0;
  size_t open_conns_ KAYAK_GUARDED_BY(mu_) = 0;
};

}  // namespace

ComponentDef TcpInputDef() {
  ComponentDef d;
  d.kind = "input";
  d.type = "tcp";
  d.help = "NDJSON lines (one JSON value a line, LF or CR LF) from any number of TCP "
           "connections to `listen`. When the pipeline falls behind it stops reading the "
           "sockets, so senders are slowed by TCP itself.";
  d.checkpoint = "nothing: TCP has no acknowledgement a sender could replay from, so lines in "
                 "flight at a crash (read, not yet through the pipeline) are lost; at most "
                 "`buffer_bytes` of them";
  d.bad_input = "a line that is not JSON, or longer than `max_line_bytes`, is skipped and "
                "counted on the card; a connection over `max_connections` is refused and "
                "counted";
  d.props = {
      PropDef{"listen", PropType::kString, true, "", "address and port to listen on, such as "
              "127.0.0.1:5170"}.NonEmpty(),
      PropDef{"batch_size", PropType::kInt, false, "1000", "most messages per batch",
              PropRole::kTuning}.Range(1, 100000),
      PropDef{"max_line_bytes", PropType::kInt, false, "1048576", "longer lines are skipped",
              PropRole::kTuning}.Range(16, 1 << 26).Unit("bytes"),
      PropDef{"max_connections", PropType::kInt, false, "256", "connections open at once",
              PropRole::kTuning}.Range(1, 10000),
      PropDef{"buffer_bytes", PropType::kInt, false, "8388608",
              "lines read and not yet handed to the pipeline, at most",
              PropRole::kTuning}.Range(4096, 1 << 30).Unit("bytes"),
  };
  // Each connection's lines come to one member.
  d.shared_by_members = [](const Options&) { return true; };
  d.make_input = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Input> {
    std::string host;
    uint16_t port = 0;
    if (!ParseHostPort(o.String("listen"), &host, &port)) {
      o.Error("listen", "option 'listen' must be host:port, such as 127.0.0.1:5170");
    }
    if (o.failed()) return nullptr;
    return std::make_unique<TcpInput>(o.String("listen"), o.Int("batch_size"),
                                      o.Int("max_line_bytes"), o.Int("max_connections"),
                                      o.Int("buffer_bytes"), ctx);
  };
  return d;
}

}  // namespace kayak
