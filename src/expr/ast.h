// The syntax tree of a compiled expression (expr.h). Internal to the
// expression library and its tests.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/field_path.h"
#include "expr/value.h"

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
  Value literal;  // kLiteral; its views point into lit_str and lit_json
  std::string lit_str;
  std::string lit_json;
  FieldPath path;  // kPath
  std::vector<std::shared_ptr<const Node>> kids;
  size_t offset = 0;  // into the source text
};

const char* OpText(Op op);

}  // namespace kayak::expr
