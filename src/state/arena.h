// Memory for a big keyed structure (a bucket's table and entries), in huge
// pages once it is big. docs/benchmarks.md, "Measured design choices": a restore of
// 10M keys spent a quarter of its time in page faults of 4 KiB pages and the
// rest mostly in TLB misses of a table that is hundreds of MB.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include <absl/container/node_hash_map.h>

namespace kayak {

// Not thread-safe: its owner's lock guards it, as it guards the structure.
//   - a block of 2 MiB or more (a table) is mapped on its own, aligned to
//     2 MiB, with transparent huge pages asked for (MADV_HUGEPAGE), and
//     unmapped when it is given back;
//   - a small block (an entry, up to kPooledMax bytes) comes from a pool of
//     its size: slabs carved in order, and a list of blocks given back that
//     the next ones of that size reuse. The first slabs come from the heap;
//     once the pool holds kHugeSlab bytes, every new slab is a 2 MiB mapping
//     in huge pages. A pool's memory goes back to the system when its
//     last block is given back (the structure emptied) or the arena is
//     destroyed, not before: a structure that shrinks keeps its peak for its
//     next entries;
//   - anything else comes from the heap.
// Under AddressSanitizer every block comes from the heap, so that a use after
// it is given back is still found.
class Arena {
 public:
  static constexpr size_t kPooledMax = 256;
  static constexpr size_t kHuge = size_t{2} << 20;

  Arena() = default;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena();

  void* Allocate(size_t bytes);
  void Deallocate(void* p, size_t bytes);
  // The bytes of the blocks given out and not given back (what the
  // structure uses; a pool's slabs may hold more).
  size_t in_use() const { return in_use_; }

  // Before a bulk insert (a restore) of `count` blocks of `bytes`: the
  // pool maps room for them at once, in huge pages, and a thread of its own
  // has the kernel fill that room with zeroed pages (MADV_POPULATE_WRITE)
  // from its far end back, while the inserting thread uses it from the
  // front. A restore of 10M keys spent half of its time waiting for the
  // kernel to zero its entries' pages on first touch; that now happens on
  // the second core. Stops and joins when destroyed. Does nothing for a few
  // MB, for blocks that are not pooled, or under AddressSanitizer.
  class Prefault {
   public:
    Prefault(Arena* arena, size_t bytes, size_t count);
    ~Prefault();
    Prefault(const Prefault&) = delete;
    Prefault& operator=(const Prefault&) = delete;

   private:
    std::atomic<bool> stop_{false};
    std::thread thread_;
  };
  // Bytes the arena mapped itself (huge slabs and big blocks): memory the
  // heap's own statistics do not see.
  size_t mapped_bytes() const { return mapped_; }
  // The same over every arena of the process.
  static size_t TotalMappedBytes();

 private:
  struct Slab {
    void* at;
    size_t bytes;
    bool mapped;  // else from the heap
  };
  struct Pool {
    size_t size = 0;        // of a block (a multiple of 16)
    void* free = nullptr;   // blocks given back, linked through themselves
    char* next = nullptr;   // the current slab's first unused block
    char* end = nullptr;
    size_t slab_bytes = 0;  // held by this pool
    size_t live = 0;        // blocks handed out and not given back
    std::vector<Slab> slabs;
  };
  Pool* PoolFor(size_t size);
  void NewSlab(Pool* p);
  // Every block of `p` is back: its slabs go back to the system.
  void Release(Pool* p);
  static void* MapHuge(size_t bytes);
  // Room for `count` more blocks of `bytes` in one new slab (what was left
  // of the current one goes to the free list); the slab, or null when it is
  // not worth one.
  const Slab* Reserve(size_t bytes, size_t count);
  void Mapped(size_t bytes);
  void Unmapped(size_t bytes);

  std::vector<Pool> pools_;  // a handful: one per block size asked for
  size_t mapped_ = 0;
  size_t in_use_ = 0;
};

// An allocator that draws from an Arena (for a container's nodes and table).
template <typename T>
class ArenaAllocator {
 public:
  using value_type = T;
  explicit ArenaAllocator(Arena* arena) : arena_(arena) {}
  template <typename U>
  ArenaAllocator(const ArenaAllocator<U>& o) : arena_(o.arena()) {}  // NOLINT: a rebind

  T* allocate(size_t n) { return static_cast<T*>(arena_->Allocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { arena_->Deallocate(p, n * sizeof(T)); }
  Arena* arena() const { return arena_; }
  template <typename U>
  bool operator==(const ArenaAllocator<U>& o) const {
    return arena_ == o.arena();
  }
  template <typename U>
  bool operator!=(const ArenaAllocator<U>& o) const {
    return arena_ != o.arena();
  }

 private:
  Arena* arena_;
};

// Abseil's node_hash_map with its nodes (and table) in an Arena: a node
// stays where it is while the map grows, so pointers to it stay valid.
template <typename K, typename V>
using ArenaNodeMap = absl::node_hash_map<K, V, absl::container_internal::hash_default_hash<K>,
                                         absl::container_internal::hash_default_eq<K>,
                                         ArenaAllocator<std::pair<const K, V>>>;

// An order of a node map's nodes (least to most recently written), linked
// through them: a node's value holds `Node* older, newer`. No allocation.
template <typename Node>
struct WriteOrder {
  Node* oldest = nullptr;
  Node* newest = nullptr;
  // `n` becomes the newest.
  void LinkNewest(Node* n) {
    n->second.older = newest;
    n->second.newer = nullptr;
    (newest != nullptr ? newest->second.newer : oldest) = n;
    newest = n;
  }
  // `n` leaves the order.
  void Unlink(Node* n) {
    auto& s = n->second;
    (s.older != nullptr ? s.older->second.newer : oldest) = s.newer;
    (s.newer != nullptr ? s.newer->second.older : newest) = s.older;
    s.older = s.newer = nullptr;
  }
};

}  // namespace kayak
