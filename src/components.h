// The one list of every component kayak has (src/components.cc).
#pragma once

#include <string>

#include "kayak/component.h"

namespace kayak {

// Every built-in input, transform and output.
const ComponentRegistry& BuiltinComponents();

// Every output also takes `retry: {base_ms, max_ms, max_attempts}`.
PropDef RetryPropDef();

}  // namespace kayak

namespace kayak {
// Markdown reference of every component, generated from the property tables
// (docs/components.md is this text; a unit test keeps them equal).
std::string ComponentReferenceMarkdown();
}  // namespace kayak
