#include "expr/expr.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "expr/ast.h"

namespace kayak::expr {

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

using NodePtr = std::shared_ptr<const Node>;
using V = Value::Type;

namespace {

std::string Describe(const Value& v) {
  if (v.missing()) return "a missing field";
  return TypeName(v);
}

Status TypeError(Op op, const Value& a, const Value* b) {
  std::string msg = std::string("type error: '") + OpText(op) + "' cannot take " + Describe(a);
  if (b != nullptr) msg += " and " + Describe(*b);
  return Status::Invalid(msg);
}

bool ValuesEqual(const Value& a, const Value& b) {
  const bool a_null = a.type == V::kNull || a.missing();
  const bool b_null = b.type == V::kNull || b.missing();
  if (a_null || b_null) return a_null && b_null;
  if (a.is_number() && b.is_number()) {
    if (a.type == V::kInt && b.type == V::kInt) return a.i == b.i;
    return a.as_double() == b.as_double();
  }
  if (a.type != b.type) return false;
  switch (a.type) {
    case V::kBool: return a.b == b.b;
    case V::kString: return a.str == b.str;
    default: return SameJson(a.json, b.json);
  }
}

// Calls fn(element) for each element of the array text `json`; stops when fn
// returns true, and returns whether it did.
template <typename F>
bool AnyElement(std::string_view json, Scratch* scratch, F&& fn) {
  size_t j = jtext::SkipWs(json, 1);
  while (j < json.size() && json[j] != ']') {
    const size_t e = jtext::SkipValue(json, j);
    if (fn(ReadJson(json.substr(j, e - j), scratch))) return true;
    j = jtext::SkipWs(json, e);
    if (j < json.size() && json[j] == ',') j = jtext::SkipWs(json, j + 1);
  }
  return false;
}

int64_t CountElements(std::string_view json) {
  int64_t n = 0;
  size_t j = jtext::SkipWs(json, 1);
  while (j < json.size() && json[j] != ']') {
    ++n;
    j = jtext::SkipWs(json, jtext::SkipValue(json, j));
    if (j < json.size() && json[j] == ',') j = jtext::SkipWs(json, j + 1);
  }
  return n;
}

// Distinct keys: a key written twice is one member.
int64_t CountMembers(std::string_view json) {
  std::vector<jtext::Member> ms;
  jtext::Members(json, 0, &ms);
  int64_t n = 0;
  for (size_t i = 0; i < ms.size(); ++i) {
    std::string key;
    jtext::DecodeString(ms[i].key.of(json), &key);
    bool again = false;
    for (size_t k = i + 1; k < ms.size() && !again; ++k) again = jtext::KeyIs(ms[k].key.of(json), key);
    if (!again) ++n;
  }
  return n;
}

Status Arith(Op op, const Value& a, const Value& b, Scratch* scratch, Value* out) {
  if (op == Op::kAdd && a.type == V::kString && b.type == V::kString) {
    char* p = scratch->Alloc(a.str.size() + b.str.size());
    std::memcpy(p, a.str.data(), a.str.size());
    std::memcpy(p + a.str.size(), b.str.data(), b.str.size());
    *out = Value::String(std::string_view(p, a.str.size() + b.str.size()));
    return Status::Ok();
  }
  if (!a.is_number() || !b.is_number()) return TypeError(op, a, &b);
  if (op == Op::kDiv) {
    const double d = b.as_double();
    if (d == 0) return Status::Invalid("division by zero");
    *out = Value::Float(a.as_double() / d);
    return Status::Ok();
  }
  if (a.type == V::kInt && b.type == V::kInt) {
    const int64_t x = a.i, y = b.i;
    int64_t r = 0;
    bool overflow = false;
    switch (op) {
      case Op::kAdd: overflow = __builtin_add_overflow(x, y, &r); break;
      case Op::kSub: overflow = __builtin_sub_overflow(x, y, &r); break;
      case Op::kMul: overflow = __builtin_mul_overflow(x, y, &r); break;
      case Op::kMod:
        if (y == 0) return Status::Invalid("modulo by zero");
        r = y == -1 ? 0 : x % y;
        break;
      default: break;
    }
    if (overflow) return Status::Invalid(std::string("integer overflow in '") + OpText(op) + "'");
    *out = Value::Int(r);
    return Status::Ok();
  }
  const double x = a.as_double(), y = b.as_double();
  switch (op) {
    case Op::kAdd: *out = Value::Float(x + y); break;
    case Op::kSub: *out = Value::Float(x - y); break;
    case Op::kMul: *out = Value::Float(x * y); break;
    case Op::kMod:
      if (y == 0) return Status::Invalid("modulo by zero");
      *out = Value::Float(std::fmod(x, y));
      break;
    default: return Status::Internal("bad arithmetic operator");
  }
  return Status::Ok();
}

Status Compare(Op op, const Value& a, const Value& b, Value* out) {
  int c = 0;
  if (a.is_number() && b.is_number()) {
    if (a.type == V::kInt && b.type == V::kInt) {
      c = a.i < b.i ? -1 : (a.i > b.i ? 1 : 0);
    } else {
      const double x = a.as_double(), y = b.as_double();
      if (std::isnan(x) || std::isnan(y)) {
        *out = Value::Bool(false);
        return Status::Ok();
      }
      c = x < y ? -1 : (x > y ? 1 : 0);
    }
  } else if (a.type == V::kString && b.type == V::kString) {
    const int r = a.str.compare(b.str);
    c = r < 0 ? -1 : (r > 0 ? 1 : 0);
  } else {
    return TypeError(op, a, &b);
  }
  switch (op) {
    case Op::kLt: *out = Value::Bool(c < 0); break;
    case Op::kLe: *out = Value::Bool(c <= 0); break;
    case Op::kGt: *out = Value::Bool(c > 0); break;
    case Op::kGe: *out = Value::Bool(c >= 0); break;
    default: return Status::Internal("bad comparison operator");
  }
  return Status::Ok();
}

Status In(const Value& a, const Value& b, Scratch* scratch, Value* out) {
  if (a.missing()) return TypeError(Op::kIn, a, &b);
  if (b.type == V::kArray) {
    *out = Value::Bool(AnyElement(b.json, scratch, [&](const Value& e) { return ValuesEqual(a, e); }));
    return Status::Ok();
  }
  if (b.type == V::kString && a.type == V::kString) {
    *out = Value::Bool(b.str.find(a.str) != std::string_view::npos);
    return Status::Ok();
  }
  if (b.type == V::kObject && a.type == V::kString) {
    jtext::Member m;
    *out = Value::Bool(jtext::FindMember(b.json, jtext::SkipWs(b.json, 0), a.str, &m));
    return Status::Ok();
  }
  return TypeError(Op::kIn, a, &b);
}

struct Ctx {
  const Document& doc;
  Scratch* scratch;
  const Clock& clock;
};

Status MissingField(const Node& n) {
  return Status::Invalid("field '" + FieldPathToString(n.path) + "' is missing");
}

Status Eval(const Node& n, Ctx& ctx, Value* out) {
  switch (n.op) {
    case Op::kLiteral:
      *out = n.literal;
      return Status::Ok();
    case Op::kPath:
      *out = ctx.doc.Get(n.path, ctx.scratch);
      return Status::Ok();
    case Op::kList: {
      std::vector<Value> items(n.kids.size());
      for (size_t k = 0; k < n.kids.size(); ++k) {
        KAYAK_RETURN_IF_ERROR(Eval(*n.kids[k], ctx, &items[k]));
        if (items[k].missing()) return Status::Invalid("a list element is a missing field");
      }
      std::string& t = ctx.scratch->temp();
      t.assign("[");
      for (size_t k = 0; k < items.size(); ++k) {
        if (k > 0) t.push_back(',');
        AppendJson(items[k], &t);
      }
      t.push_back(']');
      Value v;
      v.type = V::kArray;
      v.json = ctx.scratch->Keep(t);
      *out = v;
      return Status::Ok();
    }
    case Op::kCall: {
      if (n.func == Func::kNow) {
        *out = Value::Int(ctx.clock.NowMs());
        return Status::Ok();
      }
      if (n.func == Func::kCoalesce) {
        for (const auto& k : n.kids) {
          KAYAK_RETURN_IF_ERROR(Eval(*k, ctx, out));
          if (!out->missing() && out->type != V::kNull) return Status::Ok();
        }
        *out = Value::Null();
        return Status::Ok();
      }
      Value x;
      KAYAK_RETURN_IF_ERROR(Eval(*n.kids[0], ctx, &x));
      if (n.func == Func::kLen) {
        if (x.type == V::kString) *out = Value::Int(static_cast<int64_t>(x.str.size()));
        else if (x.type == V::kArray) *out = Value::Int(CountElements(x.json));
        else if (x.type == V::kObject) *out = Value::Int(CountMembers(x.json));
        else return Status::Invalid("type error: len() cannot take " + Describe(x));
        return Status::Ok();
      }
      if (x.type != V::kString) {
        return Status::Invalid(std::string("type error: ") +
                               (n.func == Func::kLower ? "lower" : "upper") + "() cannot take " +
                               Describe(x));
      }
      char* p = ctx.scratch->Alloc(x.str.size());
      for (size_t i = 0; i < x.str.size(); ++i) {
        const auto c = static_cast<unsigned char>(x.str[i]);
        p[i] = static_cast<char>(n.func == Func::kLower ? std::tolower(c) : std::toupper(c));
      }
      *out = Value::String(std::string_view(p, x.str.size()));
      return Status::Ok();
    }
    case Op::kNot: {
      Value v;
      KAYAK_RETURN_IF_ERROR(Eval(*n.kids[0], ctx, &v));
      if (v.missing() && n.kids[0]->op == Op::kPath) return MissingField(*n.kids[0]);
      if (v.type != V::kBool) return TypeError(Op::kNot, v, nullptr);
      *out = Value::Bool(!v.b);
      return Status::Ok();
    }
    case Op::kNeg: {
      Value v;
      KAYAK_RETURN_IF_ERROR(Eval(*n.kids[0], ctx, &v));
      if (v.type == V::kInt) {
        if (v.i == INT64_MIN) return Status::Invalid("integer overflow in '-'");
        *out = Value::Int(-v.i);
        return Status::Ok();
      }
      if (v.type == V::kFloat) {
        *out = Value::Float(-v.d);
        return Status::Ok();
      }
      return TypeError(Op::kNeg, v, nullptr);
    }
    case Op::kOr:
    case Op::kAnd: {
      Value a;
      KAYAK_RETURN_IF_ERROR(Eval(*n.kids[0], ctx, &a));
      if (a.type != V::kBool) return TypeError(n.op, a, nullptr);
      if ((n.op == Op::kOr) == a.b) {
        *out = Value::Bool(a.b);
        return Status::Ok();
      }
      Value b;
      KAYAK_RETURN_IF_ERROR(Eval(*n.kids[1], ctx, &b));
      if (b.type != V::kBool) return TypeError(n.op, b, nullptr);
      *out = Value::Bool(b.b);
      return Status::Ok();
    }
    default:
      break;
  }
  Value a, b;
  KAYAK_RETURN_IF_ERROR(Eval(*n.kids[0], ctx, &a));
  KAYAK_RETURN_IF_ERROR(Eval(*n.kids[1], ctx, &b));
  if (n.op != Op::kEq && n.op != Op::kNe) {
    if (a.missing() && n.kids[0]->op == Op::kPath) return MissingField(*n.kids[0]);
    if (b.missing() && n.kids[1]->op == Op::kPath) return MissingField(*n.kids[1]);
  }
  switch (n.op) {
    case Op::kEq: *out = Value::Bool(ValuesEqual(a, b)); return Status::Ok();
    case Op::kNe: *out = Value::Bool(!ValuesEqual(a, b)); return Status::Ok();
    case Op::kLt:
    case Op::kLe:
    case Op::kGt:
    case Op::kGe: return Compare(n.op, a, b, out);
    case Op::kIn: return In(a, b, ctx.scratch, out);
    default: return Arith(n.op, a, b, ctx.scratch, out);
  }
}

// Makes `n` the literal `v`, copying the bytes it points to into the node.
void SetLiteral(Node* n, const Value& v) {
  n->op = Op::kLiteral;
  n->kids.clear();
  n->lit_str.assign(v.str);
  n->lit_json.assign(v.json);
  n->literal = v;
  n->literal.str = n->lit_str;
  n->literal.json = n->lit_json;
}

// ---- lexer and parser ----

enum class Tok { kEnd, kNumber, kString, kIdent, kPunct };

struct Token {
  Tok kind = Tok::kEnd;
  std::string text;  // identifier, punctuation, or decoded string
  Value number;
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
        tok_.number = Value::Float(std::strtod(text.c_str(), nullptr));
      } else {
        errno = 0;
        const long long v = std::strtoll(text.c_str(), nullptr, 10);
        if (errno == ERANGE) {
          Fail(i, "integer literal out of range");
          return false;
        }
        tok_.number = Value::Int(static_cast<int64_t>(v));
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
    const Document empty("{}");
    Scratch scratch;
    Ctx ctx{empty, &scratch, *SystemClock::Get()};
    Value v;
    Status st = Eval(*n, ctx, &v);
    if (!st.ok()) return Fail(n->offset, st.message());
    auto lit = std::make_shared<Node>();
    SetLiteral(lit.get(), v);
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
        SetLiteral(n.get(), tok_.number);
        if (!Next()) return nullptr;
        return n;
      case Tok::kString:
        SetLiteral(n.get(), Value::String(tok_.text));
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
      SetLiteral(n.get(), Value::Bool(name == "true"));
      if (!Next()) return nullptr;
      return n;
    }
    if (name == "null") {
      SetLiteral(n.get(), Value::Null());
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
      if (tok_.kind == Tok::kNumber && tok_.number.type == Value::Type::kInt &&
          tok_.number.i >= 0) {
        n->path.push_back(PathStep{"", tok_.number.i});
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

Status Expr::Eval(const Document& doc, Scratch* scratch, const Clock& clock, Value* out) const {
  Ctx ctx{doc, scratch, clock};
  return expr::Eval(*root_, ctx, out);
}

std::shared_ptr<const Expr> Compile(std::string_view text, CompileError* error) {
  Parser p(text, error);
  NodePtr root = p.ParseAll();
  if (root == nullptr) return nullptr;
  return std::make_shared<const Expr>(root, std::string(text));
}

}  // namespace kayak::expr
