// The server's memory budget (`memory_limit_bytes`, docs/config.md, "The
// memory budget"): every queue, buffer and piece of state the engine holds is
// charged to an account, and the inputs stop reading while the accounts
// together are past the budget's high-water mark, so that the queues drain
// before the limit is reached. The usage by account is on /metrics, in
// /api/v1/overview and on the dashboard.
//
// An account is written by its owner's thread (a queue's, by the threads
// that push to it and the one that takes from it) and read by anyone: a
// relaxed atomic, so charging costs no lock. A change is added to the
// budget's total as it is made (one shared atomic; a write that leaves the
// bytes as they were touches nothing shared), so the total is never stale.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "kayak/thread_annotations.h"

namespace kayak {

// The server's memory budget as a component sees it: an input that accepts
// data on its own (the http input) refuses more while it is exceeded, as its
// pipeline stops reading it.
class MemoryPressure {
 public:
  virtual ~MemoryPressure() = default;
  // Any thread.
  virtual bool Exceeded() = 0;
};

class MemoryBudget;

// What one component holds, by kind: "queue" (batches waiting for it),
// "state" (a transform's or a bucket's), "buffer" (what an input or an
// output holds of its own). Registered with a budget while it lives.
class MemoryAccount {
 public:
  // `budget` may be null: the account then counts for nobody.
  MemoryAccount(MemoryBudget* budget, std::string pipeline, std::string component,
                std::string kind);
  ~MemoryAccount();
  MemoryAccount(const MemoryAccount&) = delete;
  MemoryAccount& operator=(const MemoryAccount&) = delete;

  inline void Set(int64_t bytes);
  inline void Add(int64_t bytes);
  int64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  const std::string& pipeline() const { return pipeline_; }
  const std::string& component() const { return component_; }
  const std::string& kind() const { return kind_; }

 private:
  MemoryBudget* const budget_;
  const std::string pipeline_, component_, kind_;
  std::atomic<int64_t> bytes_{0};
};

class MemoryBudget final : public MemoryPressure {
 public:
  // Inputs pause at this share of the limit: what is queued then drains
  // into the room left above it.
  static constexpr double kHighWater = 0.9;

  // `limit_bytes` 0: no limit (the accounts are still kept and shown).
  explicit MemoryBudget(int64_t limit_bytes) : limit_(limit_bytes) {}
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  int64_t limit() const { return limit_; }
  int64_t high_water() const { return static_cast<int64_t>(static_cast<double>(limit_) * kHighWater); }
  // The accounts' total now.
  int64_t Used() const { return used_.load(std::memory_order_relaxed); }
  // Whether inputs should wait: a limit is set and Used() is at or past
  // its high-water mark.
  bool Exceeded() override { return limit_ > 0 && Used() >= high_water(); }

  // An input that stopped reading because of the budget, and started again.
  void Paused() {
    pauses_.fetch_add(1, std::memory_order_relaxed);
    paused_now_.fetch_add(1, std::memory_order_relaxed);
  }
  void Resumed() { paused_now_.fetch_sub(1, std::memory_order_relaxed); }
  uint64_t pauses() const { return pauses_.load(std::memory_order_relaxed); }
  // Inputs waiting for the budget now.
  int64_t paused_now() const { return paused_now_.load(std::memory_order_relaxed); }

  struct Use {
    std::string pipeline, component, kind;
    int64_t bytes = 0;
  };
  // Every account's bytes now, the biggest first; the total in `*total`.
  std::vector<Use> Snapshot(int64_t* total) const;

 private:
  friend class MemoryAccount;
  void Register(MemoryAccount* a);
  void Unregister(MemoryAccount* a);

  const int64_t limit_;
  mutable Mutex mu_;
  std::vector<MemoryAccount*> accounts_ KAYAK_GUARDED_BY(mu_);
  std::atomic<int64_t> used_{0};
  std::atomic<uint64_t> pauses_{0};
  std::atomic<int64_t> paused_now_{0};
};

void MemoryAccount::Set(int64_t bytes) {
  const int64_t was = bytes_.exchange(bytes, std::memory_order_relaxed);
  if (budget_ != nullptr && bytes != was) {
    budget_->used_.fetch_add(bytes - was, std::memory_order_relaxed);
  }
}

void MemoryAccount::Add(int64_t bytes) {
  bytes_.fetch_add(bytes, std::memory_order_relaxed);
  if (budget_ != nullptr && bytes != 0) budget_->used_.fetch_add(bytes, std::memory_order_relaxed);
}

}  // namespace kayak
