#include "checkpoint/acknowledger.h"

#include <pthread.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace kayak {

void Acknowledger::Post(const void* input, std::function<void()> send, int64_t delay_ms) {
  const auto at = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms);
  {
    MutexLock lock(mu_);
    Due d{std::move(send), at};
    auto [it, added] = due_.try_emplace(input, std::move(d));  // moves only when added
    if (!added) {
      it->second = std::move(d);
      superseded_++;
    }
  }
  cv_.notify_one();
}

void Acknowledger::Start() {
  MutexLock lock(mu_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] { Run(); });
}

void Acknowledger::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) {
    thread_.join();
    return;
  }
  // Never started: what is queued still goes out, here.
  std::map<const void*, Due> due;
  {
    MutexLock lock(mu_);
    due.swap(due_);
  }
  for (auto& [input, d] : due) d.send();
}

uint64_t Acknowledger::superseded() const {
  MutexLock lock(mu_);
  return superseded_;
}

void Acknowledger::Run() {
  pthread_setname_np(pthread_self(), "kayak-ack");
  MutexLock lock(mu_);
  for (;;) {
    while (!stopping_ && due_.empty()) lock.Wait(cv_);
    if (due_.empty()) return;  // stopping, and everything sent
    const auto now = std::chrono::steady_clock::now();
    auto next = std::chrono::steady_clock::time_point::max();
    std::vector<std::function<void()>> ready;
    for (auto it = due_.begin(); it != due_.end();) {
      if (stopping_ || it->second.at <= now) {
        ready.push_back(std::move(it->second.send));
        it = due_.erase(it);
      } else {
        next = std::min(next, it->second.at);
        ++it;
      }
    }
    if (ready.empty()) {
      lock.WaitUntil(cv_, next);  // or a post, or the stop: looked at again
      continue;
    }
    lock.Unlock();
    for (auto& send : ready) send();
    lock.Lock();
  }
}

}  // namespace kayak
