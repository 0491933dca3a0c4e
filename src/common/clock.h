// Time goes through Clock so tests can move it.
#pragma once

#include <atomic>
#include <cstdint>

namespace kayak {

// Monotonic milliseconds, for deadlines and timeouts.
int64_t MonotonicMs();

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time in milliseconds since the Unix epoch. Thread-safe.
  virtual int64_t NowMs() const = 0;
  // Monotonic milliseconds (intervals, deadlines): the process's steady
  // clock, unless a test moves it. Thread-safe.
  virtual int64_t SteadyMs() const { return MonotonicMs(); }
};

// The real wall clock.
class SystemClock final : public Clock {
 public:
  int64_t NowMs() const override;
  static SystemClock* Get();
};

// A clock that moves only when told to. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t now_ms = 1'700'000'000'000) : now_ms_(now_ms) {}
  int64_t NowMs() const override { return now_ms_.load(); }
  // Moves with AdvanceMs only (a wall clock set back does not move it).
  int64_t SteadyMs() const override { return steady_ms_.load(); }
  void AdvanceMs(int64_t ms) {
    now_ms_ += ms;
    steady_ms_ += ms;
  }
  void SetMs(int64_t ms) { now_ms_ = ms; }

 private:
  std::atomic<int64_t> now_ms_;
  std::atomic<int64_t> steady_ms_{1'000'000};
};

}  // namespace kayak
