#include "config/yaml_load.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "common/utf8.h"

namespace kayak {

namespace {

// The 1-based line and column of byte `at` of `text`.
SourceMark MarkAt(const std::string& file, const std::string& text, size_t at) {
  const size_t line_start = at == 0 ? 0 : text.rfind('\n', at - 1);
  const int line = static_cast<int>(std::count(text.begin(), text.begin() + at, '\n')) + 1;
  const size_t col = line_start == std::string::npos ? at : at - line_start - 1;
  return SourceMark{file, line, static_cast<int>(col) + 1};
}

// One walk over the expanded tree with an explicit stack: depth, node
// budget and duplicate keys.
bool CheckShape(const YAML::Node& root, const std::string& file, size_t text_size,
                ErrorList* errors) {
  const size_t errors_before = errors->size();
  const size_t budget = kYamlNodeAllowance + text_size;
  size_t visited = 0;
  std::vector<std::pair<YAML::Node, int>> stack;
  stack.emplace_back(root, 1);
  while (!stack.empty()) {
    auto [node, depth] = std::move(stack.back());
    stack.pop_back();
    if (++visited > budget) {
      errors->Add(MarkOf(file, root),
                  "the config expands to more than " + std::to_string(budget) +
                      " nodes (aliases count at each use; the limit is " +
                      std::to_string(kYamlNodeAllowance) + " plus one per byte of the text)");
      return false;
    }
    if (!node.IsMap() && !node.IsSequence()) continue;
    if (depth > kMaxYamlDepth) {
      errors->Add(MarkOf(file, node), "the config is nested more than " +
                                          std::to_string(kMaxYamlDepth) + " levels deep");
      return false;
    }
    if (node.IsSequence()) {
      for (const auto& e : node) stack.emplace_back(e, depth + 1);
      continue;
    }
    std::set<std::string> seen;
    for (const auto& kv : node) {
      if (kv.first.IsScalar() && !seen.insert(kv.first.Scalar()).second) {
        errors->Add(MarkOf(file, kv.first), "duplicate key '" + kv.first.Scalar() + "'");
      }
      stack.emplace_back(kv.first, depth + 1);
      stack.emplace_back(kv.second, depth + 1);
    }
  }
  return errors->size() == errors_before;
}

}  // namespace

bool LoadYamlBounded(const std::string& text, const std::string& file, YAML::Node* root,
                     ErrorList* errors) {
  if (const size_t bad = FirstInvalidUtf8(text); bad < text.size()) {
    errors->Add(MarkAt(file, text, bad), "the config is not UTF-8 text (byte " +
                                             std::to_string(bad) + " of it is not)");
    return false;
  }
  try {
    // yaml-cpp bounds its own recursion while parsing (DeepRecursion past
    // 2000 levels, a ParserException).
    *root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    errors->Add(SourceMark{file, e.mark.line + 1, e.mark.column + 1},
                "YAML syntax error: " + e.msg);
    return false;
  }
  return CheckShape(*root, file, text.size(), errors);
}

}  // namespace kayak
