// Reading YAML that came from outside (the pipelines file, an API body, the
// server config) with bounds, before anything walks it: docs/config.md,
// "limits".
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <string>

#include "config/options.h"

namespace kayak {

// How deep mappings and sequences may nest in a config.
constexpr int kMaxYamlDepth = 128;
// The nodes a config may expand to, an alias counted again at each use,
// beyond one per byte of its text: aliases cannot make a small text large.
constexpr size_t kYamlNodeAllowance = 10000;

// Parses `text` into `*root`: refused with an error in `errors` (naming the
// line) when it is not UTF-8, not YAML, nested deeper than kMaxYamlDepth,
// expands (aliases counted at each use) to more than
// kYamlNodeAllowance + text.size() nodes, or repeats a key in a mapping.
// Nothing here recurses, so no text can exhaust the stack.
bool LoadYamlBounded(const std::string& text, const std::string& file, YAML::Node* root,
                     ErrorList* errors);

}  // namespace kayak
