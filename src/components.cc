#include "components.h"

#include <memory>
#include <vector>

namespace kayak {

namespace {

class Builtins final : public ComponentRegistry {
 public:
  Builtins() {
    for (auto make : {DummyInputDef, FileInputDef, PipelineInputDef, FilterDef, MapDef, RemoveDef,
                      RenameDef, RollingWindowDef, BucketTransformDef, LookupDef, BufferDef, LuaDef,
                      FileOutputDef, StdoutOutputDef}) {
      defs_.push_back(std::make_unique<ComponentDef>(make()));
      if (defs_.back()->kind == "output") defs_.back()->props.push_back(RetryPropDef());
    }
  }
  const ComponentDef* Find(const std::string& kind, const std::string& type) const override {
    for (const auto& d : defs_) {
      if (d->kind == kind && d->type == type) return d.get();
    }
    return nullptr;
  }
  std::vector<const ComponentDef*> All() const override {
    std::vector<const ComponentDef*> out;
    for (const auto& d : defs_) out.push_back(d.get());
    return out;
  }

 private:
  std::vector<std::unique_ptr<ComponentDef>> defs_;
};

}  // namespace

PropDef RetryPropDef() {
  return {"retry", PropType::kStringMap, false, "{base_ms: 100, max_ms: 5000, max_attempts: 5}",
          "backoff between attempts to write a batch; without a state dir a batch that still "
          "fails after max_attempts is dropped and counted"};
}

ComponentDef PipelineInputDef() {
  ComponentDef d;
  d.kind = "input";
  d.type = "pipeline";
  d.shape = Shape::kStringOrList;
  d.help = "Reads what other pipelines emit: `pipeline: upstream` or `pipeline: [a, b]` (merged).";
  d.checkpoint = "nothing: covered by the upstream pipelines' checkpoints";
  return d;
}

const ComponentRegistry& BuiltinComponents() {
  static const Builtins registry;
  return registry;
}

}  // namespace kayak
