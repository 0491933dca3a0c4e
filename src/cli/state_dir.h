// The state directory: created if missing, checked writable, and locked so
// that one server at a time uses it (SPEC 5.4).
#pragma once

#include <string>

#include "kayak/status.h"

namespace kayak {

class StateDirLock {
 public:
  StateDirLock() = default;
  ~StateDirLock();
  StateDirLock(const StateDirLock&) = delete;
  StateDirLock& operator=(const StateDirLock&) = delete;

  enum class Outcome { kLocked, kHeldByOther, kError };
  // Creates `dir` if needed and takes an exclusive flock on `dir`/LOCK,
  // writing this process's pid into it. On kHeldByOther, `*holder_pid` is
  // the pid written by the holder (0 if unreadable). On kError, `*error`.
  Outcome Acquire(const std::string& dir, long* holder_pid, std::string* error);

 private:
  int fd_ = -1;
};

}  // namespace kayak
