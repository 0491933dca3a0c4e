#include "connectors/redis/client.h"

#include <gtest/gtest.h>

namespace kayak::redis {
namespace {

TEST(RedisUrl, Parts) {
  Address a;
  std::string error;
  ASSERT_TRUE(ParseUrl("redis://127.0.0.1:6380", &a, &error)) << error;
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 6380);
  EXPECT_EQ(a.db, 0);
  ASSERT_TRUE(ParseUrl("redis://:secret@host/3", &a, &error)) << error;
  EXPECT_EQ(a.host, "host");
  EXPECT_EQ(a.port, 6379);
  EXPECT_EQ(a.password, "secret");
  EXPECT_EQ(a.user, "");
  EXPECT_EQ(a.db, 3);
  ASSERT_TRUE(ParseUrl("redis://u:p@h:1", &a, &error));
  EXPECT_EQ(a.user, "u");
  EXPECT_EQ(a.password, "p");
  EXPECT_FALSE(ParseUrl("http://h", &a, &error));
  EXPECT_FALSE(a.tls);
  ASSERT_TRUE(ParseUrl("rediss://:pw@h:6380/2", &a, &error)) << error;
  EXPECT_TRUE(a.tls);
  EXPECT_EQ(a.host, "h");
  EXPECT_EQ(a.port, 6380);
  EXPECT_EQ(a.password, "pw");
  EXPECT_EQ(a.db, 2);
  EXPECT_FALSE(ParseUrl("http://h", &a, &error));
  EXPECT_NE(error.find("rediss://"), std::string::npos) << error;
  EXPECT_FALSE(ParseUrl("redis://h:99999", &a, &error));
  EXPECT_FALSE(ParseUrl("redis://h/x", &a, &error));
}

TEST(RedisEntryId, ParsesAndOrders) {
  EXPECT_EQ(ParseId("1700000000000-5"), EntryId(1700000000000, 5));
  EXPECT_EQ(ParseId("12"), EntryId(12, 0));
  EXPECT_LT(ParseId("9-10"), ParseId("10-0"));  // numbers, not text
  EXPECT_LT(ParseId("10-2"), ParseId("10-10"));
  EXPECT_EQ(IdText({7, 3}), "7-3");
}

}  // namespace
}  // namespace kayak::redis
