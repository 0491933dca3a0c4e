#include "checkpoint/acknowledger.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <mutex>
#include <vector>

namespace kayak {
namespace {

TEST(Acknowledger, APostDoesNotWaitForASlowAcknowledgement) {
  Acknowledger a;
  a.Start();
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<int> sent{0};
  int x = 0, y = 0;
  a.Post(&x, [gate, &sent] {
    gate.wait();  // a server that does not answer
    sent++;
  });
  // The poster goes on at once, and so does a second input's post.
  a.Post(&y, [&sent] { sent++; });
  EXPECT_LE(sent.load(), 1);
  release.set_value();
  a.Stop();
  EXPECT_EQ(sent.load(), 2);
}

TEST(Acknowledger, OnlyTheNewestWaitsPerInput) {
  Acknowledger a;  // not started: posts queue
  int x = 0;
  std::vector<int> seen;
  for (int i = 1; i <= 100; ++i) a.Post(&x, [i, &seen] { seen.push_back(i); });
  EXPECT_EQ(a.superseded(), 99u);
  a.Stop();  // runs what waits
  EXPECT_EQ(seen, std::vector<int>{100});
}

// A retry waits on its own (a store that does not answer): the thread
// serves the other inputs meanwhile, and a stop sends it at once.
TEST(Acknowledger, ARetryLaterHoldsUpNoOtherInput) {
  Acknowledger a;
  a.Start();
  int x = 0, y = 0;
  std::atomic<int> tries{0};
  std::promise<void> other;
  std::function<void()> retry = [&] {
    if (++tries < 3) a.Post(&x, retry, 60000);  // fails, and asks again in a minute
  };
  a.Post(&x, retry);
  a.Post(&y, [&] { other.set_value(); });
  EXPECT_EQ(other.get_future().wait_for(std::chrono::seconds(20)), std::future_status::ready)
      << "another input waited for a retry";
  const auto stop_start = std::chrono::steady_clock::now();
  a.Stop();  // the minute is not waited out, nor is it for the retry posted meanwhile
  EXPECT_LT(std::chrono::steady_clock::now() - stop_start, std::chrono::seconds(30));
  EXPECT_EQ(tries.load(), 3);
}

TEST(Acknowledger, StopSendsWhatIsQueuedBeforeItReturns) {
  Acknowledger a;
  a.Start();
  std::mutex mu;
  std::vector<int> seen;
  int keys[50];
  for (int i = 0; i < 50; ++i) {
    a.Post(&keys[i], [i, &mu, &seen] {
      std::lock_guard lock(mu);
      seen.push_back(i);
    });
  }
  a.Stop();
  EXPECT_EQ(seen.size(), 50u);
  a.Stop();  // twice is fine
  a.Post(&keys[0], [] {});  // after the stop: not run by a thread that is gone
}

}  // namespace
}  // namespace kayak
