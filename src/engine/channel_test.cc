#include "engine/channel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace kayak {
namespace {

Item Batch1(int tag) {
  auto b = std::make_shared<Batch>();
  b->messages.emplace_back(std::to_string(tag), 0);
  return Item{Item::Kind::kBatch, b, 0};
}

int Tag(const Item& it) { return std::stoi(it.batch->messages[0].payload()); }

TEST(Inbox, FifoPerLaneAndRoundRobinAcrossLanes) {
  Inbox in(2, 4);
  ASSERT_TRUE(in.Push(0, Batch1(1)));
  ASSERT_TRUE(in.Push(0, Batch1(2)));
  ASSERT_TRUE(in.Push(1, Batch1(10)));
  std::vector<int> got;
  Item it;
  size_t lane;
  while (in.Pop(&it, &lane, 0)) got.push_back(Tag(it));
  EXPECT_EQ(got, (std::vector<int>{1, 10, 2}));
}

TEST(Inbox, HeldLaneIsNotRead) {
  Inbox in(2, 4);
  ASSERT_TRUE(in.Push(0, Batch1(1)));
  ASSERT_TRUE(in.Push(1, Batch1(2)));
  in.SetHeld(0, true);
  Item it;
  size_t lane;
  ASSERT_TRUE(in.Pop(&it, &lane, 0));
  EXPECT_EQ(lane, 1u);
  EXPECT_FALSE(in.Pop(&it, &lane, 10));
  in.SetHeld(0, false);
  ASSERT_TRUE(in.Pop(&it, &lane, 0));
  EXPECT_EQ(Tag(it), 1);
}

TEST(Inbox, FullLaneBlocksItsProducerUntilPopped) {
  Inbox in(1, 2);
  ASSERT_TRUE(in.Push(0, Batch1(1)));
  ASSERT_TRUE(in.Push(0, Batch1(2)));
  std::atomic<bool> pushed{false};
  std::thread producer([&] {
    in.Push(0, Batch1(3));
    pushed = true;
  });
  // The producer cannot finish while the lane is full.
  Item it;
  size_t lane;
  EXPECT_FALSE(pushed.load());
  EXPECT_EQ(in.Depth(0), 2u);
  ASSERT_TRUE(in.Pop(&it, &lane, 0));
  producer.join();
  EXPECT_TRUE(pushed.load());
  EXPECT_EQ(in.Depth(0), 2u);
}

TEST(Inbox, CloseReleasesBlockedProducers) {
  Inbox in(1, 1);
  ASSERT_TRUE(in.Push(0, Batch1(1)));
  std::thread producer([&] { EXPECT_FALSE(in.Push(0, Batch1(2))); });
  in.Close();
  producer.join();
}

}  // namespace
}  // namespace kayak
