#include "server/batch_send.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace kayak::http {

BatchSender::~BatchSender() {
  if (state_ == kReady) io_uring_queue_exit(&ring_);
}

bool BatchSender::Ready() {
  if (state_ == kUntried) {
    const int rc = io_uring_queue_init(kEntries, &ring_, 0);
    state_ = rc == 0 ? kReady : kUnavailable;
    if (rc != 0) {
      KLOG_INFO("http: io_uring is not available ({}); answers are written one at a time",
                std::strerror(-rc));
    }
  }
  return state_ == kReady;
}

void BatchSender::Send(std::vector<Item>* items) {
  for (Item& it : *items) it.result = -ECANCELED;  // until a completion says otherwise
  for (size_t start = 0; start < items->size(); start += kEntries) {
    const size_t end = std::min<size_t>(items->size(), start + kEntries);
    unsigned queued = 0;
    for (size_t i = start; i < end; ++i) {
      Item& it = (*items)[i];
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) break;  // cannot happen: the ring is empty between calls
      io_uring_prep_send(sqe, it.fd, it.data, it.size, MSG_DONTWAIT | MSG_NOSIGNAL);
      io_uring_sqe_set_data64(sqe, i);
      ++queued;
    }
    int rc = 0;
    do {
      rc = io_uring_submit_and_wait(&ring_, queued);
    } while (rc == -EINTR);
    if (rc < 0 || static_cast<unsigned>(rc) < queued) {
      // Sends the ring did not take keep -ECANCELED; the ring is not used
      // again (what it did not take would go out with a later batch).
      KLOG_WARN("http: io_uring took {} of {} answers ({}); answers are written one at a time "
                "from now on",
                rc < 0 ? 0 : rc, queued, rc < 0 ? std::strerror(-rc) : "no error");
      state_ = kUnavailable;
      queued = rc < 0 ? 0 : static_cast<unsigned>(rc);
    }
    // Every send completes within the call (none waits for room), so these
    // waits return at once.
    for (unsigned seen = 0; seen < queued; ++seen) {
      io_uring_cqe* cqe = nullptr;
      int w = 0;
      do {
        w = io_uring_wait_cqe(&ring_, &cqe);
      } while (w == -EINTR);
      if (w != 0) {
        // Whether those sends went out is unknown: their connections are
        // closed (an answer must not go out twice).
        KLOG_WARN("http: io_uring completion lost ({}); answers are written one at a time "
                  "from now on", std::strerror(-w));
        for (size_t i = start; i < end; ++i) {
          if ((*items)[i].result == -ECANCELED) (*items)[i].result = -EIO;
        }
        state_ = kUnavailable;
        return;
      }
      (*items)[io_uring_cqe_get_data64(cqe)].result = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
    }
    if (state_ != kReady) return;
  }
}

}  // namespace kayak::http
