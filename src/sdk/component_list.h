// A registry over a list of component definitions: the built-in one
// (src/components.cc), or a test's or a fuzzer's own.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kayak/component.h"

namespace kayak {

class ComponentList final : public ComponentRegistry {
 public:
  // Returns the definition as stored (its address stays valid).
  ComponentDef* Add(ComponentDef def) {
    defs_.push_back(std::make_unique<ComponentDef>(std::move(def)));
    return defs_.back().get();
  }
  const ComponentDef* Find(const std::string& kind, const std::string& type) const override {
    for (const auto& d : defs_) {
      if (d->kind == kind && d->type == type) return d.get();
    }
    return nullptr;
  }
  std::vector<const ComponentDef*> All() const override {
    std::vector<const ComponentDef*> out;
    out.reserve(defs_.size());
    for (const auto& d : defs_) out.push_back(d.get());
    return out;
  }

 private:
  std::vector<std::unique_ptr<ComponentDef>> defs_;
};

}  // namespace kayak
