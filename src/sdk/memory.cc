#include "kayak/memory.h"

#include <algorithm>

namespace kayak {

MemoryAccount::MemoryAccount(MemoryBudget* budget, std::string pipeline, std::string component,
                             std::string kind)
    : budget_(budget),
      pipeline_(std::move(pipeline)),
      component_(std::move(component)),
      kind_(std::move(kind)) {
  if (budget_ != nullptr) budget_->Register(this);
}

MemoryAccount::~MemoryAccount() {
  if (budget_ != nullptr) budget_->Unregister(this);
}

void MemoryBudget::Register(MemoryAccount* a) {
  MutexLock lock(mu_);
  accounts_.push_back(a);
}

void MemoryBudget::Unregister(MemoryAccount* a) {
  MutexLock lock(mu_);
  auto it = std::find(accounts_.begin(), accounts_.end(), a);
  if (it != accounts_.end()) {
    *it = accounts_.back();
    accounts_.pop_back();
  }
  // What it held is no longer held (its owner writes no more).
  used_.fetch_sub(a->bytes(), std::memory_order_relaxed);
}

std::vector<MemoryBudget::Use> MemoryBudget::Snapshot(int64_t* total) const {
  std::vector<Use> out;
  *total = 0;
  {
    MutexLock lock(mu_);
    out.reserve(accounts_.size());
    for (const MemoryAccount* a : accounts_) {
      const int64_t b = a->bytes();
      *total += b;
      out.push_back(Use{a->pipeline(), a->component(), a->kind(), b});
    }
  }
  // Accounts of the same name (a pipeline's being rebuilt while the one it
  // replaces is still held by a reader) are one.
  const auto same = [](const Use& x, const Use& y) {
    return x.pipeline == y.pipeline && x.component == y.component && x.kind == y.kind;
  };
  std::sort(out.begin(), out.end(), [](const Use& x, const Use& y) {
    if (x.pipeline != y.pipeline) return x.pipeline < y.pipeline;
    if (x.component != y.component) return x.component < y.component;
    return x.kind < y.kind;
  });
  size_t kept = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (kept > 0 && same(out[kept - 1], out[i])) {
      out[kept - 1].bytes += out[i].bytes;
    } else {
      if (kept != i) out[kept] = std::move(out[i]);
      ++kept;
    }
  }
  out.resize(kept);
  std::stable_sort(out.begin(), out.end(),
                   [](const Use& x, const Use& y) { return x.bytes > y.bytes; });
  return out;
}

}  // namespace kayak
