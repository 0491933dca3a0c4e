#include "common/json_text.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "common/json_util.h"
#include "common/ndjson.h"

namespace kayak::jtext {
namespace {

FieldPath P(const std::string& s) {
  FieldPath p;
  EXPECT_TRUE(ParseFieldPath(s, &p));
  return p;
}

std::string Set(const std::string& doc, const std::string& path, const std::string& v) {
  std::string out;
  if (!SetPath(doc, P(path), v, &out)) return "<refused>";
  return out;
}

std::string Remove(const std::string& doc, const std::string& path) {
  std::string out;
  if (!RemovePath(doc, P(path), &out)) return "<nothing>";
  return out;
}

TEST(JsonTextTest, SetKeepsEveryOtherByte) {
  const std::string doc = R"( {"a" : 1E2, "s":"caf\u00e9",  "b": [1, -0]} )";
  EXPECT_EQ(Set(doc, "a", "5"), R"( {"a" : 5, "s":"caf\u00e9",  "b": [1, -0]} )");
  EXPECT_EQ(Set(doc, "w", "85.0"), R"( {"a" : 1E2, "s":"caf\u00e9",  "b": [1, -0],"w":85.0} )");
  EXPECT_EQ(Set(doc, "b[1]", "true"), R"( {"a" : 1E2, "s":"caf\u00e9",  "b": [1, true]} )");
  EXPECT_EQ(Set(doc, "n.m", "1"), R"( {"a" : 1E2, "s":"caf\u00e9",  "b": [1, -0],"n":{"m":1}} )");
  EXPECT_EQ(Set("{}", "x", "1"), R"({"x":1})");
  EXPECT_EQ(Set(R"({"n":null})", "n.a.b", "2"), R"({"n":{"a":{"b":2}}})");
  EXPECT_EQ(Set(doc, "a.x", "1"), "<refused>");   // through a number
  EXPECT_EQ(Set(doc, "b[5]", "1"), "<refused>");  // past the array's end
  EXPECT_EQ(Set(doc, "q[0]", "1"), "<refused>");  // no array to index
  EXPECT_EQ(Set(R"({"k\u0065y":1})", "key", "2"), R"({"k\u0065y":2})");  // an escaped key
}

TEST(JsonTextTest, DuplicateKeysReadAndSetTheLastRemoveEvery) {
  const std::string doc = R"({"a":1,"b":2,"a":3})";
  Span s;
  ASSERT_TRUE(FindPath(doc, P("a"), &s));
  EXPECT_EQ(s.of(doc), "3");
  EXPECT_EQ(Set(doc, "a", "9"), R"({"a":1,"b":2,"a":9})");
  EXPECT_EQ(Remove(doc, "a"), R"({"b":2})");
  EXPECT_EQ(Remove(R"({"a":1, "a":2, "b":3})", "a"), R"({"b":3})");
  EXPECT_EQ(Remove(R"({"b":1, "a":2, "a":3})", "a"), R"({"b":1})");
  EXPECT_EQ(Remove(R"({"a":1, "b":2, "a":3})", "a"), R"({"b":2})");
  EXPECT_EQ(Remove(R"({"a":1,"a":2})", "a"), R"({})");
}

TEST(JsonTextTest, RemoveTakesOneSeparator) {
  EXPECT_EQ(Remove(R"({"a":1, "b":2, "c":3})", "a"), R"({"b":2, "c":3})");
  EXPECT_EQ(Remove(R"({"a":1, "b":2, "c":3})", "b"), R"({"a":1, "c":3})");
  EXPECT_EQ(Remove(R"({"a":1, "b":2, "c":3})", "c"), R"({"a":1, "b":2})");
  EXPECT_EQ(Remove(R"({ "a":1 })", "a"), R"({  })");
  EXPECT_EQ(Remove(R"({"t":[1,2,3]})", "t[1]"), R"({"t":[1,3]})");
  EXPECT_EQ(Remove(R"({"d":{"x":1,"y":2}})", "d.y"), R"({"d":{"x":1}})");
  EXPECT_EQ(Remove(R"({"a":1})", "z"), "<nothing>");
}

TEST(JsonTextTest, SetMembersInOnePass) {
  std::string out;
  ASSERT_TRUE(SetMembers(R"({"v":1,"v_sum":0})", {{"v_count", "1"}, {"v_sum", "2.5"}}, &out));
  EXPECT_EQ(out, R"({"v":1,"v_sum":2.5,"v_count":1})");
  ASSERT_TRUE(SetMembers("{ }", {{"a", "1"}, {"b", "2"}}, &out));
  EXPECT_EQ(out, R"({"a":1,"b":2 })");
  EXPECT_FALSE(SetMembers("[1]", {{"a", "1"}}, &out));
}

TEST(JsonTextTest, StringsDecodeAndEscape) {
  std::string s;
  DecodeString(R"("a\"b\\c\/d\n\u00e9\ud83d\ude00")", &s);
  EXPECT_EQ(s, "a\"b\\c/d\n\xc3\xa9\xf0\x9f\x98\x80");
  std::string out;
  AppendString(&out, std::string("q\"\\\n\t\x01\x7f\xc3\xa9", 9));
  EXPECT_EQ(out, Json(std::string("q\"\\\n\t\x01\x7f\xc3\xa9", 9)).dump());
}

TEST(JsonTextTest, NumbersReadAsTheTreeReadThem) {
  for (const char* t : {"0", "-0", "42", "-7", "9223372036854775807", "9223372036854775808",
                        "18446744073709551615", "18446744073709551616", "-9223372036854775809",
                        "1.5", "1E2", "2.5e-3", "1e-400"}) {
    const Json want = Json::parse(t);
    const Number n = ReadNumber(t);
    switch (n.kind) {
      case Number::kInt: EXPECT_TRUE(want.is_number_integer() && want.get<int64_t>() == n.i) << t; break;
      case Number::kUint: EXPECT_TRUE(want.is_number_unsigned() && want.get<uint64_t>() == n.u) << t; break;
      case Number::kFloat:
        EXPECT_TRUE(want.is_number_float()) << t;
        EXPECT_EQ(want.get<double>(), n.d) << t;
        break;
    }
  }
}

// nlohmann refuses a number too large for a double, so the input's check
// (IsJson) refuses such a message and the reader never sees one.
TEST(JsonTextTest, ANumberPastDoubleIsNotJson) {
  EXPECT_TRUE(Json::parse("1e400", nullptr, false).is_discarded());
  EXPECT_FALSE(IsJson("1e400"));
  EXPECT_FALSE(IsJson(R"({"a": 1e400})"));
  EXPECT_EQ(ReadNumber("1e400").d, INFINITY);
}

// Computed floats are written as the tree path wrote them.
TEST(JsonTextTest, DoublesAreWrittenAsNlohmannWroteThem) {
  std::mt19937_64 rng(17);
  std::vector<double> xs = {0.0, -0.0, 1.0, 85.0, 0.1, 1e15, 1e16, 123456789012345.0, 1e-4, 1e-5,
                            1.5e-7, 1e20, 1e100, -2.5, 5e-324, 1.7976931348623157e308,
                            std::nan(""), INFINITY, -INFINITY};
  for (int i = 0; i < 20000; ++i) {
    double d;
    const uint64_t bits = rng();
    std::memcpy(&d, &bits, sizeof d);
    xs.push_back(d);
    xs.push_back(static_cast<double>(static_cast<int64_t>(rng() % 2000000) - 1000000) / 1000.0);
  }
  for (double x : xs) {
    std::string out;
    AppendDouble(&out, x);
    EXPECT_EQ(out, Json(x).dump()) << x;
  }
}

}  // namespace
}  // namespace kayak::jtext
