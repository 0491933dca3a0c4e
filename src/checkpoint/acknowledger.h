// Tells inputs that a checkpoint covering their position is durable, on a
// thread of its own: an acknowledgement goes to a server (XACK, a kafka
// commit, a JetStream ack) and may wait on it, and it must not hold the
// checkpoint coordinator's lock meanwhile, nor the API calls and the other
// regions that need that lock.
//
// Bounded: one acknowledgement waits per input, the newest (a later
// checkpoint's position covers every earlier one, Input::Committed); an
// older one not yet sent is replaced. Each call is bounded by the
// connector's own request timeout.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include "kayak/thread_annotations.h"

namespace kayak {

class Acknowledger {
 public:
  Acknowledger() = default;
  ~Acknowledger() { Stop(); }
  Acknowledger(const Acknowledger&) = delete;
  Acknowledger& operator=(const Acknowledger&) = delete;

  // Queues `send` for `input` (any key naming it), replacing one queued and
  // not yet run, to run once `delay_ms` passed (a retry: the thread serves
  // the other inputs meanwhile; a stop runs it at once). Before Start it
  // waits for it.
  void Post(const void* input, std::function<void()> send, int64_t delay_ms = 0);
  void Start();
  // Runs what is queued, then ends the thread. Idempotent.
  void Stop();

  // Acknowledgements replaced by a newer one before they ran.
  uint64_t superseded() const;

 private:
  void Run();

  struct Due {
    std::function<void()> send;
    std::chrono::steady_clock::time_point at;  // not before
  };

  mutable Mutex mu_;
  std::condition_variable cv_;
  std::map<const void*, Due> due_ KAYAK_GUARDED_BY(mu_);  // one per input
  uint64_t superseded_ KAYAK_GUARDED_BY(mu_) = 0;
  bool stopping_ KAYAK_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace kayak
