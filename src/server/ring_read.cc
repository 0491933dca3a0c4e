#include "server/ring_read.h"

#include <boost/asio/post.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/log.h"

namespace kayak::http {

RingReader::~RingReader() {
  if (state_ != kReady) return;
  // The descriptor is the ring's: Asio forgets it, the ring closes it.
  watch_.release();
  io_uring_queue_exit(&ring_);
  slots_.clear();  // the owners of reads that never finished
}

bool RingReader::Ready() {
  if (state_ != kUntried) return state_ == kReady;
  state_ = kUnavailable;
  if (std::getenv("KAYAK_NO_IO_URING_READS") != nullptr) {
    KLOG_INFO("http: KAYAK_NO_IO_URING_READS is set; requests are read one at a time");
    return false;
  }
  const int rc = io_uring_queue_init(kEntries, &ring_, IORING_SETUP_COOP_TASKRUN);
  if (rc != 0) {
    KLOG_INFO("http: io_uring is not available for reads ({}); requests are read one at a time",
              std::strerror(-rc));
    return false;
  }
  boost::system::error_code ec;
  watch_.assign(ring_.ring_fd, ec);
  if (ec) {
    KLOG_INFO("http: cannot watch the io_uring ({}); requests are read one at a time",
              ec.message());
    io_uring_queue_exit(&ring_);
    return false;
  }
  state_ = kReady;
  Watch();
  return true;
}

void RingReader::Read(int fd, void* data, size_t size, std::shared_ptr<void> owner, Done done) {
  uint32_t slot = 0;
  if (free_.empty()) {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  } else {
    slot = free_.back();
    free_.pop_back();
  }
  slots_[slot] = {std::move(owner), done};
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {  // a full queue of reads not yet submitted: submit them first
    Submit();
    sqe = io_uring_get_sqe(&ring_);
  }
  if (sqe == nullptr) {
    // The kernel refused the queue (EAGAIN, EBUSY): this read fails, which
    // closes its connection (a client sends again).
    Slot s = std::move(slots_[slot]);
    free_.push_back(slot);
    boost::asio::post(ex_, [s = std::move(s)] { s.done(s.owner.get(), -EBUSY); });
    return;
  }
  io_uring_prep_recv(sqe, fd, data, size, 0);
  io_uring_sqe_set_data64(sqe, slot);
  PostSubmit();
}

void RingReader::Submit() {
  if (io_uring_sq_ready(&ring_) == 0) return;
  int rc = 0;
  do {
    rc = io_uring_submit(&ring_);
  } while (rc == -EINTR);
  if (rc >= 0) {
    refused_ = false;
    return;
  }
  // EAGAIN or EBUSY: the kernel is short of memory or of room for
  // completions; what it did not take goes in with the next call.
  if (!refused_) KLOG_WARN("http: io_uring took no reads ({}); trying again", std::strerror(-rc));
  refused_ = true;
  PostSubmit();
}

void RingReader::PostSubmit() {
  if (submit_posted_) return;
  submit_posted_ = true;
  boost::asio::post(ex_, [this] {
    submit_posted_ = false;
    Submit();
  });
}

void RingReader::Watch() {
  watch_.async_wait(boost::asio::posix::descriptor_base::wait_read,
                    [this](const boost::system::error_code& ec) {
                      if (ec) return;  // the server is stopping
                      Collect();
                      Watch();
                    });
}

void RingReader::Collect() {
  // Take the whole batch off the ring before handing any back: a handler
  // queues its connection's next read.
  finished_.clear();
  for (;;) {
    unsigned head = 0;
    unsigned seen = 0;
    io_uring_cqe* cqe = nullptr;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      finished_.emplace_back(static_cast<uint32_t>(io_uring_cqe_get_data64(cqe)), cqe->res);
      ++seen;
    }
    io_uring_cq_advance(&ring_, seen);
    // More reads finished than the completion queue holds (more
    // connections than its 512 places): the kernel kept the rest aside.
    if (!io_uring_cq_has_overflow(&ring_)) break;
    if (io_uring_get_events(&ring_) < 0 && seen == 0) break;
  }
  for (const auto& [slot, result] : finished_) {
    Slot s = std::move(slots_[slot]);
    free_.push_back(slot);
    s.done(s.owner.get(), result);
  }
  Submit();
}

}  // namespace kayak::http
