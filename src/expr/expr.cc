#include "expr/expr.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <vector>

namespace kayak::expr {

enum class Op {
  kLiteral, kPath, kList, kCall,
  kNot, kNeg,
  kOr, kAnd, kEq, kNe, kLt, kLe, kGt, kGe, kIn,
  kAdd, kSub, kMul, kDiv, kMod,
};

enum class Func { kNone, kLen, kLower, kUpper, kNow, kCoalesce };

struct Node {
  Op op = Op::kLiteral;
  Func func = Func::kNone;
  Json literal;
  FieldPath path;
  std::vector<std::shared_ptr<const Node>> kids;
  size_t offset = 0;
};

using NodePtr = std::shared_ptr<const Node>;

namespace {

const char* OpText(Op op) {
  switch (op) {
    case Op::kOr: return "||";
    case Op::kAnd: return "&&";
    case Op::kEq: return "==";
    case Op::kNe: return "!=";
    case Op::kLt: return "<";
    case Op::kLe: return "<=";
    case Op::kGt: return ">";
    case Op::kGe: return ">=";
    case Op::kIn: return "in";
    case Op::kAdd: return "+";
    case Op::kSub: return "-";
    case Op::kMul: return "*";
    case Op::kDiv: return "/";
    case Op::kMod: return "%";
    case Op::kNot: return "!";
    case Op::kNeg: return "-";
    default: return "?";
  }
}

Json Missing() { return Json(Json::value_t::discarded); }

bool IsInt(const Json& v) { return v.is_number_integer(); }
double AsDouble(const Json& v) { return v.get<double>(); }

std::string Describe(const Json& v) {
  if (v.is_discarded()) return "a missing field";
  return std::string(JsonTypeName(v));
}

Status TypeError(Op op, const Json& a, const Json* b) {
  std::string msg = std::string("type error: '") + OpText(op) + "' cannot take " + Describe(a);
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

Result<Json> Arith(Op op, const Json& a, const Json& b) {
  if (op == Op::kAdd && a.is_string() && b.is_string()) {
    return Json(a.get_ref<const std::string&>() + b.get_ref<const std::string&>());
  }
  if (!a.is_number() || !b.is_number() || a.is_discarded() || b.is_discarded()) {
    return TypeError(op, a, &b);
  }
  if (op == Op::kDiv) {
    const double d = AsDouble(b);
    if (d == 0) return Status::Invalid("division by zero");
    return Json(AsDouble(a) / d);
  }
  if (IsInt(a) && IsInt(b)) {
    const int64_t x = a.get<int64_t>();
    const int64_t y = b.get<int64_t>();
    int64_t r = 0;
    bool overflow = false;
    switch (op) {
      case Op::kAdd: overflow = __builtin_add_overflow(x, y, &r); break;
      case Op::kSub: overflow = __builtin_sub_overflow(x, y, &r); break;
      case Op::kMul: overflow = __builtin_mul_overflow(x, y, &r); break;
      case Op::kMod:
        if (y == 0) return Status::Invalid("modulo by zero");
        if (y == -1) return Json(int64_t{0});
        r = x % y;
        break;
      default: break;
    }
    if (overflow) return Status::Invalid(std::string("integer overflow in '") + OpText(op) + "'");
    return Json(r);
  }
  const double x = AsDouble(a);
  const double y = AsDouble(b);
  switch (op) {
    case Op::kAdd: return Json(x + y);
    case Op::kSub: return Json(x - y);
    case Op::kMul: return Json(x * y);
    case Op::kMod:
      if (y == 0) return Status::Invalid("modulo by zero");
      return Json(std::fmod(x, y));
    default: break;
  }
  return Status::Internal("bad arithmetic operator");
}

Result<Json> Compare(Op op, const Json& a, const Json& b) {
  int c = 0;
  if (a.is_number() && b.is_number()) {
    if (IsInt(a) && IsInt(b)) {
      const int64_t x = a.get<int64_t>(), y = b.get<int64_t>();
      c = x < y ? -1 : (x > y ? 1 : 0);
    } else {
      const double x = AsDouble(a), y = AsDouble(b);
      if (std::isnan(x) || std::isnan(y)) return Json(false);
      c = x < y ? -1 : (x > y ? 1 : 0);
    }
  } else if (a.is_string() && b.is_string()) {
    const int r = a.get_ref<const std::string&>().compare(b.get_ref<const std::string&>());
    c = r < 0 ? -1 : (r > 0 ? 1 : 0);
  } else {
    return TypeError(op, a, &b);
  }
  switch (op) {
    case Op::kLt: return Json(c < 0);
    case Op::kLe: return Json(c <= 0);
    case Op::kGt: return Json(c > 0);
    case Op::kGe: return Json(c >= 0);
    default: break;
  }
  return Status::Internal("bad comparison operator");
}

Result<Json> In(const Json& a, const Json& b) {
  if (a.is_discarded()) return TypeError(Op::kIn, a, &b);
  if (b.is_array()) {
    for (const auto& e : b) {
      if (ValuesEqual(a, e)) return Json(true);
    }
    return Json(false);
  }
  if (b.is_string() && a.is_string()) {
    return Json(b.get_ref<const std::string&>().find(a.get_ref<const std::string&>()) !=
                std::string::npos);
  }
  if (b.is_object() && a.is_string()) {
    return Json(b.contains(a.get_ref<const std::string&>()));
  }
  return TypeError(Op::kIn, a, &b);
}

Result<Json> Eval(const Node& n, const Json& root, const Clock& clock) {
  switch (n.op) {
    case Op::kLiteral:
      return n.literal;
    case Op::kPath: {
      const Json* v = LookupPath(root, n.path);
      if (v == nullptr) return Missing();
      return *v;
    }
    case Op::kList: {
      Json arr = Json::array();
      for (const auto& k : n.kids) {
        auto v = Eval(*k, root, clock);
        if (!v.ok()) return v;
        if (v->is_discarded()) return Status::Invalid("a list element is a missing field");
        arr.push_back(std::move(v.value()));
      }
      return arr;
    }
    case Op::kCall: {
      if (n.func == Func::kNow) return Json(clock.NowMs());
      if (n.func == Func::kCoalesce) {
        for (const auto& k : n.kids) {
          auto v = Eval(*k, root, clock);
          if (!v.ok()) return v;
          if (!v->is_discarded() && !v->is_null()) return v;
        }
        return Json(nullptr);
      }
      auto v = Eval(*n.kids[0], root, clock);
      if (!v.ok()) return v;
      const Json& x = *v;
      if (n.func == Func::kLen) {
        if (x.is_string()) return Json(static_cast<int64_t>(x.get_ref<const std::string&>().size()));
        if (x.is_array() || x.is_object()) return Json(static_cast<int64_t>(x.size()));
        return Status::Invalid("type error: len() cannot take " + Describe(x));
      }
      if (!x.is_string()) {
        return Status::Invalid(std::string("type error: ") +
                               (n.func == Func::kLower ? "lower" : "upper") + "() cannot take " +
                               Describe(x));
      }
      std::string s = x.get<std::string>();
      for (char& c : s) {
        c = n.func == Func::kLower ? static_cast<char>(std::tolower(static_cast<unsigned char>(c)))
                                   : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      }
      return Json(std::move(s));
    }
    case Op::kNot: {
      auto v = Eval(*n.kids[0], root, clock);
      if (!v.ok()) return v;
      if (v->is_discarded() && n.kids[0]->op == Op::kPath) {
        return Status::Invalid("field '" + FieldPathToString(n.kids[0]->path) + "' is missing");
      }
      if (!v->is_boolean()) return TypeError(Op::kNot, *v, nullptr);
      return Json(!v->get<bool>());
    }
    case Op::kNeg: {
      auto v = Eval(*n.kids[0], root, clock);
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
      auto a = Eval(*n.kids[0], root, clock);
      if (!a.ok()) return a;
      if (!a->is_boolean()) return TypeError(n.op, *a, nullptr);
      const bool av = a->get<bool>();
      if (n.op == Op::kOr && av) return Json(true);
      if (n.op == Op::kAnd && !av) return Json(false);
      auto b = Eval(*n.kids[1], root, clock);
      if (!b.ok()) return b;
      if (!b->is_boolean()) return TypeError(n.op, *b, nullptr);
      return Json(b->get<bool>());
    }
    default:
      break;
  }
  auto a = Eval(*n.kids[0], root, clock);
  if (!a.ok()) return a;
  auto b = Eval(*n.kids[1], root, clock);
  if (!b.ok()) return b;
  if (n.op != Op::kEq && n.op != Op::kNe) {
    for (int i = 0; i < 2; ++i) {
      const Json& v = i == 0 ? *a : *b;
      if (v.is_discarded() && n.kids[i]->op == Op::kPath) {
        return Status::Invalid("field '" + FieldPathToString(n.kids[i]->path) + "' is missing");
      }
    }
  }
  switch (n.op) {
    case Op::kEq: return Json(ValuesEqual(*a, *b));
    case Op::kNe: return Json(!ValuesEqual(*a, *b));
    case Op::kLt:
    case Op::kLe:
    case Op::kGt:
    case Op::kGe: return Compare(n.op, *a, *b);
    case Op::kIn: return In(*a, *b);
    default: return Arith(n.op, *a, *b);
  }
}

// ---- lexer and parser ----

enum class Tok { kEnd, kNumber, kString, kIdent, kPunct };

struct Token {
  Tok kind = Tok::kEnd;
  std::string text;  // identifier, punctuation, or decoded string
  Json number;
  size_t offset = 0;
};

class Parser {
 public:
  Parser(std::string_view src, CompileError* err) : src_(src), err_(err) {}

  NodePtr ParseAll() {
    if (!Next()) return nullptr;
    NodePtr n = ParseBinary(0);
    if (n == nullptr) return nullptr;
    if (tok_.kind != Tok::kEnd) return Fail(tok_.offset, "unexpected '" + tok_.text + "'");
    return n;
  }

 private:
  NodePtr Fail(size_t offset, std::string msg) {
    if (!failed_) {
      failed_ = true;
      err_->offset = offset;
      err_->message = std::move(msg);
    }
    return nullptr;
  }

  bool Next() {
    size_t i = pos_;
    while (i < src_.size() && std::isspace(static_cast<unsigned char>(src_[i]))) ++i;
    tok_ = Token{};
    tok_.offset = i;
    if (i >= src_.size()) {
      pos_ = i;
      tok_.kind = Tok::kEnd;
      tok_.text = "end of expression";
      return true;
    }
    const char c = src_[i];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool is_float = false;
      while (j < src_.size() && std::isdigit(static_cast<unsigned char>(src_[j]))) ++j;
      if (j + 1 < src_.size() && src_[j] == '.' && std::isdigit(static_cast<unsigned char>(src_[j + 1]))) {
        is_float = true;
        ++j;
        while (j < src_.size() && std::isdigit(static_cast<unsigned char>(src_[j]))) ++j;
      }
      if (j < src_.size() && (src_[j] == 'e' || src_[j] == 'E')) {
        size_t k = j + 1;
        if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
        if (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
          is_float = true;
          j = k;
          while (j < src_.size() && std::isdigit(static_cast<unsigned char>(src_[j]))) ++j;
        }
      }
      std::string text(src_.substr(i, j - i));
      tok_.kind = Tok::kNumber;
      tok_.text = text;
      if (is_float) {
        tok_.number = std::strtod(text.c_str(), nullptr);
      } else {
        errno = 0;
        const long long v = std::strtoll(text.c_str(), nullptr, 10);
        if (errno == ERANGE) {
          Fail(i, "integer literal out of range");
          return false;
        }
        tok_.number = static_cast<int64_t>(v);
      }
      pos_ = j;
      return true;
    }
    if (c == '"' || c == '\'') {
      std::string s;
      size_t j = i + 1;
      while (true) {
        if (j >= src_.size()) {
          Fail(i, "unterminated string literal");
          return false;
        }
        char d = src_[j];
        if (d == c) break;
        if (d == '\\') {
          if (j + 1 >= src_.size()) {
            Fail(j, "unterminated string literal");
            return false;
          }
          const char e = src_[j + 1];
          switch (e) {
            case 'n': s += '\n'; break;
            case 't': s += '\t'; break;
            case '\\': s += '\\'; break;
            case '"': s += '"'; break;
            case '\'': s += '\''; break;
            default:
              Fail(j, std::string("unknown escape '\\") + e + "'");
              return false;
          }
          j += 2;
          continue;
        }
        s += d;
        ++j;
      }
      tok_.kind = Tok::kString;
      tok_.text = std::move(s);
      pos_ = j + 1;
      return true;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[j])) || src_[j] == '_')) ++j;
      tok_.kind = Tok::kIdent;
      tok_.text = std::string(src_.substr(i, j - i));
      pos_ = j;
      return true;
    }
    static const char* kTwo[] = {"==", "!=", "<=", ">=", "&&", "||"};
    for (const char* p : kTwo) {
      if (src_.substr(i, 2) == p) {
        tok_.kind = Tok::kPunct;
        tok_.text = p;
        pos_ = i + 2;
        return true;
      }
    }
    if (std::string_view("+-*/%<>!()[],.").find(c) != std::string_view::npos) {
      tok_.kind = Tok::kPunct;
      tok_.text = std::string(1, c);
      pos_ = i + 1;
      return true;
    }
    Fail(i, std::string("unexpected character '") + c + "'");
    return false;
  }

  bool IsPunct(const char* p) const { return tok_.kind == Tok::kPunct && tok_.text == p; }

  bool Expect(const char* p) {
    if (!IsPunct(p)) {
      Fail(tok_.offset, std::string("expected '") + p + "' but found '" + tok_.text + "'");
      return false;
    }
    return Next();
  }

  // Binary operator at the current token with its precedence, or -1.
  int BinaryPrec(Op* op) const {
    if (tok_.kind == Tok::kIdent && tok_.text == "in") {
      *op = Op::kIn;
      return 4;
    }
    if (tok_.kind != Tok::kPunct) return -1;
    const std::string& t = tok_.text;
    struct Entry { const char* text; Op op; int prec; };
    static const Entry kOps[] = {
        {"||", Op::kOr, 1}, {"&&", Op::kAnd, 2}, {"==", Op::kEq, 3}, {"!=", Op::kNe, 3},
        {"<", Op::kLt, 4},  {"<=", Op::kLe, 4},  {">", Op::kGt, 4},  {">=", Op::kGe, 4},
        {"+", Op::kAdd, 5}, {"-", Op::kSub, 5},  {"*", Op::kMul, 6}, {"/", Op::kDiv, 6},
        {"%", Op::kMod, 6}};
    for (const auto& e : kOps) {
      if (t == e.text) {
        *op = e.op;
        return e.prec;
      }
    }
    return -1;
  }

  NodePtr ParseBinary(int min_prec) {
    NodePtr lhs = ParseUnary();
    if (lhs == nullptr) return nullptr;
    while (true) {
      Op op;
      const int prec = BinaryPrec(&op);
      if (prec < 0 || prec < min_prec) break;
      const size_t at = tok_.offset;
      if (!Next()) return nullptr;
      NodePtr rhs = ParseBinary(prec + 1);
      if (rhs == nullptr) return nullptr;
      auto n = std::make_shared<Node>();
      n->op = op;
      n->offset = at;
      n->kids = {lhs, rhs};
      lhs = Fold(n);
      if (lhs == nullptr) return nullptr;
    }
    return lhs;
  }

  NodePtr ParseUnary() {
    if (IsPunct("!") || IsPunct("-")) {
      auto n = std::make_shared<Node>();
      n->op = IsPunct("!") ? Op::kNot : Op::kNeg;
      n->offset = tok_.offset;
      if (!Next()) return nullptr;
      NodePtr k = ParseUnary();
      if (k == nullptr) return nullptr;
      n->kids = {k};
      return Fold(n);
    }
    return ParsePrimary();
  }

  // Evaluates a node whose children are all literals, so literal type errors
  // surface at compile time.
  NodePtr Fold(const std::shared_ptr<Node>& n) {
    for (const auto& k : n->kids) {
      if (k->op != Op::kLiteral) return n;
    }
    if (n->op == Op::kCall && n->func == Func::kNow) return n;
    static const Json kEmpty = Json::object();
    auto v = Eval(*n, kEmpty, *SystemClock::Get());
    if (!v.ok()) return Fail(n->offset, v.status().message());
    auto lit = std::make_shared<Node>();
    lit->op = Op::kLiteral;
    lit->literal = std::move(v.value());
    lit->offset = n->offset;
    return lit;
  }

  NodePtr ParsePrimary() {
    auto n = std::make_shared<Node>();
    n->offset = tok_.offset;
    switch (tok_.kind) {
      case Tok::kEnd:
        return Fail(tok_.offset, "unexpected end of expression");
      case Tok::kNumber:
        n->op = Op::kLiteral;
        n->literal = tok_.number;
        if (!Next()) return nullptr;
        return n;
      case Tok::kString:
        n->op = Op::kLiteral;
        n->literal = tok_.text;
        if (!Next()) return nullptr;
        return n;
      case Tok::kPunct:
        if (IsPunct("(")) {
          if (!Next()) return nullptr;
          NodePtr inner = ParseBinary(0);
          if (inner == nullptr) return nullptr;
          if (!Expect(")")) return nullptr;
          return inner;
        }
        if (IsPunct("[")) {
          n->op = Op::kList;
          if (!Next()) return nullptr;
          if (!IsPunct("]")) {
            while (true) {
              NodePtr e = ParseBinary(0);
              if (e == nullptr) return nullptr;
              n->kids.push_back(e);
              if (IsPunct(",")) {
                if (!Next()) return nullptr;
                continue;
              }
              break;
            }
          }
          if (!Expect("]")) return nullptr;
          return Fold(n);
        }
        return Fail(tok_.offset, "unexpected '" + tok_.text + "'");
      case Tok::kIdent:
        break;
    }
    const std::string name = tok_.text;
    if (name == "true" || name == "false") {
      n->op = Op::kLiteral;
      n->literal = (name == "true");
      if (!Next()) return nullptr;
      return n;
    }
    if (name == "null") {
      n->op = Op::kLiteral;
      n->literal = nullptr;
      if (!Next()) return nullptr;
      return n;
    }
    if (name == "in") return Fail(tok_.offset, "unexpected 'in'");
    if (!Next()) return nullptr;
    if (IsPunct("(")) return ParseCall(n, name);
    n->op = Op::kPath;
    n->path.push_back(PathStep{name, -1});
    while (IsPunct(".") || IsPunct("[")) {
      if (IsPunct(".")) {
        if (!Next()) return nullptr;
        if (tok_.kind != Tok::kIdent) return Fail(tok_.offset, "expected a field name after '.'");
        n->path.push_back(PathStep{tok_.text, -1});
        if (!Next()) return nullptr;
        continue;
      }
      if (!Next()) return nullptr;
      if (tok_.kind == Tok::kNumber && tok_.number.is_number_integer() &&
          tok_.number.get<int64_t>() >= 0) {
        n->path.push_back(PathStep{"", tok_.number.get<int64_t>()});
      } else if (tok_.kind == Tok::kString) {
        n->path.push_back(PathStep{tok_.text, -1});
      } else {
        return Fail(tok_.offset, "expected an array index or a quoted field name in '[...]'");
      }
      if (!Next()) return nullptr;
      if (!Expect("]")) return nullptr;
    }
    return n;
  }

  NodePtr ParseCall(const std::shared_ptr<Node>& n, const std::string& name) {
    n->op = Op::kCall;
    size_t min_args = 1, max_args = 1;
    if (name == "len") {
      n->func = Func::kLen;
    } else if (name == "lower") {
      n->func = Func::kLower;
    } else if (name == "upper") {
      n->func = Func::kUpper;
    } else if (name == "now") {
      n->func = Func::kNow;
      min_args = max_args = 0;
    } else if (name == "coalesce") {
      n->func = Func::kCoalesce;
      max_args = 64;
    } else {
      return Fail(n->offset, "unknown function '" + name +
                                 "' (known: len, lower, upper, now, coalesce)");
    }
    if (!Next()) return nullptr;  // '('
    if (!IsPunct(")")) {
      while (true) {
        NodePtr a = ParseBinary(0);
        if (a == nullptr) return nullptr;
        n->kids.push_back(a);
        if (IsPunct(",")) {
          if (!Next()) return nullptr;
          continue;
        }
        break;
      }
    }
    if (!Expect(")")) return nullptr;
    if (n->kids.size() < min_args || n->kids.size() > max_args) {
      return Fail(n->offset, name + "() takes " +
                                 (min_args == max_args ? std::to_string(min_args)
                                                       : "at least " + std::to_string(min_args)) +
                                 " argument" + (max_args == 1 ? "" : "s") + ", got " +
                                 std::to_string(n->kids.size()));
    }
    return Fold(n);
  }

  std::string_view src_;
  CompileError* err_;
  size_t pos_ = 0;
  Token tok_;
  bool failed_ = false;
};

}  // namespace

Result<Json> Expr::Eval(const Json& fields, const Clock& clock) const {
  return expr::Eval(*root_, fields, clock);
}

std::shared_ptr<const Expr> Compile(std::string_view text, CompileError* error) {
  Parser p(text, error);
  NodePtr root = p.ParseAll();
  if (root == nullptr) return nullptr;
  return std::make_shared<const Expr>(root, std::string(text));
}

}  // namespace kayak::expr
