// Reads many connections' requests without a system call each (io_uring).
//
// Through Asio a connection's read is a `recv` of its own once epoll says
// the socket has data, and on the virtual machines this runs on a system
// call costs about a microsecond before any work. Here a read is a request
// in a ring: the reads queued while the I/O thread handles one round of
// events go into the kernel in one `io_uring_enter`, the kernel does each
// `recv` when its data arrives, and the I/O thread collects the finished
// ones in a batch when epoll says the ring has completions (its descriptor
// is watched through Asio like a socket). docs/benchmarks.md, "http
// ingest".
//
// The ring is set up with IORING_SETUP_COOP_TASKRUN: the kernel finishes a
// read on the I/O thread's next entry into the kernel, or wakes it if it
// sleeps, rather than interrupting it while it runs (which measured worse
// than epoll and `recv`).
//
// A read's owner is kept alive until its completion has been handed back.
// A read cannot be cancelled from here: shut the socket down (SHUT_RD) and
// the read completes with 0.
//
// Threading: the I/O thread only; the destructor after that thread has
// stopped (the kernel finishes no read for a thread that has exited).
#pragma once

#include <liburing.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/basic_stream_descriptor.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace kayak::http {

class RingReader {
 public:
  // Called on the I/O thread with the read's owner and its result: bytes
  // read, 0 at the end of the stream, or -errno.
  using Done = void (*)(void* owner, int result);
  using Executor = boost::asio::io_context::executor_type;

  explicit RingReader(Executor ex) : ex_(ex), watch_(ex) {}
  RingReader(const RingReader&) = delete;
  RingReader& operator=(const RingReader&) = delete;
  ~RingReader();

  // Sets up the ring at the first call. False when the kernel has no
  // io_uring, refuses it (kernel.io_uring_disabled) or lacks
  // COOP_TASKRUN (before 5.19), or when KAYAK_NO_IO_URING_READS is set:
  // read another way.
  bool Ready();

  // Queues a read of at most `size` bytes from `fd` into `data`, which must
  // stay valid until `done` is called; `owner` is held until then. The read
  // goes into the kernel with the others queued in the same round of
  // handlers. Ready() must be true.
  void Read(int fd, void* data, size_t size, std::shared_ptr<void> owner, Done done);

  // Reads queued or in the kernel, for tests.
  size_t in_flight() const { return slots_.size() - free_.size(); }

  static constexpr unsigned kEntries = 256;

 private:
  struct Slot {
    std::shared_ptr<void> owner;
    Done done = nullptr;
  };
  void Submit();
  // Submits once the handlers queued now have run (they may queue more reads).
  void PostSubmit();
  void Watch();
  void Collect();

  enum State { kUntried, kReady, kUnavailable };
  State state_ = kUntried;
  Executor ex_;
  boost::asio::posix::basic_stream_descriptor<Executor> watch_;  // the ring's descriptor
  io_uring ring_{};
  bool submit_posted_ = false;
  bool refused_ = false;  // the last submission failed (warned once a streak)
  std::vector<Slot> slots_;        // by user_data
  std::vector<uint32_t> free_;     // free slots
  std::vector<std::pair<uint32_t, int>> finished_;  // one batch of completions, reused
};

}  // namespace kayak::http
