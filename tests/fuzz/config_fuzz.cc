// libFuzzer target over how a config from outside is read (the pipelines
// file, an API body, the server config): LoadYamlBounded. Nothing may crash,
// hang or exhaust memory, whatever the bytes: nesting, aliases, bytes that
// are not UTF-8; a config it takes is within its bounds.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "config/yaml_load.h"

namespace {

// The depth of the expanded tree, walked with a budget (aliases may share).
bool WithinBounds(const YAML::Node& root, size_t budget) {
  std::vector<std::pair<YAML::Node, int>> stack{{root, 1}};
  size_t seen = 0;
  while (!stack.empty()) {
    auto [n, depth] = stack.back();
    stack.pop_back();
    if (++seen > budget) return false;
    if (!n.IsMap() && !n.IsSequence()) continue;
    if (depth > kayak::kMaxYamlDepth) return false;
    if (n.IsSequence()) {
      for (const auto& e : n) stack.emplace_back(e, depth + 1);
    } else {
      for (const auto& kv : n) {
        stack.emplace_back(kv.first, depth + 1);
        stack.emplace_back(kv.second, depth + 1);
      }
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  YAML::Node root;
  kayak::ErrorList errors;
  const bool ok = kayak::LoadYamlBounded(text, "fuzz.yaml", &root, &errors);
  if (ok != errors.empty()) abort();  // taken exactly when nothing was said against it
  if (ok && !WithinBounds(root, kayak::kYamlNodeAllowance + size)) abort();
  return 0;
}
