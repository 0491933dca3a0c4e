#include "checkpoint/chain_policy.h"

#include <gtest/gtest.h>

namespace kayak {
namespace {

TEST(ChainPolicy, ADeltaGoesOnTheChainWhileTheDeltasStayWithinTheirShare) {
  struct Case {
    uint64_t base, deltas, delta;
    bool compacted, fits;
    const char* why;
  };
  const Case cases[] = {
      {0, 0, 1, true, false, "no full chunk to put it on"},
      {0, 0, 0, false, false, "no full chunk, even for nothing"},
      {1000, 0, 10, true, true, "a small change"},
      {1000, 0, 1000, true, true, "a compacted chain up to the full chunk's size"},
      {1000, 0, 1001, true, false, "one byte past it"},
      {1000, 990, 10, true, true, "the last bytes of the share"},
      {1000, 990, 11, true, false, "past the share with what came before"},
      {1000, 0, 500, false, true, "saved whole by the pipeline: up to half"},
      {1000, 0, 501, false, false, "past half"},
      {1000, 400, 101, false, false, "past half with what came before"},
      {1000, 400, 100, false, true, "exactly half"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(chain::DeltaFits(c.base, c.deltas, c.delta, c.compacted), c.fits) << c.why;
  }
}

}  // namespace
}  // namespace kayak
