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

TEST(Inbox, ChargesWhatWaitsToItsAccount) {
  MemoryBudget budget(4 << 20);
  MemoryAccount account(&budget, "p", "outputs[0]", "queue");
  Inbox in(1, 4);
  in.ChargeTo(&account);
  auto big = std::make_shared<Batch>();
  big->messages.emplace_back(std::string(1000, 'x'), 0);
  const int64_t bytes = BatchMemoryBytes(*big);
  EXPECT_GE(bytes, 1000);
  ASSERT_TRUE(in.Push(0, Item{Item::Kind::kBatch, big, 0}));
  ASSERT_TRUE(in.Push(0, Item{Item::Kind::kBatch, big, 0, 7}));  // counted by the sender
  ASSERT_TRUE(in.Push(0, Item{Item::Kind::kBarrier, nullptr, 1}));
  EXPECT_EQ(account.bytes(), bytes + 7);
  Item it;
  size_t lane;
  ASSERT_TRUE(in.Pop(&it, &lane, 0));
  EXPECT_EQ(account.bytes(), 7);
  ASSERT_TRUE(in.Pop(&it, &lane, 0));
  ASSERT_TRUE(in.Pop(&it, &lane, 0));
  EXPECT_EQ(account.bytes(), 0);
}

TEST(MemoryBudget, SumsItsAccountsAndSaysWhenInputsWait) {
  MemoryBudget budget(1000);
  EXPECT_EQ(budget.high_water(), 900);
  std::vector<MemoryBudget::Use> uses;
  int64_t total = -1;
  {
    MemoryAccount a(&budget, "p", "transforms[0]", "state");
    MemoryAccount b(&budget, "", "bucket:totals", "state");
    a.Set(600);
    b.Add(299);
    uses = budget.Snapshot(&total);
    EXPECT_EQ(total, 899);
    ASSERT_EQ(uses.size(), 2u);
    EXPECT_EQ(uses[0].component, "transforms[0]");  // the biggest first
    EXPECT_EQ(uses[1].component, "bucket:totals");
    EXPECT_EQ(budget.Used(), 899);
    EXPECT_FALSE(budget.Exceeded());
    b.Add(1);
    EXPECT_TRUE(budget.Exceeded());
    a.Set(100);
    EXPECT_EQ(budget.Used(), 400);
    a.Set(600);
  }
  {
    // Two accounts of one name (a pipeline rebuilt while a reader holds the
    // old one) are shown as one.
    MemoryAccount x(&budget, "p", "outputs[0]", "queue");
    MemoryAccount y(&budget, "p", "outputs[0]", "queue");
    x.Set(5);
    y.Set(7);
    uses = budget.Snapshot(&total);
    ASSERT_EQ(uses.size(), 1u);
    EXPECT_EQ(uses[0].bytes, 12);
    EXPECT_EQ(total, 12);
  }
  // Gone accounts count no more, at once.
  EXPECT_EQ(budget.Used(), 0);
  EXPECT_FALSE(budget.Exceeded());
  EXPECT_TRUE(budget.Snapshot(&total).empty());
  MemoryBudget none(0);
  MemoryAccount c(&none, "p", "input", "buffer");
  c.Set(int64_t{1} << 40);
  EXPECT_FALSE(none.Exceeded());  // no limit: kept, never waited for
}

}  // namespace
}  // namespace kayak
