#include "connectors/clickhouse/ch.h"

#include <gtest/gtest.h>

#include "common/sql_source.h"

namespace kayak {
namespace {

TEST(ChQuote, LiteralsAndIdentifiersEscapeTheirQuotes) {
  EXPECT_EQ(ch::QuoteString("it's \\ here"), "'it\\'s \\\\ here'");
  EXPECT_EQ(ch::QuoteIdent("a`b"), "`a\\`b`");
  EXPECT_EQ(ch::UrlEncode("INSERT INTO t FORMAT JSONEachRow"),
            "INSERT%20INTO%20t%20FORMAT%20JSONEachRow");
  EXPECT_EQ(ch::UrlEncode("a&b=c/é"), "a%26b%3Dc%2F%C3%A9");
}

TEST(SqlCursor, RoundTripsTheJsonValues) {
  std::string wm, tb;
  ASSERT_TRUE(DecodeCursor(EncodeCursor("\"2026-01-01T00:00:00Z\"", "18446744073709551615"),
                           &wm, &tb).ok());
  EXPECT_EQ(wm, "\"2026-01-01T00:00:00Z\"");
  EXPECT_EQ(tb, "18446744073709551615");
  ASSERT_TRUE(DecodeCursor(EncodeCursor("7", ""), &wm, &tb).ok());
  EXPECT_EQ(wm, "7");
  EXPECT_EQ(tb, "");
  EXPECT_EQ(DecodeCursor("offset 12", &wm, &tb).code(), Code::kCorruption);
  EXPECT_EQ(DecodeCursor("{\"tiebreak\":1}", &wm, &tb).code(), Code::kCorruption);
}

}  // namespace
}  // namespace kayak
