// The expression language used by filter and map (SPEC section 4).
//
//   expr    := or
//   or      := and ('||' and)*
//   and     := eq ('&&' eq)*
//   eq      := rel (('=='|'!=') rel)*
//   rel     := add (('<'|'<='|'>'|'>='|'in') add)*
//   add     := mul (('+'|'-') mul)*
//   mul     := unary (('*'|'/'|'%') unary)*
//   unary   := ('!'|'-') unary | primary
//   primary := number | string | true | false | null | '[' list ']' | '(' expr ')'
//            | ident '(' args ')' | path
//   path    := ident ('.' ident | '[' int ']' | '[' string ']')*
//
// Values are JSON values. A field that is not in the message is "missing": it
// compares equal to null, coalesce() skips it, and any other use of it is an
// evaluation error. Types are checked: arithmetic takes numbers (and '+' two
// strings), ordering takes two numbers or two strings, logic takes bools.
// Sub-expressions made only of literals are evaluated when compiled, so a type
// error among literals is a config error.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/json_util.h"
#include "kayak/status.h"

namespace kayak::expr {

struct Node;

// A compiled expression. Immutable and safe to evaluate from any thread.
class Expr {
 public:
  explicit Expr(std::shared_ptr<const Node> root, std::string text)
      : root_(std::move(root)), text_(std::move(text)) {}
  // Evaluates against a message's fields. A missing result is returned as a
  // Json of type discarded; callers decide whether that is an error.
  Result<Json> Eval(const Json& fields, const Clock& clock) const;
  const std::string& text() const { return text_; }

 private:
  std::shared_ptr<const Node> root_;
  std::string text_;
};

struct CompileError {
  size_t offset = 0;  // byte offset into the source text
  std::string message;
};

// Compiles `text`. On failure returns nullptr and fills `error`.
std::shared_ptr<const Expr> Compile(std::string_view text, CompileError* error);

inline bool IsMissing(const Json& v) { return v.is_discarded(); }

}  // namespace kayak::expr
