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
// Values are JSON values (expr/value.h), read from the message's text where
// they are, not from a parsed tree. A field that is not in the message is "missing": it
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
#include "expr/value.h"
#include "kayak/status.h"

namespace kayak::expr {

struct Node;

// A compiled expression. Immutable and safe to evaluate from any thread.
class Expr {
 public:
  explicit Expr(std::shared_ptr<const Node> root, std::string text)
      : root_(std::move(root)), text_(std::move(text)) {}
  // Evaluates against a message. A path to a field that is not there gives a
  // missing value; callers decide whether that is an error. Values the
  // expression builds live in `scratch` until its next Reset().
  Status Eval(const Document& doc, Scratch* scratch, const Clock& clock, Value* out) const;
  const std::string& text() const { return text_; }
  const Node& root() const { return *root_; }  // the syntax tree, expr/ast.h

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

}  // namespace kayak::expr
