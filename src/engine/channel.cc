#include "engine/channel.h"

#include <chrono>

namespace kayak {

Inbox::Inbox(size_t lanes, size_t capacity_per_lane)
    : capacity_(capacity_per_lane == 0 ? 1 : capacity_per_lane), lanes_(lanes) {}

int64_t BatchMemoryBytes(const Batch& batch) {
  int64_t n = static_cast<int64_t>(sizeof(Batch) + batch.size() * sizeof(Message));
  for (const auto& m : batch.messages) n += static_cast<int64_t>(m.ByteSize());
  return n;
}

bool Inbox::Push(size_t lane, Item item) {
  if (account_ != nullptr && item.batch != nullptr && item.bytes == 0) {
    item.bytes = BatchMemoryBytes(*item.batch);
  }
  MutexLock lock(mu_);
  ++pushing_;
  while (!closed_ && lanes_[lane].items.size() >= capacity_) lock.Wait(not_full_);
  --pushing_;
  if (closed_) return false;
  if (account_ != nullptr) account_->Add(item.bytes);
  lanes_[lane].items.push_back(std::move(item));
  const bool wake = popping_ > 0;
  lock.Unlock();
  if (wake) not_empty_.notify_one();
  return true;
}

bool Inbox::Pop(Item* out, size_t* lane, int64_t wait_ms) {
  MutexLock lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  while (true) {
    const size_t n = lanes_.size();
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (next_lane_ + k) % n;
      Lane& l = lanes_[i];
      if (l.held || l.items.empty()) continue;
      *out = std::move(l.items.front());
      l.items.pop_front();
      if (account_ != nullptr) account_->Add(-out->bytes);
      *lane = i;
      next_lane_ = (i + 1) % n;
      const bool wake = pushing_ > 0;
      lock.Unlock();
      if (wake) not_full_.notify_all();
      return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    ++popping_;
    lock.WaitUntil(not_empty_, deadline);
    --popping_;
  }
}

void Inbox::SetHeld(size_t lane, bool held) {
  MutexLock lock(mu_);
  lanes_[lane].held = held;
  not_empty_.notify_all();
}

void Inbox::Close() {
  MutexLock lock(mu_);
  closed_ = true;
  not_full_.notify_all();
  not_empty_.notify_all();
}

size_t Inbox::Depth(size_t lane) const {
  MutexLock lock(mu_);
  return lanes_[lane].items.size();
}

size_t Inbox::TotalDepth() const {
  MutexLock lock(mu_);
  size_t n = 0;
  for (const auto& l : lanes_) n += l.items.size();
  return n;
}

}  // namespace kayak
