// What readers (the API, the dashboard, /metrics) see of the running graph:
// the engines of its regions, one per region, held alive for as long as a
// reader keeps the view. A graph change publishes a new view; readers on
// other threads never wait for it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace kayak {

class RunningGraph {
 public:
  // `order`: pipeline ids in the graph's order (upstreams first);
  // `changing`: regions are being stopped or built, so a pipeline or bucket
  // missing from the view may be back soon.
  RunningGraph(std::vector<std::shared_ptr<Engine>> engines, const std::vector<std::string>& order,
               bool changing, bool checkpointing, const Clock* clock,
               int64_t checkpoint_interval_ms);

  bool changing() const { return changing_; }
  bool checkpointing() const { return checkpointing_; }
  const Clock* clock() const { return clock_; }
  int64_t checkpoint_interval_ms() const { return checkpoint_interval_ms_; }
  const std::vector<std::shared_ptr<Engine>>& engines() const { return engines_; }

  // Every pipeline, upstreams first.
  const std::vector<PipelineRunner*>& pipelines() const { return pipelines_; }
  PipelineRunner* Find(const std::string& id) const;
  Bucket* FindBucket(const std::string& name) const;
  std::vector<const Bucket*> Buckets() const;
  // Every region's checkpoint status (empty without checkpointing).
  std::vector<RegionStatus> Regions() const;

 private:
  std::vector<std::shared_ptr<Engine>> engines_;
  std::vector<PipelineRunner*> pipelines_;
  bool changing_;
  bool checkpointing_;
  const Clock* clock_;
  int64_t checkpoint_interval_ms_;
};

}  // namespace kayak
