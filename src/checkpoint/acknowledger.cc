#include "checkpoint/acknowledger.h"

#include <pthread.h>

#include <utility>

namespace kayak {

void Acknowledger::Post(const void* input, std::function<void()> send) {
  {
    MutexLock lock(mu_);
    auto [it, added] = due_.try_emplace(input, std::move(send));
    if (!added) {
      it->second = std::move(send);
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
  std::map<const void*, std::function<void()>> due;
  {
    MutexLock lock(mu_);
    due.swap(due_);
  }
  for (auto& [input, send] : due) send();
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
    std::map<const void*, std::function<void()>> due;
    due.swap(due_);
    lock.Unlock();
    for (auto& [input, send] : due) send();
    lock.Lock();
  }
}

}  // namespace kayak
