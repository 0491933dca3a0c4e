#include "common/partition_offsets.h"

#include <gtest/gtest.h>

namespace kayak {
namespace {

TEST(PartitionOffsets, RoundTripsAndRefusesWhatIsNotAPosition) {
  const PartitionOffsets offsets{{{"in", 0}, 100}, {{"in", 5}, 0}, {{"other", 2}, 7}};
  const std::string text = PartitionOffsetsToJson(offsets);
  EXPECT_EQ(text, R"({"offsets":[["in",0,100],["in",5,0],["other",2,7]]})");
  PartitionOffsets back;
  ASSERT_TRUE(PartitionOffsetsFromJson(text, &back));
  EXPECT_EQ(back, offsets);

  PartitionOffsets empty;
  EXPECT_TRUE(PartitionOffsetsFromJson(R"({"offsets":[]})", &empty));
  EXPECT_TRUE(empty.empty());
  for (const char* bad : {"", "[]", "{}", R"({"offsets":{}})", R"({"offsets":[["in",0]]})",
                          R"({"offsets":[[0,0,1]]})", R"({"offsets":[["in","0",1]]})",
                          R"({"offsets":[["in",0,1.5]]})", R"({"offsets":[["in",0,1]])"}) {
    PartitionOffsets out;
    EXPECT_FALSE(PartitionOffsetsFromJson(bad, &out)) << bad;
  }
}

}  // namespace
}  // namespace kayak
