#include "engine/crash_guard.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

namespace kayak {
namespace {

// A process's life in the guard: opened, then either dying with something
// inside (the guard dropped without Left) or stopping cleanly.
class CrashGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            ("kayak-crash-guard-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = dir_ + "/marks";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  CrashGuard::LastRun Start() {
    guard_ = std::make_unique<CrashGuard>();
    CrashGuard::LastRun last;
    EXPECT_TRUE(guard_->Open(path_, &last).ok());
    return last;
  }
  // Dies with a batch of `n` inside, `before` messages after the commit.
  void DieInBatch(uint32_t n, uint64_t before) {
    guard_->EnterBatch(n, 1, before);
    guard_.reset();
  }
  void DieOn(const std::string& payload, uint64_t before) {
    guard_->EnterOne(CrashGuard::Hash(payload), 0, before);
    guard_.reset();
  }
  // Passes `payload` through, one at a time; false when it was set aside.
  bool Pass(const std::string& payload) {
    const uint64_t h = CrashGuard::Hash(payload);
    if (guard_->SetAside(h)) return false;
    guard_->EnterOne(h, 0, 1);
    guard_->Left();
    return true;
  }

  std::string dir_;
  std::string path_;
  std::unique_ptr<CrashGuard> guard_;
};

TEST_F(CrashGuardTest, AFirstStartAndCleanBatchesLeaveNothingSuspected) {
  CrashGuard::LastRun last = Start();
  EXPECT_FALSE(last.died);
  EXPECT_FALSE(last.damaged);
  EXPECT_FALSE(guard_->careful());
  for (int i = 0; i < 3; ++i) {
    guard_->EnterBatch(100, 0, 100);
    guard_->AtStage(1);
    guard_->Left();
  }
  guard_.reset();
  last = Start();
  EXPECT_FALSE(last.died);
  EXPECT_FALSE(guard_->careful());
}

TEST_F(CrashGuardTest, ADeathInABatchMakesTheReplayCarefulWhereTheBatchWas) {
  Start();
  DieInBatch(50, 120);  // messages 120-169 after the commit were inside
  CrashGuard::LastRun last = Start();
  EXPECT_TRUE(last.died);
  EXPECT_FALSE(last.alone);
  EXPECT_EQ(last.batch, 50u);
  EXPECT_EQ(last.stage, 1u);
  // 0-69 pass as usual; 70-219 (a batch's worth either side) one at a time.
  EXPECT_EQ(last.skip, 70u);
  EXPECT_EQ(last.careful_for, 150u);
  EXPECT_FALSE(guard_->careful());
  guard_->Skipped(60);
  EXPECT_EQ(guard_->to_skip(), 10u);
  guard_->Skipped(10);
  for (int i = 0; i < 150; ++i) {
    ASSERT_TRUE(guard_->careful()) << i;
    EXPECT_TRUE(Pass("m" + std::to_string(i)));
  }
  EXPECT_FALSE(guard_->careful());
}

TEST_F(CrashGuardTest, TheSameMessageDyingAloneTwiceAfterABatchIsSetAsideOnce) {
  Start();
  DieInBatch(10, 10);  // death 1: somewhere in a batch
  Start();
  EXPECT_TRUE(Pass("a"));
  DieOn("poison", 1);  // death 2: alone, after one message
  CrashGuard::LastRun last = Start();
  EXPECT_TRUE(last.alone);
  EXPECT_EQ(last.deaths, 1u);
  EXPECT_TRUE(Pass("a"));
  EXPECT_TRUE(guard_->careful());
  DieOn("poison", 1);  // death 3
  last = Start();
  EXPECT_EQ(last.deaths, 2u);
  EXPECT_TRUE(Pass("a"));
  EXPECT_FALSE(Pass("poison"));  // set aside
  EXPECT_TRUE(Pass("b"));
  // Forgotten once set aside: the same bytes later go through.
  EXPECT_TRUE(Pass("poison"));
}

TEST_F(CrashGuardTest, DeathsOnDifferentMessagesAreNotInARow) {
  Start();
  DieInBatch(10, 10);
  Start();
  DieOn("x", 0);
  Start();
  DieOn("y", 0);
  CrashGuard::LastRun last = Start();
  EXPECT_EQ(last.deaths, 1u);  // y once
  EXPECT_TRUE(Pass("x"));
  EXPECT_TRUE(Pass("y"));
}

TEST_F(CrashGuardTest, ACleanStopInsideTheSpanKeepsTheRestOfIt) {
  Start();
  DieInBatch(10, 5);
  Start();
  EXPECT_TRUE(Pass("a"));
  EXPECT_TRUE(Pass("b"));
  guard_.reset();  // stopped with nothing inside
  CrashGuard::LastRun last = Start();
  EXPECT_FALSE(last.died);
  EXPECT_EQ(last.careful_for, 23u);  // 5 before and two batches' worth, less the two passed
  EXPECT_TRUE(guard_->careful());
}

TEST_F(CrashGuardTest, ADamagedPageReadsAsACleanStop) {
  Start();
  DieInBatch(10, 10);
  {
    std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(9);
    f.put('\x7f');
  }
  CrashGuard::LastRun last = Start();
  EXPECT_TRUE(last.damaged);
  EXPECT_FALSE(last.died);
  EXPECT_FALSE(guard_->careful());
}

TEST_F(CrashGuardTest, AGuardThatCannotOpenIsOff) {
  CrashGuard g;
  CrashGuard::LastRun last;
  EXPECT_FALSE(g.Open(dir_ + "/no/such/dir/marks", &last).ok());
  EXPECT_FALSE(g.on());
  g.EnterBatch(1, 0, 1);  // no-ops
  g.Left();
  EXPECT_FALSE(g.SetAside(CrashGuard::Hash("x")));
}

}  // namespace
}  // namespace kayak
