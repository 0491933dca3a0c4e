// The engine side of a graph change (SPEC 5.6, docs/lifecycle.md): one
// engine per region of the running graph. A new graph text stops only the
// regions it changes at a savepoint and builds them again, restoring every
// component whose own config is unchanged at the same place (checkpoint
// fingerprints); every other region keeps running. It keeps no history: the
// graph's versions are GraphHistory's (engine/graph_history.h).
//
// Threading: the owner (GraphManager) calls Open, Rebuild, Start, Stop and
// DropDeleted one at a time; readers on any thread take view().
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/store.h"
#include "kayak/thread_annotations.h"
#include "config/loader.h"
#include "engine/engine.h"
#include "engine/running_graph.h"
#include "kayak/ingest.h"

namespace kayak {

class RegionManager {
 public:
  RegionManager(const ComponentRegistry* registry, EngineOptions engine,
                std::set<std::string> discard_state);

  // With checkpointing, once: opens the state directory and reads what it
  // committed (restored by the first Rebuild). The store, or null without
  // checkpointing.
  Status Open();
  const checkpoint::Store* store() const { return store_.get(); }

  // Makes the graph `text` run: regions whose pipelines and buckets are
  // unchanged keep running; the others stop at a savepoint (all at once,
  // each bounded by the stop timeout), `before_build` runs (the graph file
  // is stored there), and the new regions are built, restoring what was
  // committed, and started when `start`. `missed` gets the regions that did
  // not reach the savepoint. The region holding pipeline `restart` is
  // rebuilt even when unchanged.
  Status Rebuild(const std::string& text, bool start,
                 const std::function<Status()>& before_build = nullptr,
                 std::vector<Checkpointer::Missed>* missed = nullptr,
                 const std::string& restart = "");
  // Starts every region not started yet; returns once their inputs are open
  // (at most 5 s).
  void Start();
  // A stop came: Start starts no more regions and returns. Any thread.
  void CancelStart() { cancel_start_ = true; }
  // Stops every region at once with a savepoint; the regions that missed it.
  std::vector<Checkpointer::Missed> Stop();
  // After pipeline `id` was deleted from the running graph: the checkpoints of
  // regions that no longer exist, the private directory `private_dir` of its
  // input ("" for none) and its crash guard's file go.
  void DropDeleted(const std::string& id, const std::string& private_dir);

  // The graph as running now.
  const GraphSpec& spec() const { return spec_; }
  IngestRouter* ingest() { return &router_; }
  // The running graph as readers see it (null before the first Rebuild).
  // Any thread; the caller keeps its engines alive while it holds it.
  std::shared_ptr<const RunningGraph> view() const;

 private:
  struct Part {
    std::string name;  // the region's
    std::string key;   // RegionSpec::key: what it was built from
    std::shared_ptr<Engine> engine;
    bool started = false;
  };
  static std::vector<Checkpointer::Missed> StopParts(
      const std::vector<std::shared_ptr<Engine>>& engines);
  // Publishes parts_ to readers.
  void PublishEngines(bool changing);

  const ComponentRegistry* registry_;
  const EngineOptions engine_;
  const std::set<std::string> discard_state_;
  IngestRouter router_;  // outlives every engine: the listener looks paths up here
  std::unique_ptr<checkpoint::Store> store_;
  // What Open read, until the first build restores it.
  std::map<std::string, checkpoint::RestoredUnit> restored_;
  bool restored_read_ = false;
  int64_t recover_started_ms_ = 0;  // for the log line saying how long restoring took
  GraphSpec spec_;
  std::vector<Part> parts_;
  std::atomic<bool> cancel_start_{false};

  mutable Mutex view_mu_;
  std::shared_ptr<const RunningGraph> view_ KAYAK_GUARDED_BY(view_mu_);
};

}  // namespace kayak
