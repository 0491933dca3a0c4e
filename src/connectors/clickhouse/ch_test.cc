#include "connectors/clickhouse/ch.h"

#include <gtest/gtest.h>

#include "connectors/shared/sql_source.h"

namespace kayak {
namespace {

TEST(ChQuote, LiteralsAndIdentifiersEscapeTheirQuotes) {
  EXPECT_EQ(ch::QuoteString("it's \\ here"), "'it\\'s \\\\ here'");
  EXPECT_EQ(ch::QuoteIdent("a`b"), "`a\\`b`");
  EXPECT_EQ(ch::UrlEncode("INSERT INTO t FORMAT JSONEachRow"),
            "INSERT%20INTO%20t%20FORMAT%20JSONEachRow");
  EXPECT_EQ(ch::UrlEncode("a&b=c/é"), "a%26b%3Dc%2F%C3%A9");
}

// A DateTime64 watermark keeps its fractional seconds both ways: formatted
// to whole seconds, every poll would read the last second's later rows again
// (the cursor "...:05Z" is before "...:05.250").
TEST(ChDateTime, ADateTime64CursorKeepsItsFractionalSeconds) {
  EXPECT_EQ(ch::DateTime64Precision("DateTime64(3)"), 3);
  EXPECT_EQ(ch::DateTime64Precision("DateTime64(6, 'Europe/Paris')"), 6);
  EXPECT_EQ(ch::DateTime64Precision("DateTime('UTC')"), -1);
  EXPECT_EQ(ch::DateTime64Precision("Date"), -1);
  EXPECT_EQ(ch::UtcTextOf("`ts`", "DateTime('UTC')"),
            "formatDateTime(`ts`, '%Y-%m-%dT%H:%M:%SZ', 'UTC')");
  const std::string expr = ch::UtcTextOf("`ts`", "DateTime64(3)");
  EXPECT_EQ(expr.find("formatDateTime"), std::string::npos) << expr;
  EXPECT_NE(expr.find("toString(toTimeZone(`ts`, 'UTC'))"), std::string::npos) << expr;
  EXPECT_EQ(ch::DateTimeLiteral("2026-01-02T03:04:05.250Z", "DateTime64(3)"),
            "parseDateTime64BestEffort('2026-01-02T03:04:05.250Z', 3)");
  EXPECT_EQ(ch::DateTimeLiteral("2026-01-02T03:04:05Z", "DateTime"),
            "parseDateTimeBestEffort('2026-01-02T03:04:05Z')");
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
