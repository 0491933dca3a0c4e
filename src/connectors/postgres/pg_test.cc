#include "connectors/postgres/pg.h"

#include <gtest/gtest.h>

namespace kayak::pg {
namespace {

std::string Json(unsigned oid, std::string_view text) {
  std::string out;
  AppendValue(oid, text, &out);
  return out;
}

TEST(PgValue, NumbersStayExactAndWordsBecomeStrings) {
  EXPECT_EQ(Json(20, "9007199254740993"), "9007199254740993");
  EXPECT_EQ(Json(23, "-7"), "-7");
  EXPECT_EQ(Json(1700, "12.50"), "12.50");
  EXPECT_EQ(Json(1700, "NaN"), "\"NaN\"");
  EXPECT_EQ(Json(701, "1e+20"), "1e+20");
  EXPECT_EQ(Json(701, "-Infinity"), "\"-Infinity\"");
  EXPECT_EQ(Json(700, "Infinity"), "\"Infinity\"");
  EXPECT_EQ(Json(16, "t"), "true");
  EXPECT_EQ(Json(16, "f"), "false");
}

TEST(PgValue, TimestampsBecomeRfc3339InUtc) {
  EXPECT_EQ(Json(1184, "2026-01-02 03:04:05+00"), "\"2026-01-02T03:04:05Z\"");
  EXPECT_EQ(Json(1184, "2026-01-02 03:04:05.123456+00"), "\"2026-01-02T03:04:05.123456Z\"");
  EXPECT_EQ(Json(1184, "2026-01-02 03:04:05+05:30"), "\"2026-01-02T03:04:05+05:30\"");
  EXPECT_EQ(Json(1184, "2026-01-02 03:04:05-02"), "\"2026-01-02T03:04:05-02:00\"");
  EXPECT_EQ(Json(1114, "2026-01-02 03:04:05"), "\"2026-01-02T03:04:05Z\"");
  EXPECT_EQ(Json(1184, "infinity"), "\"infinity\"");
  EXPECT_EQ(Json(1114, "0044-03-15 12:00:00 BC"), "\"0044-03-15 12:00:00 BC\"");
  EXPECT_EQ(Json(1082, "2026-01-02"), "\"2026-01-02\"");
}

TEST(PgValue, JsonNestsByteaIsBase64AndTheRestIsText) {
  EXPECT_EQ(Json(3802, "{\"a\": [1, null]}"), "{\"a\": [1, null]}");
  EXPECT_EQ(Json(114, "[1,2]"), "[1,2]");
  EXPECT_EQ(Json(17, "\\x00ff10"), "\"AP8Q\"");
  EXPECT_EQ(Json(17, "\\x"), "\"\"");
  EXPECT_EQ(Json(25, "say \"hi\"\n"), "\"say \\\"hi\\\"\\n\"");
  EXPECT_EQ(Json(1007, "{1,2}"), "\"{1,2}\"");  // int[]: its text
}

TEST(PgErrors, ContentErrorsAreDataAndIntegrityClasses) {
  EXPECT_TRUE(IsContentError("22P02"));  // invalid text representation
  EXPECT_TRUE(IsContentError("23505"));  // unique violation
  EXPECT_FALSE(IsContentError("08006"));  // connection failure
  EXPECT_FALSE(IsContentError("42P01"));  // undefined table
  EXPECT_FALSE(IsContentError(""));
}

TEST(PgIdent, QuotesDoubleQuotes) {
  EXPECT_EQ(QuoteIdent("ts"), "\"ts\"");
  EXPECT_EQ(QuoteIdent("a\"b"), "\"a\"\"b\"");
}

}  // namespace
}  // namespace kayak::pg
