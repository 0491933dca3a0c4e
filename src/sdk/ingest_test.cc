#include "kayak/ingest.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>

namespace kayak {
namespace {

TEST(IngestAnswerScope, RunsWhatWasRegisteredOnceAtCloseInnermostFirst) {
  EXPECT_EQ(IngestAnswerScope::Current(), nullptr);
  std::string ran;
  int key_a = 0, key_b = 0;
  {
    IngestAnswerScope outer;
    EXPECT_EQ(IngestAnswerScope::Current(), &outer);
    EXPECT_TRUE(outer.AtClose(&key_a, [&] { ran += "outer-a "; }));
    EXPECT_FALSE(outer.AtClose(&key_a, [&] { ran += "again "; }));  // once per key
    {
      IngestAnswerScope inner;
      EXPECT_EQ(IngestAnswerScope::Current(), &inner);
      EXPECT_TRUE(inner.AtClose(&key_a, [&] { ran += "inner-a "; }));
      EXPECT_TRUE(inner.AtClose(&key_b, [&] { ran += "inner-b "; }));
      EXPECT_EQ(ran, "");
    }
    EXPECT_EQ(ran, "inner-a inner-b ");
    EXPECT_EQ(IngestAnswerScope::Current(), &outer);
  }
  EXPECT_EQ(ran, "inner-a inner-b outer-a ");
  EXPECT_EQ(IngestAnswerScope::Current(), nullptr);
}

TEST(IngestAnswerScope, IsPerThread) {
  IngestAnswerScope here;
  IngestAnswerScope* seen_there = &here;
  std::thread([&] { seen_there = IngestAnswerScope::Current(); }).join();
  EXPECT_EQ(seen_there, nullptr);
  EXPECT_EQ(IngestAnswerScope::Current(), &here);
}

}  // namespace
}  // namespace kayak
