#include "state/arena.h"

#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kayak {
namespace {

bool Aligned(const void* p, size_t to) { return reinterpret_cast<uintptr_t>(p) % to == 0; }

// A block given back is the next one of its size handed out; blocks of
// other sizes come from other pools.
TEST(Arena, ReusesBlocksOfTheirSize) {
  Arena a;
  void* x = a.Allocate(88);
  void* y = a.Allocate(88);
  EXPECT_NE(x, y);
  EXPECT_TRUE(Aligned(x, 16));
  std::memset(x, 0xab, 88);
  std::memset(y, 0xcd, 88);
  a.Deallocate(x, 88);
  void* z = a.Allocate(40);
  EXPECT_NE(z, x);  // another size
  void* again = a.Allocate(88);
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_EQ(again, x);
#endif
  a.Deallocate(again, 88);
  a.Deallocate(y, 88);
  a.Deallocate(z, 40);
  EXPECT_EQ(a.mapped_bytes(), 0u);  // small pools are still on the heap
}

// A big block is mapped on its own, 2 MiB aligned, and unmapped when given
// back.
TEST(Arena, MapsBigBlocksAligned) {
  Arena a;
  const size_t n = Arena::kHuge * 3 + 100;
  auto* p = static_cast<char*>(a.Allocate(n));
  EXPECT_TRUE(Aligned(p, Arena::kHuge));
  EXPECT_EQ(a.mapped_bytes(), Arena::kHuge * 4);
  p[0] = 1;
  p[n - 1] = 2;
  a.Deallocate(p, n);
  EXPECT_EQ(a.mapped_bytes(), 0u);
}

// Once a pool holds a huge page's worth, its slabs are mapped in huge
// pages; every block stays distinct and writable.
TEST(Arena, PoolGrowsIntoHugeSlabs) {
  Arena a;
  constexpr size_t kSize = 96;
  const size_t n = 3 * Arena::kHuge / kSize;
  std::set<void*> seen;
  std::vector<void*> blocks;
  for (size_t i = 0; i < n; ++i) {
    void* b = a.Allocate(kSize);
    std::memset(b, static_cast<int>(i), kSize);
    ASSERT_TRUE(seen.insert(b).second);
    blocks.push_back(b);
  }
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_GE(a.mapped_bytes(), Arena::kHuge);
#endif
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(static_cast<unsigned char*>(blocks[i])[kSize - 1], static_cast<unsigned char>(i));
  }
  for (void* b : blocks) a.Deallocate(b, kSize);
  EXPECT_EQ(a.mapped_bytes(), 0u);  // the last block back: the slabs go
  void* b = a.Allocate(kSize);      // and the pool starts again
  std::memset(b, 1, kSize);
  a.Deallocate(b, kSize);
}

// A prefault makes room for a bulk insert at once and fills it from its far
// end on a thread of its own while blocks are used from the front: every
// block is distinct and keeps what was written into it.
TEST(Arena, PrefaultKeepsWhatIsWritten) {
  Arena a;
  constexpr size_t kSize = 96;
  constexpr size_t kCount = 200'000;  // 19 MB
  std::vector<unsigned char*> blocks;
  void* spare = a.Allocate(kSize);  // a slab begun before: its rest is not lost
  {
    Arena::Prefault prefault(&a, kSize, kCount);
#if !defined(__SANITIZE_ADDRESS__)
    EXPECT_GE(a.mapped_bytes(), kCount * kSize);
#endif
    for (size_t i = 0; i < kCount; ++i) {
      auto* b = static_cast<unsigned char*>(a.Allocate(kSize));
      std::memset(b, static_cast<int>(i * 7), kSize);
      blocks.push_back(b);
    }
  }
  std::set<unsigned char*> seen(blocks.begin(), blocks.end());
  EXPECT_EQ(seen.size(), kCount);
  for (size_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(blocks[i][0], static_cast<unsigned char>(i * 7)) << i;
    ASSERT_EQ(blocks[i][kSize - 1], static_cast<unsigned char>(i * 7)) << i;
  }
  for (auto* b : blocks) a.Deallocate(b, kSize);
  a.Deallocate(spare, kSize);
  EXPECT_EQ(a.mapped_bytes(), 0u);
}

// A node map over an arena: inserts, erases and inserts again, with the
// table itself growing past a huge page.
TEST(Arena, HoldsANodeMap) {
  Arena arena;
  using Map = ArenaNodeMap<std::string, int64_t>;
  {
    Map m{ArenaAllocator<std::pair<const std::string, int64_t>>(&arena)};
    constexpr int64_t kKeys = 300'000;  // a table of 2.4 MB of slots
    for (int64_t i = 0; i < kKeys; ++i) m.emplace("key-" + std::to_string(i), i);
    for (int64_t i = 0; i < kKeys; i += 2) m.erase("key-" + std::to_string(i));
    for (int64_t i = 0; i < kKeys; i += 2) m.emplace("again-" + std::to_string(i), -i);
    ASSERT_EQ(m.size(), static_cast<size_t>(kKeys));
    for (int64_t i = 0; i < kKeys; ++i) {
      const auto it = m.find(i % 2 ? "key-" + std::to_string(i) : "again-" + std::to_string(i));
      ASSERT_NE(it, m.end());
      ASSERT_EQ(it->second, i % 2 ? i : -i);
    }
  }
}

}  // namespace
}  // namespace kayak
