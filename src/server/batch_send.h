// Writes many connections' answers in one system call (io_uring).
//
// Through Asio a send is one system call each, and on the virtual machines
// this runs on a system call costs about a microsecond before any work: the
// answers to a batch of posts that one fdatasync acknowledged go out in one
// io_uring_enter instead (docs/benchmarks.md, "Measured design
// choices").
// Each send is non-blocking (MSG_DONTWAIT: a full socket completes at once
// with EAGAIN rather than waiting in the ring), so a batch is done when the
// call returns, and the caller writes what did not fit some other way.
//
// Threading: one thread only, the one that first calls Ready().
#pragma once

#include <liburing.h>

#include <cstddef>
#include <vector>

namespace kayak::http {

class BatchSender {
 public:
  struct Item {
    int fd = -1;
    const char* data = nullptr;
    size_t size = 0;
    int result = 0;  // after Send: the bytes sent, or -errno (-ECANCELED: not sent)
  };

  BatchSender() = default;
  BatchSender(const BatchSender&) = delete;
  BatchSender& operator=(const BatchSender&) = delete;
  ~BatchSender();

  // Sets up the ring at the first call. False when the kernel has no
  // io_uring or refuses it (kernel.io_uring_disabled): send another way.
  bool Ready();

  // Sends each item's bytes on its socket, in one system call for every
  // kEntries items, and sets each item's result. Ready() must be true.
  void Send(std::vector<Item>* items);

  static constexpr unsigned kEntries = 256;

 private:
  enum State { kUntried, kReady, kUnavailable };
  State state_ = kUntried;
  io_uring ring_{};
};

}  // namespace kayak::http
