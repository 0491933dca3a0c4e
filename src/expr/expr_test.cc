#include "expr/expr.h"

#include <gtest/gtest.h>

#include "common/json_util.h"

namespace kayak::expr {
namespace {

FakeClock clock_fixed(1700000000123);

const char* const kFields =
    R"({"a": 7, "b": 2, "f": 2.5, "s": "Hello", "t": "lo", "yes": true,
    "no": false, "nul": null, "arr": [10, 20, 30], "obj": {"x": {"y": 5}, "k": "v"},
    "weird key": 1})";

// The result as a tree (missing as a discarded value), to compare.
Result<Json> Run(const std::string& text) {
  CompileError err;
  auto e = Compile(text, &err);
  if (e == nullptr) return Status::Invalid("compile: " + err.message);
  const Document doc(kFields);
  Scratch scratch;
  Value v;
  Status st = e->Eval(doc, &scratch, clock_fixed, &v);
  if (!st.ok()) return st;
  if (v.missing()) return Json(Json::value_t::discarded);
  std::string json;
  AppendJson(v, &json);
  return Json::parse(json);
}

Json Ok(const std::string& text) {
  auto r = Run(text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status().message();
  return r.ok() ? r.value() : Json();
}

std::string Err(const std::string& text) {
  auto r = Run(text);
  EXPECT_FALSE(r.ok()) << text << " unexpectedly gave " << (r.ok() ? r->dump() : "");
  return r.status().message();
}

TEST(Expr, Literals) {
  EXPECT_EQ(Ok("42"), Json(42));
  EXPECT_EQ(Ok("2.5"), Json(2.5));
  EXPECT_EQ(Ok("1e3"), Json(1000.0));
  EXPECT_EQ(Ok("'x y'"), Json("x y"));
  EXPECT_EQ(Ok("\"q\\\"\""), Json("q\""));
  EXPECT_EQ(Ok("true"), Json(true));
  EXPECT_EQ(Ok("null"), Json(nullptr));
  EXPECT_EQ(Ok("[1, 'a', true]"), Json::parse(R"([1, "a", true])"));
}

TEST(Expr, FieldPaths) {
  EXPECT_EQ(Ok("a"), Json(7));
  EXPECT_EQ(Ok("obj.x.y"), Json(5));
  EXPECT_EQ(Ok("arr[1]"), Json(20));
  EXPECT_EQ(Ok("obj['k']"), Json("v"));
  EXPECT_TRUE(Ok("missing").is_discarded());
  EXPECT_TRUE(Ok("arr[9]").is_discarded());
}

TEST(Expr, Arithmetic) {
  EXPECT_EQ(Ok("a + b"), Json(9));
  EXPECT_EQ(Ok("a - b"), Json(5));
  EXPECT_EQ(Ok("a * b"), Json(14));
  EXPECT_EQ(Ok("a / b"), Json(3.5));  // division is always float
  EXPECT_EQ(Ok("a % b"), Json(1));
  EXPECT_EQ(Ok("f * 2"), Json(5.0));
  EXPECT_EQ(Ok("-a"), Json(-7));
  EXPECT_EQ(Ok("-f"), Json(-2.5));
  EXPECT_EQ(Ok("1 + 2 * 3"), Json(7));
  EXPECT_EQ(Ok("(1 + 2) * 3"), Json(9));
  EXPECT_EQ(Ok("s + ' ' + t"), Json("Hello lo"));
  EXPECT_EQ(Ok("(a - 32) * 5 / 9"), Json((7.0 - 32) * 5 / 9));
}

TEST(Expr, ArithmeticErrors) {
  EXPECT_NE(Err("a / 0").find("division by zero"), std::string::npos);
  EXPECT_NE(Err("a % 0").find("modulo by zero"), std::string::npos);
  EXPECT_NE(Err("s + a").find("type error"), std::string::npos);
  EXPECT_NE(Err("yes * 2").find("type error"), std::string::npos);
  EXPECT_NE(Err("missing + 1").find("field 'missing' is missing"), std::string::npos);
  EXPECT_NE(Err("nul + 1").find("type error"), std::string::npos);
  EXPECT_NE(Err("-s").find("type error"), std::string::npos);
  EXPECT_NE(Err("9223372036854775807 + a").find("overflow"), std::string::npos);
}

TEST(Expr, Comparison) {
  EXPECT_EQ(Ok("a == 7"), Json(true));
  EXPECT_EQ(Ok("a == 7.0"), Json(true));
  EXPECT_EQ(Ok("a != 7"), Json(false));
  EXPECT_EQ(Ok("a < 8"), Json(true));
  EXPECT_EQ(Ok("a <= 7"), Json(true));
  EXPECT_EQ(Ok("a > 7"), Json(false));
  EXPECT_EQ(Ok("a >= 7"), Json(true));
  EXPECT_EQ(Ok("f < a"), Json(true));
  EXPECT_EQ(Ok("s < t"), Json(true));  // "Hello" < "lo" bytewise
  EXPECT_EQ(Ok("s == 'Hello'"), Json(true));
  EXPECT_EQ(Ok("missing == null"), Json(true));
  EXPECT_EQ(Ok("nul == null"), Json(true));
  EXPECT_EQ(Ok("a == 'a'"), Json(false));
  EXPECT_EQ(Ok("arr == [10, 20, 30]"), Json(true));
  EXPECT_NE(Err("s < 1").find("type error"), std::string::npos);
  EXPECT_NE(Err("missing > 1").find("missing"), std::string::npos);
}

TEST(Expr, Logic) {
  EXPECT_EQ(Ok("yes && !no"), Json(true));
  EXPECT_EQ(Ok("no || yes"), Json(true));
  EXPECT_EQ(Ok("no && missing > 1"), Json(false));  // short-circuit
  EXPECT_EQ(Ok("yes || missing > 1"), Json(true));
  EXPECT_EQ(Ok("a > 1 && b > 1 || no"), Json(true));
  EXPECT_NE(Err("a && yes").find("type error"), std::string::npos);
  EXPECT_NE(Err("!a").find("type error"), std::string::npos);
  EXPECT_NE(Err("!missing").find("missing"), std::string::npos);
}

TEST(Expr, In) {
  EXPECT_EQ(Ok("a in [1, 7]"), Json(true));
  EXPECT_EQ(Ok("3 in arr"), Json(false));
  EXPECT_EQ(Ok("20 in arr"), Json(true));
  EXPECT_EQ(Ok("'ell' in s"), Json(true));
  EXPECT_EQ(Ok("'k' in obj"), Json(true));
  EXPECT_EQ(Ok("'zz' in obj"), Json(false));
  EXPECT_NE(Err("1 in s").find("type error"), std::string::npos);
  EXPECT_NE(Err("a in 5").find("type error"), std::string::npos);
}

TEST(Expr, Functions) {
  EXPECT_EQ(Ok("len(s)"), Json(5));
  EXPECT_EQ(Ok("len(arr)"), Json(3));
  EXPECT_EQ(Ok("len(obj)"), Json(2));
  EXPECT_EQ(Ok("lower(s)"), Json("hello"));
  EXPECT_EQ(Ok("upper(s)"), Json("HELLO"));
  EXPECT_EQ(Ok("now()"), Json(int64_t{1700000000123}));
  EXPECT_EQ(Ok("coalesce(missing, nul, b)"), Json(2));
  EXPECT_EQ(Ok("coalesce(missing)"), Json(nullptr));
  EXPECT_NE(Err("len(a)").find("type error"), std::string::npos);
  EXPECT_NE(Err("lower(a)").find("type error"), std::string::npos);
}

TEST(Expr, CompileErrorsCarryTheOffset) {
  struct Case {
    const char* text;
    size_t offset;
    const char* fragment;
  };
  const Case cases[] = {
      {"a +", 3, "unexpected end"},
      {"a + )", 4, "unexpected ')'"},
      {"foo(1)", 0, "unknown function 'foo'"},
      {"len(1, 2)", 0, "takes 1 argument"},
      {"'abc", 0, "unterminated"},
      {"a # b", 2, "unexpected character"},
      {"1 + 'x'", 2, "type error"},  // literal-only sub-expressions are checked early
      {"(a", 2, "expected ')'"},
      {"a.", 2, "expected a field name"},
  };
  for (const auto& c : cases) {
    CompileError err;
    EXPECT_EQ(Compile(c.text, &err), nullptr) << c.text;
    EXPECT_EQ(err.offset, c.offset) << c.text << ": " << err.message;
    EXPECT_NE(err.message.find(c.fragment), std::string::npos) << c.text << ": " << err.message;
  }
}

}  // namespace
}  // namespace kayak::expr
