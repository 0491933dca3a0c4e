#include "engine/running_graph.h"

#include <algorithm>
#include <map>

namespace kayak {

RunningGraph::RunningGraph(std::vector<std::shared_ptr<Engine>> engines,
                           const std::vector<std::string>& order, bool changing,
                           bool checkpointing, const Clock* clock,
                           int64_t checkpoint_interval_ms)
    : engines_(std::move(engines)),
      changing_(changing),
      checkpointing_(checkpointing),
      clock_(clock),
      checkpoint_interval_ms_(checkpoint_interval_ms) {
  for (const auto& e : engines_) {
    for (const auto& p : e->pipelines()) pipelines_.push_back(p.get());
  }
  std::map<std::string, size_t> rank;
  for (size_t i = 0; i < order.size(); ++i) rank.emplace(order[i], i);
  auto at = [&](const PipelineRunner* p) {
    auto it = rank.find(p->id());
    return it == rank.end() ? order.size() : it->second;
  };
  std::stable_sort(pipelines_.begin(), pipelines_.end(),
                   [&](const PipelineRunner* a, const PipelineRunner* b) { return at(a) < at(b); });
}

PipelineRunner* RunningGraph::Find(const std::string& id) const {
  for (const auto& e : engines_) {
    if (PipelineRunner* p = e->Find(id)) return p;
  }
  return nullptr;
}

Bucket* RunningGraph::FindBucket(const std::string& name) const {
  for (const auto& e : engines_) {
    if (Bucket* b = e->buckets().Find(name)) return b;
  }
  return nullptr;
}

std::vector<const Bucket*> RunningGraph::Buckets() const {
  std::vector<const Bucket*> out;
  for (const auto& e : engines_) {
    for (const auto* b : e->buckets().All()) out.push_back(b);
  }
  std::sort(out.begin(), out.end(),
            [](const Bucket* a, const Bucket* b) { return a->name() < b->name(); });
  return out;
}

std::vector<RegionStatus> RunningGraph::Regions() const {
  std::vector<RegionStatus> out;
  for (const auto& e : engines_) {
    if (Checkpointer* cp = e->checkpointer()) {
      for (auto& r : cp->Regions()) out.push_back(std::move(r));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const RegionStatus& a, const RegionStatus& b) { return a.name < b.name; });
  return out;
}

}  // namespace kayak
