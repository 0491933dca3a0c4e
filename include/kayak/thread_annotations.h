// Which mutex guards which member, said in the code and checked by clang's
// thread-safety analysis (-Wthread-safety): the suite's `lock_annotations`
// test compiles every file that uses these with clang and fails on a
// member read or written without its mutex held (scripts/check-locks.sh).
// Under gcc the annotations are empty and Mutex is a std::mutex.
//
//   Mutex mu_;
//   std::deque<Item> queue_ KAYAK_GUARDED_BY(mu_);
//   void Drain() KAYAK_REQUIRES(mu_);   // called with mu_ held
//   ...
//   MutexLock lock(mu_);                 // holds mu_ to the end of the scope
//   lock.Wait(cv_, [&]() KAYAK_REQUIRES(mu_) { return !queue_.empty(); });
//
// A predicate is a function of its own to the analysis: it says that it
// runs with the mutex held (KAYAK_REQUIRES), and Wait calls it so.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>

#if defined(__clang__)
#define KAYAK_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define KAYAK_THREAD_ANNOTATION(x)
#endif

#define KAYAK_CAPABILITY(x) KAYAK_THREAD_ANNOTATION(capability(x))
#define KAYAK_SCOPED_CAPABILITY KAYAK_THREAD_ANNOTATION(scoped_lockable)
#define KAYAK_GUARDED_BY(x) KAYAK_THREAD_ANNOTATION(guarded_by(x))
#define KAYAK_PT_GUARDED_BY(x) KAYAK_THREAD_ANNOTATION(pt_guarded_by(x))
#define KAYAK_REQUIRES(...) KAYAK_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define KAYAK_EXCLUDES(...) KAYAK_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define KAYAK_ACQUIRE(...) KAYAK_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define KAYAK_RELEASE(...) KAYAK_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define KAYAK_NO_THREAD_SAFETY_ANALYSIS KAYAK_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace kayak {

// A std::mutex the analysis knows.
class KAYAK_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  void lock() KAYAK_ACQUIRE() { mu_.lock(); }
  void unlock() KAYAK_RELEASE() { mu_.unlock(); }

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex from construction to the end of its scope (or Unlock), and
// waits on condition variables with it.
class KAYAK_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) KAYAK_ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() KAYAK_RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() KAYAK_RELEASE() { lock_.unlock(); }
  void Lock() KAYAK_ACQUIRE() { lock_.lock(); }

  // Releases the mutex while it waits for a notification (or a spurious
  // wake-up: the caller checks its condition again).
  void Wait(std::condition_variable& cv) { cv.wait(lock_); }
  // The same, at most until `deadline` (or for `d`); false when it passed.
  template <typename Clock, typename Duration>
  bool WaitUntil(std::condition_variable& cv,
                 const std::chrono::time_point<Clock, Duration>& deadline) {
    return cv.wait_until(lock_, deadline) == std::cv_status::no_timeout;
  }
  template <typename Rep, typename Period>
  bool WaitFor(std::condition_variable& cv, const std::chrono::duration<Rep, Period>& d) {
    return cv.wait_for(lock_, d) == std::cv_status::no_timeout;
  }

  // Waits until `pred()` holds, checked with the mutex held (so `pred` is
  // annotated KAYAK_REQUIRES(the mutex)); the timed ones return `pred()` at
  // the end, false when the time passed first.
  template <typename Pred>
  void Wait(std::condition_variable& cv, Pred pred) KAYAK_NO_THREAD_SAFETY_ANALYSIS {
    cv.wait(lock_, std::move(pred));
  }
  template <typename Clock, typename Duration, typename Pred>
  bool WaitUntil(std::condition_variable& cv,
                 const std::chrono::time_point<Clock, Duration>& deadline,
                 Pred pred) KAYAK_NO_THREAD_SAFETY_ANALYSIS {
    return cv.wait_until(lock_, deadline, std::move(pred));
  }
  template <typename Rep, typename Period, typename Pred>
  bool WaitFor(std::condition_variable& cv, const std::chrono::duration<Rep, Period>& d,
               Pred pred) KAYAK_NO_THREAD_SAFETY_ANALYSIS {
    return cv.wait_for(lock_, d, std::move(pred));
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace kayak
