// udp: NDJSON datagrams (one JSON value a line, one or more lines a datagram:
// the shape StatsD-style and syslog-style senders use). Read on the pipeline's
// thread with recvmmsg, up to a batch at a time. UDP has no backpressure: when
// the pipeline falls behind, the socket's receive buffer fills and the kernel
// drops what comes past it; the input asks the kernel for that count
// (SO_RXQ_OVFL) and puts it on the card, so a loss is never silent.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/host_port.h"
#include "common/ndjson.h"
#include "kayak/component.h"

namespace kayak {

namespace {

constexpr size_t kDatagramsACall = 64;  // recvmmsg's vector: bounded memory

class UdpInput final : public Input {
 public:
  UdpInput(std::string listen, int64_t batch_size, int64_t max_datagram_bytes,
           int64_t buffer_bytes, const ComponentContext& ctx)
      : listen_(std::move(listen)),
        batch_size_(static_cast<size_t>(batch_size)),
        max_datagram_(static_cast<size_t>(max_datagram_bytes)),
        buffer_bytes_(static_cast<int>(buffer_bytes)),
        clock_(ctx.clock),
        stats_(ctx.stats) {}

  ~UdpInput() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Status Open() override {
    int fd = -1;
    KAYAK_RETURN_IF_ERROR(BindSocket(listen_, SOCK_DGRAM, SOCK_NONBLOCK, [this](int s) {
      // The receive buffer: forced past net.core.rmem_max where the process
      // may (CAP_NET_ADMIN), else as large as the kernel allows.
      if (::setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &buffer_bytes_, sizeof(buffer_bytes_)) != 0) {
        (void)::setsockopt(s, SOL_SOCKET, SO_RCVBUF, &buffer_bytes_, sizeof(buffer_bytes_));
      }
      const int one = 1;
      return ::setsockopt(s, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one)) == 0;
    }, &fd));
    fd_ = fd;
    int actual = 0;
    socklen_t len = sizeof(actual);
    ::getsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &actual, &len);
    receive_buffer_ = actual;
    bufs_.assign(kDatagramsACall, std::string(max_datagram_ + 1, '\0'));
    iov_.resize(kDatagramsACall);
    msgs_.resize(kDatagramsACall);
    controls_.assign(kDatagramsACall * kControlBytes, 0);
    bound_.store(true, std::memory_order_release);
    return Status::Ok();
  }

  Status Read(Batch* out, int64_t wait_ms, bool*) override {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(wait_ms)) <= 0) return Status::Ok();
    const int64_t now = clock_->NowMs();
    size_t taken = 0;
    while (taken < batch_size_) {
      const size_t want = std::min(kDatagramsACall, batch_size_ - taken);
      for (size_t i = 0; i < want; ++i) {
        iov_[i] = {bufs_[i].data(), max_datagram_ + 1};  // one byte more: a truncation shows
        msgs_[i] = {};
        msgs_[i].msg_hdr.msg_iov = &iov_[i];
        msgs_[i].msg_hdr.msg_iovlen = 1;
        msgs_[i].msg_hdr.msg_control = controls_.data() + i * kControlBytes;
        msgs_[i].msg_hdr.msg_controllen = kControlBytes;
      }
      const int n = ::recvmmsg(fd_, msgs_.data(), static_cast<unsigned>(want), MSG_DONTWAIT,
                               nullptr);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
        return Status::Unavailable(std::string("udp input: recvmmsg: ") + std::strerror(errno));
      }
      for (int i = 0; i < n; ++i) {
        CountDrops(msgs_[i].msg_hdr);
        const size_t len = msgs_[i].msg_len;
        if (len > max_datagram_ || (msgs_[i].msg_hdr.msg_flags & MSG_TRUNC) != 0) {
          stats_->RecordError("a datagram longer than max_datagram_bytes (" +
                              std::to_string(max_datagram_) + ") was skipped");
          continue;
        }
        datagrams_.fetch_add(1, std::memory_order_relaxed);
        taken += TakeLines(std::string_view(bufs_[i].data(), len), now, out);
      }
      if (static_cast<size_t>(n) < want) break;
    }
    return Status::Ok();
  }

  // Read by the card from other threads: "listening" only once bound, so a
  // sender that waits for it loses nothing to a socket not there yet.
  std::string Position() const override {
    if (!bound_.load(std::memory_order_acquire)) return "not bound yet to " + listen_;
    return "listening on " + listen_ + " (receive buffer " + std::to_string(receive_buffer_) +
           " bytes), " + std::to_string(datagrams_.load(std::memory_order_relaxed)) +
           " datagrams";
  }

 private:
  static constexpr size_t kControlBytes = CMSG_SPACE(sizeof(uint32_t));

  // The kernel's count of datagrams it dropped on this socket since it was
  // made, as each datagram's ancillary data carries it.
  void CountDrops(const msghdr& h) {
    for (const cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr;
         c = CMSG_NXTHDR(const_cast<msghdr*>(&h), const_cast<cmsghdr*>(c))) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SO_RXQ_OVFL) continue;
      uint32_t dropped = 0;
      std::memcpy(&dropped, CMSG_DATA(c), sizeof(dropped));
      if (dropped > dropped_) {
        stats_->RecordError("the kernel dropped " + std::to_string(dropped - dropped_) +
                                " datagrams: the socket's receive buffer (" +
                                std::to_string(receive_buffer_) +
                                " bytes, buffer_bytes) was full",
                            dropped - dropped_);
        dropped_ = dropped;
      }
    }
  }

  // Each non-empty line of the datagram a message; a line that is not JSON
  // counted and skipped. Returns the messages taken.
  size_t TakeLines(std::string_view data, int64_t now, Batch* out) {
    size_t n = 0;
    while (!data.empty()) {
      const size_t nl = data.find('\n');
      std::string_view line = data.substr(0, nl);
      data.remove_prefix(nl == std::string_view::npos ? data.size() : nl + 1);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty()) continue;
      if (!IsJson(line)) {
        stats_->RecordError("a line that is not JSON was skipped: " +
                            std::string(line.substr(0, 80)));
        continue;
      }
      out->messages.emplace_back(std::string(line), now).MarkJson();
      ++n;
    }
    return n;
  }

  const std::string listen_;
  const size_t batch_size_, max_datagram_;
  const int buffer_bytes_;
  const Clock* clock_;
  ComponentStats* stats_;
  int fd_ = -1;
  int receive_buffer_ = 0;
  uint32_t dropped_ = 0;
  std::atomic<bool> bound_{false};
  std::atomic<uint64_t> datagrams_{0};
  // recvmmsg's buffers, made once at Open and reused by every read.
  std::vector<std::string> bufs_;
  std::vector<iovec> iov_;
  std::vector<mmsghdr> msgs_;
  std::vector<char> controls_;
};

}  // namespace

ComponentDef UdpInputDef() {
  ComponentDef d;
  d.kind = "input";
  d.type = "udp";
  d.help = "NDJSON datagrams sent to `listen`: each non-empty line of a datagram (LF or CR LF) "
           "one message. UDP has no backpressure: when the pipeline falls behind, the socket's "
           "receive buffer (`buffer_bytes`) fills and the kernel drops what comes past it; the "
           "card counts those drops.";
  d.checkpoint = "nothing: a datagram has no acknowledgement a sender could replay from, so "
                 "datagrams in the receive buffer or in the pipeline at a crash are lost";
  d.bad_input = "a line that is not JSON, or a datagram longer than `max_datagram_bytes`, is "
                "skipped and counted on the card; datagrams the kernel dropped for a full "
                "receive buffer are counted on the card when the next datagram arrives (the "
                "kernel's count comes with it)";
  d.props = {
      PropDef{"listen", PropType::kString, true, "", "address and port to listen on, such as "
              "127.0.0.1:8125"}.NonEmpty(),
      PropDef{"batch_size", PropType::kInt, false, "1000", "most messages per batch",
              PropRole::kTuning}.Range(1, 100000),
      PropDef{"max_datagram_bytes", PropType::kInt, false, "65507",
              "longer datagrams are skipped", PropRole::kTuning}.Range(16, 65507).Unit("bytes"),
      PropDef{"buffer_bytes", PropType::kInt, false, "4194304",
              "the socket's receive buffer asked of the kernel (forced past "
              "net.core.rmem_max where the process may)",
              PropRole::kTuning}.Range(4096, 1 << 30).Unit("bytes"),
  };
  // Each datagram comes to one member.
  d.shared_by_members = [](const Options&) { return true; };
  d.make_input = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Input> {
    std::string host;
    uint16_t port = 0;
    if (!ParseHostPort(o.String("listen"), &host, &port)) {
      o.Error("listen", "option 'listen' must be host:port, such as 127.0.0.1:8125");
    }
    if (o.failed()) return nullptr;
    return std::make_unique<UdpInput>(o.String("listen"), o.Int("batch_size"),
                                      o.Int("max_datagram_bytes"), o.Int("buffer_bytes"), ctx);
  };
  return d;
}

}  // namespace kayak
