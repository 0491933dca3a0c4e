// The differential test of issue 17: transforms that read and patch a
// message's text against the tree path they replaced (kept here, and only
// here, as the reference: nlohmann's ordered_json, the old evaluator).
//
// For 100,000 random messages (nested objects and arrays, unicode escapes,
// big integers, duplicate keys, 1e400, -0) and random filter / map / remove /
// rename chains, both paths must give the same JSON value (same fields in the
// same order, same types, equal numbers) or the same error; and the new
// path's bytes must not depend on which batch a message travelled in.
//
// Two documented differences are part of the reference:
// - an integer above int64 (up to uint64) computes as a float (the tree path
//   wrapped it to a negative int64);
// - a computed inf or nan is null at once (JSON has neither; the tree path
//   kept inf in the tree until it wrote null at the end of the pipeline).
// JSON has no inf, so the comparison takes a non-finite float as null. A
// number past a double (1e400) is refused as not JSON by both paths.
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "../../tests/unit/test_util.h"
#include "common/json_text.h"
#include "common/json_util.h"
#include "common/ndjson.h"
#include "state/bucket.h"
#include "expr/ast.h"
#include "expr/expr.h"

namespace kayak {
namespace {

using expr::Node;
using expr::Op;

// ---- the reference: the tree path ----

bool IsInt(const Json& v) {
  return v.is_number_integer() &&
         !(v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX));
}
double AsDouble(const Json& v) { return v.get<double>(); }

std::string Describe(const Json& v) {
  if (v.is_discarded()) return "a missing field";
  return JsonTypeName(v);
}

Status TypeError(Op op, const Json& a, const Json* b) {
  std::string msg = std::string("type error: '") + expr::OpText(op) + "' cannot take " + Describe(a);
  if (b != nullptr) msg += " and " + Describe(*b);
  return Status::Invalid(msg);
}

bool ValuesEqual(const Json& a, const Json& b) {
  const bool a_null = a.is_null() || a.is_discarded();
  const bool b_null = b.is_null() || b.is_discarded();
  if (a_null || b_null) return a_null && b_null;
  if (a.is_number() && b.is_number()) {
    if (IsInt(a) && IsInt(b)) return a.get<int64_t>() == b.get<int64_t>();
    return AsDouble(a) == AsDouble(b);
  }
  return a == b;
}

Json LiteralJson(const expr::Value& v) {
  switch (v.type) {
    case expr::Value::Type::kNull: return Json(nullptr);
    case expr::Value::Type::kBool: return Json(v.b);
    case expr::Value::Type::kInt: return Json(v.i);
    case expr::Value::Type::kFloat: return Json(v.d);
    case expr::Value::Type::kString: return Json(std::string(v.str));
    default: return Json::parse(v.json);
  }
}

Result<Json> RefEval(const Node& n, const Json& root) {
  switch (n.op) {
    case Op::kLiteral: return LiteralJson(n.literal);
    case Op::kPath: {
      const Json* v = LookupPath(root, n.path);
      if (v == nullptr) return Json(Json::value_t::discarded);
      return *v;
    }
    case Op::kList: {
      Json arr = Json::array();
      for (const auto& k : n.kids) {
        auto v = RefEval(*k, root);
        if (!v.ok()) return v;
        if (v->is_discarded()) return Status::Invalid("a list element is a missing field");
        arr.push_back(std::move(v.value()));
      }
      return arr;
    }
    case Op::kCall: {
      if (n.func == expr::Func::kCoalesce) {
        for (const auto& k : n.kids) {
          auto v = RefEval(*k, root);
          if (!v.ok()) return v;
          if (!v->is_discarded() && !v->is_null()) return v;
        }
        return Json(nullptr);
      }
      auto v = RefEval(*n.kids[0], root);
      if (!v.ok()) return v;
      const Json& x = *v;
      if (n.func == expr::Func::kLen) {
        if (x.is_string()) return Json(static_cast<int64_t>(x.get_ref<const std::string&>().size()));
        if (x.is_array() || x.is_object()) return Json(static_cast<int64_t>(x.size()));
        return Status::Invalid("type error: len() cannot take " + Describe(x));
      }
      if (!x.is_string()) {
        return Status::Invalid(std::string("type error: ") +
                               (n.func == expr::Func::kLower ? "lower" : "upper") +
                               "() cannot take " + Describe(x));
      }
      std::string s = x.get<std::string>();
      for (char& c : s) {
        const auto u = static_cast<unsigned char>(c);
        c = static_cast<char>(n.func == expr::Func::kLower ? std::tolower(u) : std::toupper(u));
      }
      return Json(std::move(s));
    }
    case Op::kNot: {
      auto v = RefEval(*n.kids[0], root);
      if (!v.ok()) return v;
      if (v->is_discarded() && n.kids[0]->op == Op::kPath) {
        return Status::Invalid("field '" + FieldPathToString(n.kids[0]->path) + "' is missing");
      }
      if (!v->is_boolean()) return TypeError(Op::kNot, *v, nullptr);
      return Json(!v->get<bool>());
    }
    case Op::kNeg: {
      auto v = RefEval(*n.kids[0], root);
      if (!v.ok()) return v;
      if (IsInt(*v)) {
        const int64_t x = v->get<int64_t>();
        if (x == INT64_MIN) return Status::Invalid("integer overflow in '-'");
        return Json(-x);
      }
      if (v->is_number()) return Json(-AsDouble(*v));
      return TypeError(Op::kNeg, *v, nullptr);
    }
    case Op::kOr:
    case Op::kAnd: {
      auto a = RefEval(*n.kids[0], root);
      if (!a.ok()) return a;
      if (!a->is_boolean()) return TypeError(n.op, *a, nullptr);
      const bool av = a->get<bool>();
      if (n.op == Op::kOr && av) return Json(true);
      if (n.op == Op::kAnd && !av) return Json(false);
      auto b = RefEval(*n.kids[1], root);
      if (!b.ok()) return b;
      if (!b->is_boolean()) return TypeError(n.op, *b, nullptr);
      return Json(b->get<bool>());
    }
    default: break;
  }
  auto a = RefEval(*n.kids[0], root);
  if (!a.ok()) return a;
  auto b = RefEval(*n.kids[1], root);
  if (!b.ok()) return b;
  if (n.op != Op::kEq && n.op != Op::kNe) {
    for (int i = 0; i < 2; ++i) {
      const Json& v = i == 0 ? *a : *b;
      if (v.is_discarded() && n.kids[i]->op == Op::kPath) {
        return Status::Invalid("field '" + FieldPathToString(n.kids[i]->path) + "' is missing");
      }
    }
  }
  const Json& x = *a;
  const Json& y = *b;
  switch (n.op) {
    case Op::kEq: return Json(ValuesEqual(x, y));
    case Op::kNe: return Json(!ValuesEqual(x, y));
    case Op::kIn:
      if (x.is_discarded()) return TypeError(Op::kIn, x, &y);
      if (y.is_array()) {
        for (const auto& e : y) {
          if (ValuesEqual(x, e)) return Json(true);
        }
        return Json(false);
      }
      if (y.is_string() && x.is_string()) {
        return Json(y.get_ref<const std::string&>().find(x.get_ref<const std::string&>()) !=
                    std::string::npos);
      }
      if (y.is_object() && x.is_string()) return Json(y.contains(x.get_ref<const std::string&>()));
      return TypeError(Op::kIn, x, &y);
    case Op::kLt:
    case Op::kLe:
    case Op::kGt:
    case Op::kGe: {
      int c = 0;
      if (x.is_number() && y.is_number()) {
        if (IsInt(x) && IsInt(y)) {
          const int64_t p = x.get<int64_t>(), q = y.get<int64_t>();
          c = p < q ? -1 : (p > q ? 1 : 0);
        } else {
          const double p = AsDouble(x), q = AsDouble(y);
          if (std::isnan(p) || std::isnan(q)) return Json(false);
          c = p < q ? -1 : (p > q ? 1 : 0);
        }
      } else if (x.is_string() && y.is_string()) {
        const int r = x.get_ref<const std::string&>().compare(y.get_ref<const std::string&>());
        c = r < 0 ? -1 : (r > 0 ? 1 : 0);
      } else {
        return TypeError(n.op, x, &y);
      }
      if (n.op == Op::kLt) return Json(c < 0);
      if (n.op == Op::kLe) return Json(c <= 0);
      if (n.op == Op::kGt) return Json(c > 0);
      return Json(c >= 0);
    }
    default: break;
  }
  // arithmetic
  if (n.op == Op::kAdd && x.is_string() && y.is_string()) {
    return Json(x.get_ref<const std::string&>() + y.get_ref<const std::string&>());
  }
  if (!x.is_number() || !y.is_number()) return TypeError(n.op, x, &y);
  if (n.op == Op::kDiv) {
    const double d = AsDouble(y);
    if (d == 0) return Status::Invalid("division by zero");
    return Json(AsDouble(x) / d);
  }
  if (IsInt(x) && IsInt(y)) {
    const int64_t p = x.get<int64_t>(), q = y.get<int64_t>();
    int64_t r = 0;
    bool overflow = false;
    switch (n.op) {
      case Op::kAdd: overflow = __builtin_add_overflow(p, q, &r); break;
      case Op::kSub: overflow = __builtin_sub_overflow(p, q, &r); break;
      case Op::kMul: overflow = __builtin_mul_overflow(p, q, &r); break;
      default:
        if (q == 0) return Status::Invalid("modulo by zero");
        r = q == -1 ? 0 : p % q;
    }
    if (overflow) return Status::Invalid(std::string("integer overflow in '") + expr::OpText(n.op) + "'");
    return Json(r);
  }
  const double p = AsDouble(x), q = AsDouble(y);
  switch (n.op) {
    case Op::kAdd: return Json(p + q);
    case Op::kSub: return Json(p - q);
    case Op::kMul: return Json(p * q);
    default:
      if (q == 0) return Status::Invalid("modulo by zero");
      return Json(std::fmod(p, q));
  }
}

// Returns a slot for `path`, creating objects on the way (a null becomes an
// object). nullptr if a step walks through anything else, or past an array.
Json* MutablePath(Json& root, const FieldPath& path) {
  Json* cur = &root;
  for (const auto& step : path) {
    if (step.index >= 0) {
      if (!cur->is_array() || static_cast<size_t>(step.index) >= cur->size()) return nullptr;
      cur = &(*cur)[static_cast<size_t>(step.index)];
    } else {
      if (cur->is_null()) *cur = Json::object();
      if (!cur->is_object()) return nullptr;
      cur = &(*cur)[step.key];
    }
  }
  return cur;
}

void ErasePath(Json& root, const FieldPath& path) {
  const FieldPath parent(path.begin(), path.end() - 1);
  Json* p = parent.empty() ? &root : const_cast<Json*>(LookupPath(root, parent));
  if (p == nullptr) return;
  const PathStep& last = path.back();
  if (last.index >= 0) {
    if (p->is_array() && static_cast<size_t>(last.index) < p->size()) {
      p->erase(static_cast<size_t>(last.index));
    }
  } else if (p->is_object()) {
    p->erase(last.key);
  }
}

// One step of a chain, as config and as the reference runs it.
struct Step {
  enum Kind { kFilter, kMap, kRemove, kRename } kind = kFilter;
  std::vector<std::pair<std::string, std::string>> entries;  // (path or name, expr or path)
};

std::string YamlQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "''";
    else out += c;
  }
  return out + "'";
}

std::string YamlOf(const Step& s) {
  switch (s.kind) {
    case Step::kFilter: return "filter: " + YamlQuote(s.entries[0].second);
    case Step::kRemove: {
      std::string y = "remove: [";
      for (size_t i = 0; i < s.entries.size(); ++i) y += (i ? ", " : "") + YamlQuote(s.entries[i].second);
      return y + "]";
    }
    default: {
      std::string y = s.kind == Step::kMap ? "map: {" : "rename: {";
      for (size_t i = 0; i < s.entries.size(); ++i) {
        y += (i ? ", " : "") + YamlQuote(s.entries[i].first) + ": " + YamlQuote(s.entries[i].second);
      }
      return y + "}";
    }
  }
}

FieldPath PathOf(const std::string& text) {
  FieldPath p;
  EXPECT_TRUE(ParseFieldPath(text, &p)) << text;
  return p;
}

// The tree path: the step on a parsed message; false = dropped by a filter.
Result<bool> RefStep(const Step& s, Json* fields) {
  if (s.kind != Step::kFilter && !fields->is_object()) {
    return Status::Invalid(std::string("payload is a JSON ") + JsonTypeName(*fields) +
                           ", not an object");
  }
  switch (s.kind) {
    case Step::kFilter: {
      expr::CompileError err;
      auto e = expr::Compile(s.entries[0].second, &err);
      auto v = RefEval(e->root(), *fields);
      if (!v.ok()) return v.status();
      if (!v->is_boolean()) {
        return Status::Invalid(std::string("filter expression gave ") +
                               (v->is_discarded() ? "a missing field" : JsonTypeName(*v)) +
                               ", not a bool");
      }
      return v->get<bool>();
    }
    case Step::kMap:
      for (const auto& [name, text] : s.entries) {
        expr::CompileError err;
        auto e = expr::Compile(text, &err);
        auto v = RefEval(e->root(), *fields);
        if (!v.ok()) return Status::Invalid("'" + name + "': " + v.status().message());
        if (v->is_discarded()) {
          return Status::Invalid("'" + name + "': the expression '" + text + "' names a missing field");
        }
        Json* slot = MutablePath(*fields, PathOf(name));
        if (slot == nullptr) return Status::Invalid("cannot set '" + name + "': a parent is not an object");
        *slot = std::move(v.value());
        if (slot->is_number_float() && !std::isfinite(slot->get<double>())) *slot = nullptr;
      }
      return true;
    case Step::kRemove:
      for (const auto& e : s.entries) ErasePath(*fields, PathOf(e.second));
      return true;
    case Step::kRename:
      for (const auto& [from, to] : s.entries) {
        const Json* v = LookupPath(*fields, PathOf(from));
        if (v == nullptr) continue;
        Json moved = *v;
        ErasePath(*fields, PathOf(from));
        Json* slot = MutablePath(*fields, PathOf(to));
        if (slot == nullptr) {
          return Status::Invalid("cannot rename to '" + FieldPathToString(PathOf(to)) +
                                 "': a parent is not an object");
        }
        *slot = std::move(moved);
      }
      return true;
  }
  return true;
}

// Same JSON value; a non-finite float is null (JSON has neither).
bool SameValue(const Json& a, const Json& b) {
  auto nullish = [](const Json& v) {
    return v.is_null() || (v.is_number_float() && !std::isfinite(v.get<double>()));
  };
  if (nullish(a) || nullish(b)) return nullish(a) && nullish(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_number_float() || b.is_number_float()) return a.get<double>() == b.get<double>();
    if (a.is_number_unsigned() && b.is_number_unsigned()) return a.get<uint64_t>() == b.get<uint64_t>();
    if (a.is_number_unsigned() || b.is_number_unsigned()) {
      const Json& u = a.is_number_unsigned() ? a : b;
      const Json& s = a.is_number_unsigned() ? b : a;
      return s.get<int64_t>() >= 0 && static_cast<uint64_t>(s.get<int64_t>()) == u.get<uint64_t>();
    }
    return a.get<int64_t>() == b.get<int64_t>();
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!SameValue(a[i], b[i])) return false;
    }
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    auto i = a.begin();
    auto j = b.begin();
    for (; i != a.end(); ++i, ++j) {
      if (i.key() != j.key() || !SameValue(*i, *j)) return false;
    }
    return true;
  }
  return a == b;
}

// ---- random messages and chains ----

class Gen {
 public:
  explicit Gen(uint32_t seed) : rng_(seed) {}
  size_t Pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  template <typename T>
  const T& Of(const std::vector<T>& v) { return v[Pick(v.size())]; }

  std::string Ws() {
    static const std::vector<std::string> kWs = {"", "", "", " ", "\n ", "\t"};
    return Of(kWs);
  }

  std::string Scalar() {
    static const std::vector<std::string> kScalars = {
        "0", "-0", "1", "-1", "7", "42", "3.5", "-0.0", "1e2", "1E2", "2.5e-3", "1e308", "-1.7976931348623157e308",
        "1e-400", "0.1", "9223372036854775807", "9223372036854775808", "18446744073709551615",
        "18446744073709551616", "-9223372036854775808", "-9223372036854775809",
        "123456789012345678901234567890", "true", "false", "null", "\"hello\"", "\"Hello\"",
        "\"caf\\u00e9\"", "\"\\ud83d\\ude00\"", "\"tab\\tq\\\"\"", "\"a\\/b\"", "\"\"", "\"lo\"",
        "\"\xc3\xbcn\xc3\xaf\"", "\"k\\u0065y\"", "\"x\""};
    return Of(kScalars);
  }

  std::string Key() {
    static const std::vector<std::string> kKeys = {"\"a\"", "\"b\"", "\"c\"", "\"d\"", "\"e\"",
                                                   "\"x y\"", "\"k\\u0065y\"", "\"key\"", "\"n\""};
    return Of(kKeys);
  }

  std::string Value(int depth) {
    const size_t r = Pick(10);
    if (depth >= 3 || r < 6) return Scalar();
    if (r < 8) {
      std::string s = "[" + Ws();
      const size_t n = Pick(4);
      for (size_t i = 0; i < n; ++i) s += (i ? "," + Ws() : "") + Value(depth + 1) + Ws();
      return s + "]";
    }
    return Object(depth + 1);
  }

  std::string Object(int depth) {
    std::string s = "{" + Ws();
    const size_t n = Pick(depth == 0 ? 8 : 4);
    for (size_t i = 0; i < n; ++i) {
      s += (i ? "," + Ws() : "") + Key() + Ws() + ":" + Ws() + Value(depth) + Ws();
    }
    return s + "}";
  }

  std::string Message() {
    const size_t r = Pick(50);
    if (r == 0) return "[1, 2]";
    if (r == 1) return Scalar();
    if (r == 2) return Pick(2) ? "{\"a\": 1" : "{\"a\": 1e400}";  // not JSON (1e400 is past a double)
    return Ws() + Object(0) + Ws();
  }

  std::string Path() {
    static const std::vector<std::string> kPaths = {"a", "b", "c", "d", "e", "key", "n", "a.b",
                                                    "d.a", "e[0]", "e[1]", "e[0].a", "n.n.n", "b[2]"};
    return Of(kPaths);
  }

  std::string Literal() {
    static const std::vector<std::string> kLits = {"1", "0", "-1", "2.5", "42", "1e308",
                                                   "'hello'", "'lo'", "''", "true", "false",
                                                   "null", "[1, 'x', null]", "[]"};
    return Of(kLits);
  }

  std::string Operand() { return Pick(3) == 0 ? Literal() : Path(); }

  std::string Expr(int depth) {
    static const std::vector<std::string> kBin = {"+", "-", "*", "/", "%", "==", "!=", "<",
                                                  "<=", ">", ">=", "in", "&&", "||"};
    const size_t r = Pick(12);
    if (depth >= 2 || r < 3) return Operand();
    if (r < 8) return "(" + Expr(depth + 1) + " " + Of(kBin) + " " + Expr(depth + 1) + ")";
    static const std::vector<std::string> kFuncs = {"len", "lower", "upper"};
    if (r == 8) return Of(kFuncs) + "(" + Expr(depth + 1) + ")";
    if (r == 9) return "coalesce(" + Path() + ", " + Expr(depth + 1) + ")";
    if (r == 10) return (Pick(2) ? "!" : "-") + Expr(depth + 1);
    return "[" + Operand() + ", " + Operand() + "]";
  }

  std::string BoolExpr() {
    static const std::vector<std::string> kRel = {"==", "!=", "<", "<=", ">", ">=", "in"};
    const size_t r = Pick(6);
    if (r == 0) return Expr(0);
    if (r == 1) return "len(" + Path() + ") > 1";
    if (r == 2) return "lower(" + Path() + ") == 'hello'";
    return Operand() + " " + Of(kRel) + " " + Operand();
  }

  std::vector<Step> Chain() {
    std::vector<Step> chain(1 + Pick(3));
    for (Step& s : chain) {
      s.kind = static_cast<Step::Kind>(Pick(4));
      const size_t n = 1 + Pick(2);
      switch (s.kind) {
        case Step::kFilter: s.entries = {{"", BoolExpr()}}; break;
        case Step::kMap:
          for (size_t i = 0; i < n; ++i) {
            static const std::vector<std::string> kTargets = {"a", "b", "w", "d.x", "n.m.o",
                                                              "e[0]", "x y", "key"};
            s.entries.emplace_back(Of(kTargets), Expr(0));
          }
          break;
        case Step::kRemove:
          for (size_t i = 0; i < n; ++i) s.entries.emplace_back("", Pick(3) ? Path() : "x y");
          break;
        case Step::kRename: s.entries.emplace_back(Path(), Path()); break;
      }
    }
    return chain;
  }

 private:
  std::mt19937 rng_;
};

struct Outcome {
  bool error = false;
  std::string message;  // the error
  bool kept = false;
  std::string payload;
};

// Every index of members a transform kept in the batch is what a scan of the
// message's bytes finds (the transforms after it trust it).
void ExpectKeptFieldsTrue(const Batch& b) {
  for (const Message& m : b.messages) {
    size_t root = 0;
    const FieldSpan* spans = nullptr;
    size_t n = 0;
    if (!b.FieldsOf(m, &root, &spans, &n)) continue;
    std::vector<jtext::Member> scan;
    jtext::Members(m.payload(), root, &scan);
    ASSERT_EQ(n, scan.size()) << m.payload() << " root " << root << " size " << m.payload().size() << " json " << m.json_known();
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(spans[i].key_begin, scan[i].key.begin) << m.payload();
      EXPECT_EQ(spans[i].key_end, scan[i].key.end) << m.payload();
      EXPECT_EQ(spans[i].value_begin, scan[i].value.begin) << m.payload();
      EXPECT_EQ(spans[i].value_end, scan[i].value.end) << m.payload();
    }
  }
}

Outcome RunNew(const std::vector<std::unique_ptr<Transform>>& chain, Batch* b, size_t index) {
  Outcome o;
  for (const auto& t : chain) {
    Status st = t->Process(b);
    if (!st.ok()) {
      o.error = true;
      o.message = st.message();
      return o;
    }
    ExpectKeptFieldsTrue(*b);
  }
  o.kept = index < b->messages.size();
  if (o.kept) o.payload = b->messages[index].payload();
  return o;
}

TEST(DifferentialTest, TextPathMatchesTheTreePath) {
  constexpr int kMessages = 100000;
  Gen gen(20261201);
  const Clock* clock = SystemClock::Get();
  int compared = 0, errors = 0, dropped = 0, skipped_config = 0;
  for (int i = 0; i < kMessages; ++i) {
    const std::string text = gen.Message();
    const std::vector<Step> steps = gen.Chain();
    std::vector<std::unique_ptr<Transform>> chain;
    std::string config_errors;
    for (const Step& s : steps) {
      auto t = testing::MakeTransform(YamlOf(s), clock, nullptr, &config_errors);
      if (t == nullptr) break;
      chain.push_back(std::move(t));
    }
    if (chain.size() != steps.size()) {  // an expression with a literal type error
      ++skipped_config;
      continue;
    }
    // The new path, the message alone in its batch.
    Batch b = testing::MakeBatch({text});
    const Outcome got = RunNew(chain, &b, 0);

    // The tree path.
    Outcome want;
    Json fields = Json::parse(text, nullptr, false);
    if (fields.is_discarded()) {
      want.error = true;
      want.message = "payload is not valid JSON";
    } else {
      want.kept = true;
      for (const Step& s : steps) {
        auto r = RefStep(s, &fields);
        if (!r.ok()) {
          want.error = true;
          want.message = r.status().message();
          break;
        }
        if (!*r) {
          want.kept = false;
          break;
        }
      }
    }
    const std::string where = "message: " + text + "\nchain:";
    std::string chain_text;
    for (const Step& s : steps) chain_text += "\n  " + YamlOf(s);
    ASSERT_EQ(got.error, want.error) << where << chain_text << "\nnew: " << got.message
                                     << "\nold: " << want.message;
    if (want.error) {
      ASSERT_EQ(got.message, "message 1 of the batch: " + want.message) << where << chain_text;
      ++errors;
      continue;
    }
    ASSERT_EQ(got.kept, want.kept) << where << chain_text;
    if (!want.kept) {
      ++dropped;
      continue;
    }
    const Json out = Json::parse(got.payload, nullptr, false);
    ASSERT_FALSE(out.is_discarded()) << where << chain_text << "\nnew output is not JSON: " << got.payload;
    ASSERT_TRUE(SameValue(out, fields)) << where << chain_text << "\nnew: " << got.payload
                                        << "\nold: " << fields.dump();
    // A replay gives the same bytes, whatever travelled in the batch with it.
    std::vector<std::string> mixed = {gen.Message(), text, gen.Message()};
    Batch again = testing::MakeBatch(mixed);
    std::vector<std::unique_ptr<Transform>> chain2;
    for (const Step& s : steps) chain2.push_back(testing::MakeTransform(YamlOf(s), clock));
    for (auto& t : chain2) {
      // Other messages may fail the batch; run the message's own batch then.
      const bool ok = t->Process(&again).ok();
      ExpectKeptFieldsTrue(again);
      if (!ok) {
        again = testing::MakeBatch({text});
        for (auto& u : chain2) (void)u->Process(&again);
        break;
      }
    }
    bool found = false;
    for (const auto& m : again.messages) found = found || m.payload() == got.payload;
    ASSERT_TRUE(found) << where << chain_text << "\nfirst: " << got.payload;
    ++compared;
  }
  // The generator must exercise every outcome.
  EXPECT_GT(compared, kMessages / 5);
  EXPECT_GT(errors, kMessages / 20);
  EXPECT_GT(dropped, kMessages / 50);
  EXPECT_LT(skipped_config, kMessages / 4);
  std::printf("differential: %d equal, %d same error, %d dropped by both, %d chains refused at config\n",
              compared, errors, dropped, skipped_config);
}

// rolling_window, bucket (`as`) and map after one another on one batch keep
// each message's index of members for the next (no second scan): the kept
// index is always what a scan finds, and the output is byte for byte what
// the same chain gives when every transform starts from a copy of the batch
// (a copy keeps no index, so each transform scans).
TEST(DifferentialTest, KeptFieldsMatchAScanThroughWindowBucketAndMap) {
  Gen gen(7);
  const Clock* clock = SystemClock::Get();
  const std::vector<std::string> steps = {
      "rolling_window: {key: k, field: v, window_messages: 3, aggregates: [count, sum, max]}",
      "bucket: {name: t, key: k, op: add, field: v, as: total}",
      "map: {w: 'v * 2', v_count: 'v_count + 1', z.x: 'total'}",
      "filter: 'w >= 0'",
      "bucket: {name: t, key: k, op: lookup, as: v}",
  };
  auto make = [&](BucketRegistry* buckets) {
    std::vector<std::unique_ptr<Transform>> chain;
    for (const auto& y : steps) chain.push_back(testing::MakeTransform(y, clock, buckets));
    return chain;
  };
  BucketRegistry kept_buckets, copied_buckets;
  kept_buckets.Add("t", 0);
  copied_buckets.Add("t", 0);
  auto kept = make(&kept_buckets);
  auto copied = make(&copied_buckets);
  for (int round = 0; round < 200; ++round) {
    std::vector<std::string> texts;
    for (int i = 0; i < 50; ++i) {
      // Objects of random values around the fields the chain reads, some
      // with spaces, escapes and members set twice.
      // Some have aggregate fields already, which the window replaces.
      texts.push_back("{" + gen.Ws() + "\"a\":" + gen.Value(1) +
                      (i % 3 == 0 ? ",\"v_sum\": \"stale\" , \"c\":[1, 2]" : "") +
                      ",\"k\" : \"k" +
                      std::to_string(i % 7) + "\", \"b\":" + gen.Value(1) + gen.Ws() + ",\"v\":" +
                      std::to_string(i * 3 - 20) +
                      (i % 5 == 0 ? ",\"w\":1 , \"k\u0065y\":\"again\"" : "") + gen.Ws() + "}");
    }
    Batch a = testing::MakeBatch(texts);
    Batch b = testing::MakeBatch(texts);
    for (size_t t = 0; t < steps.size(); ++t) {
      const Status st = kept[t]->Process(&a);
      ASSERT_TRUE(st.ok()) << steps[t] << ": " << st.message();
      ExpectKeptFieldsTrue(a);
      Batch fresh = b;  // no index
      ASSERT_TRUE(copied[t]->Process(&fresh).ok()) << steps[t];
      b = std::move(fresh);
      ASSERT_EQ(a.size(), b.size()) << steps[t];
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a.messages[i].payload(), b.messages[i].payload()) << steps[t];
      }
    }
  }
}

// The members the input's JSON check reads off simdjson's structural
// indexes are what a scan of the text finds, for every kind of message the
// generator makes (and the check itself agrees with IsJson).
TEST(DifferentialTest, MembersFromTheJsonCheckMatchAScan) {
  Gen gen(11);
  int indexed_count = 0;
  std::vector<jtext::Member> got, want;
  for (int i = 0; i < 100000; ++i) {
    const std::string text = gen.Message();
    bool indexed = false;
    size_t root = 0;
    const bool ok = IsJsonIndexed(text, 0, &indexed, &root, &got);
    ASSERT_EQ(ok, IsJson(text)) << text;
    if (!indexed) continue;
    ++indexed_count;
    ASSERT_EQ(root, jtext::SkipWs(text, 0)) << text;
    jtext::Members(text, root, &want);
    ASSERT_EQ(got.size(), want.size()) << text;
    for (size_t k = 0; k < got.size(); ++k) {
      ASSERT_EQ(got[k].key.begin, want[k].key.begin) << text;
      ASSERT_EQ(got[k].key.end, want[k].key.end) << text;
      ASSERT_EQ(got[k].value.begin, want[k].value.begin) << text;
      ASSERT_EQ(got[k].value.end, want[k].value.end) << text;
    }
  }
  EXPECT_GT(indexed_count, 50000);  // the rest: integers past 64 bits, not objects, not JSON
}

// A copied message or batch carries no index; a moved one keeps it.
TEST(BatchFieldsTest, CopiesDropTheIndexMovesKeepIt) {
  Batch b = testing::MakeBatch({R"({"a":1,"b":2})"});
  FieldSpan* f = b.KeepFields(&b.messages[0], 0, 2);
  ASSERT_NE(f, nullptr);
  f[0] = {1, 4, 5, 6};
  f[1] = {7, 10, 11, 12};
  size_t root = 9;
  const FieldSpan* spans = nullptr;
  size_t n = 0;
  ASSERT_TRUE(b.FieldsOf(b.messages[0], &root, &spans, &n));
  EXPECT_EQ(root, 0u);
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(spans[1].value_begin, 11u);
  const Batch copy = b;
  EXPECT_FALSE(copy.FieldsOf(copy.messages[0], &root, &spans, &n));
  EXPECT_FALSE(b.FieldsOf(Message(b.messages[0]), &root, &spans, &n));
  Batch other;
  other.messages.push_back(std::move(b.messages[0]));  // into another batch: not its index
  EXPECT_FALSE(other.FieldsOf(other.messages[0], &root, &spans, &n));
  Batch moved = std::move(b);
  moved.messages[0] = std::move(other.messages[0]);
  EXPECT_TRUE(moved.FieldsOf(moved.messages[0], &root, &spans, &n));
  moved.messages[0].set_payload(R"({"a":1})", true);  // another payload: the index is gone
  EXPECT_FALSE(moved.FieldsOf(moved.messages[0], &root, &spans, &n));
  moved.DropFields();
  EXPECT_FALSE(moved.FieldsOf(moved.messages[0], &root, &spans, &n));
}

}  // namespace
}  // namespace kayak
