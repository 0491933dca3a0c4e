#include "state/arena.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdint>

namespace kayak {

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kPooling = false;
#else
constexpr bool kPooling = true;
#endif

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

std::atomic<size_t> g_mapped{0};

}  // namespace

size_t Arena::TotalMappedBytes() { return g_mapped.load(std::memory_order_relaxed); }

void Arena::Mapped(size_t bytes) {
  mapped_ += bytes;
  g_mapped.fetch_add(bytes, std::memory_order_relaxed);
}

void Arena::Unmapped(size_t bytes) {
  mapped_ -= bytes;
  g_mapped.fetch_sub(bytes, std::memory_order_relaxed);
}

Arena::~Arena() {
  for (Pool& p : pools_) Release(&p);
}

void Arena::Release(Pool* p) {
  for (const Slab& s : p->slabs) {
    if (s.mapped) {
      ::munmap(s.at, s.bytes);
      Unmapped(s.bytes);
    } else {
      ::operator delete(s.at);
    }
  }
  p->slabs.clear();
  p->slabs.shrink_to_fit();
  p->free = nullptr;
  p->next = p->end = nullptr;
  p->slab_bytes = 0;
}

void* Arena::MapHuge(size_t bytes) {
  // Mapped with a huge page's worth to spare, then trimmed to an aligned
  // range: the kernel backs only aligned 2 MiB ranges with huge pages.
  const size_t span = bytes + kHuge;
  void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t at = RoundUp(base, kHuge);
  if (at > base) ::munmap(raw, at - base);
  if (base + span > at + bytes) {
    ::munmap(reinterpret_cast<void*>(at + bytes), base + span - (at + bytes));
  }
  // Advice only: without transparent huge pages (`never`) the memory is
  // still good, in 4 KiB pages.
  ::madvise(reinterpret_cast<void*>(at), bytes, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(at);
}

Arena::Pool* Arena::PoolFor(size_t size) {
  for (Pool& p : pools_) {
    if (p.size == size) return &p;
  }
  pools_.push_back(Pool{size});
  return &pools_.back();
}

void Arena::NewSlab(Pool* p) {
  // Small pools grow from the heap in slabs that double (4 KiB up); a pool
  // that holds a huge page's worth takes huge pages from then on.
  const bool huge = p->slab_bytes >= kHuge;
  const size_t bytes = huge ? kHuge : std::max<size_t>(4096, p->slab_bytes);
  p->slabs.reserve(p->slabs.size() + 1);  // a failure to grow leaks nothing
  void* at = huge ? MapHuge(bytes) : ::operator new(bytes);
  p->slabs.push_back(Slab{at, bytes, huge});
  p->slab_bytes += bytes;
  if (huge) Mapped(bytes);
  p->next = static_cast<char*>(at);
  p->end = p->next + bytes / p->size * p->size;
}

void* Arena::Allocate(size_t bytes) {
  if (bytes >= kHuge) {
    const size_t rounded = RoundUp(bytes, kHuge);
    void* at = MapHuge(rounded);
    Mapped(rounded);
    return at;
  }
  if (!kPooling || bytes > kPooledMax) return ::operator new(bytes);
  Pool* p = PoolFor(RoundUp(std::max<size_t>(bytes, 16), 16));
  void* at = p->free;
  if (at != nullptr) {
    p->free = *static_cast<void**>(at);
  } else {
    if (p->next == p->end) NewSlab(p);
    at = p->next;
    p->next += p->size;
  }
  ++p->live;
  return at;
}

void Arena::Deallocate(void* at, size_t bytes) {
  if (at == nullptr) return;
  if (bytes >= kHuge) {
    const size_t rounded = RoundUp(bytes, kHuge);
    ::munmap(at, rounded);
    Unmapped(rounded);
    return;
  }
  if (!kPooling || bytes > kPooledMax) {
    ::operator delete(at);
    return;
  }
  Pool* p = PoolFor(RoundUp(std::max<size_t>(bytes, 16), 16));
  if (--p->live == 0) {
    Release(p);
    return;
  }
  *static_cast<void**>(at) = p->free;
  p->free = at;
}

}  // namespace kayak
