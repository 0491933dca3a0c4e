#include "state/arena.h"

#include <sys/mman.h>

#include <atomic>
#include <cerrno>
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

const Arena::Slab* Arena::Reserve(size_t bytes, size_t count) {
  if (!kPooling || bytes > kPooledMax || bytes == 0) return nullptr;
  Pool* p = PoolFor(RoundUp(std::max<size_t>(bytes, 16), 16));
  const size_t have = static_cast<size_t>(p->end - p->next) / p->size;
  if (count <= have) return nullptr;
  const size_t need = RoundUp((count - have) * p->size, kHuge);
  if (need < 4 * kHuge) return nullptr;  // a few MB: faulted as they come
  p->slabs.reserve(p->slabs.size() + 1);
  void* at = MapHuge(need);
  p->slabs.push_back(Slab{at, need, true});
  Mapped(need);
  p->slab_bytes += need;
  for (; p->next != p->end; p->next += p->size) {  // the rest of the current slab
    *reinterpret_cast<void**>(p->next) = p->free;
    p->free = p->next;
  }
  p->next = static_cast<char*>(at);
  p->end = p->next + need / p->size * p->size;
  return &p->slabs.back();
}

Arena::Prefault::Prefault(Arena* arena, size_t bytes, size_t count) {
  const Slab* s = arena->Reserve(bytes, count);
  if (s == nullptr) return;
  char* const at = static_cast<char*>(s->at);
  const size_t n = s->bytes;
  thread_ = std::thread([this, at, n] {
    for (size_t end = n; end > 0 && !stop_.load(std::memory_order_relaxed); end -= kHuge) {
      // Not supported (a kernel before 5.14): the inserting thread faults
      // the pages in itself, as without this.
      if (::madvise(at + end - kHuge, kHuge, MADV_POPULATE_WRITE) != 0 && errno == EINVAL) break;
    }
  });
}

Arena::Prefault::~Prefault() {
  stop_.store(true, std::memory_order_relaxed);
  if (thread_.joinable()) thread_.join();
}

void* Arena::Allocate(size_t bytes) {
  in_use_ += bytes;
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
  in_use_ -= bytes;
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
