// Bounded channels between threads. Every edge of the graph and the queue in
// front of every output is an Inbox; a full lane blocks its producer
// (backpressure), so memory is bounded by lanes x capacity x batch size.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "kayak/memory.h"
#include "kayak/message.h"
#include "kayak/thread_annotations.h"

namespace kayak {

// What travels on a lane: a batch, a checkpoint barrier behind the data sent
// before it, or the end of the stream.
struct Item {
  enum class Kind { kBatch, kBarrier, kEnd };
  Kind kind = Kind::kBatch;
  BatchPtr batch;
  uint64_t barrier_id = 0;
  // What the batch takes in memory (BatchMemoryBytes), counted once by
  // whoever sends it to several queues; 0: the queue counts it.
  int64_t bytes = 0;
};

// What a batch takes in memory, roughly: its messages' bytes and each
// message's own record.
int64_t BatchMemoryBytes(const Batch& batch);

// A multi-producer queue with one FIFO lane per producer and one consumer.
// The consumer can hold a lane (barrier alignment): a held lane is not read
// from, and its producer blocks once the lane is full.
class Inbox {
 public:
  Inbox(size_t lanes, size_t capacity_per_lane);

  // Appends to `lane`, blocking while it is full. Returns false once the inbox
  // is closed (the consumer is gone); the item is dropped then.
  bool Push(size_t lane, Item item);
  // Pops the oldest item of the next non-held, non-empty lane (round-robin
  // across lanes for fairness). Waits up to `wait_ms`; false on timeout.
  bool Pop(Item* out, size_t* lane, int64_t wait_ms);
  void SetHeld(size_t lane, bool held);
  // Wakes and releases every producer; later pushes fail.
  void Close();
  size_t Depth(size_t lane) const;
  size_t TotalDepth() const;
  // The number of lanes is fixed at construction: no lock needed.
  size_t lanes() const KAYAK_NO_THREAD_SAFETY_ANALYSIS { return lanes_.size(); }
  size_t capacity() const { return capacity_; }
  // From now on the batches waiting here are charged to `account` (the
  // queue's owner's; it outlives the inbox's use).
  void ChargeTo(MemoryAccount* account) { account_ = account; }

 private:
  struct Lane {
    std::deque<Item> items;
    bool held = false;
  };
  const size_t capacity_;
  MemoryAccount* account_ = nullptr;
  mutable Mutex mu_;
  std::condition_variable not_empty_;
  std::condition_variable not_full_;
  std::vector<Lane> lanes_ KAYAK_GUARDED_BY(mu_);
  size_t next_lane_ KAYAK_GUARDED_BY(mu_) = 0;
  bool closed_ KAYAK_GUARDED_BY(mu_) = false;
  // Threads waiting in Pop and in Push: a wake-up is sent only when one
  // waits, and after the lock is let go (a thread woken while the lock is
  // held would wait for it at once: two switches a batch, not one).
  size_t popping_ KAYAK_GUARDED_BY(mu_) = 0;
  size_t pushing_ KAYAK_GUARDED_BY(mu_) = 0;
};

}  // namespace kayak
