#include "common/clock.h"

#include <chrono>

namespace kayak {

int64_t SystemClock::NowMs() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

SystemClock* SystemClock::Get() {
  // Never destroyed: a thread still running at exit (a fuzzer's graph that
  // lives as long as the process) may read it after static destructors ran.
  static SystemClock* const clock = new SystemClock();
  return clock;
}

int64_t MonotonicMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace kayak
