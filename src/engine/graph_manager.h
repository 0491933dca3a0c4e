// The running graph and its history (SPEC 5.6 and 6, docs/lifecycle.md):
// the graph's versions (GraphHistory, the config side) and its running
// regions (RegionManager, the engine side), and the thread that changes them.
//
// Creating, updating, reverting,
// restarting or deleting a pipeline (or declaring a bucket) through the API
// validates the new graph like a config file, stops only the regions the
// change touches at a savepoint, and builds and starts them again, restoring
// every component whose own config is unchanged at the same place
// (checkpoint fingerprints); every other region keeps running. Every version
// is kept; with a state directory in <state>/graph/GRAPH, so API changes
// survive a restart.
//
// Threading: changes run on the manager's change thread (Submit); Init,
// Start and Stop come from the main thread. One mutex orders them. Readers
// on any thread take view().
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kayak/thread_annotations.h"
#include "config/loader.h"
#include "engine/graph_history.h"
#include "engine/plan.h"
#include "engine/region_manager.h"
#include "engine/running_graph.h"
#include "kayak/ingest.h"

namespace kayak {

// How a PUT of a pipeline or bucket is made.
struct GraphPutOptions {
  // Answer with the change's plan (engine/plan.h) and make nothing.
  bool dry_run = false;
  // With a state directory, a change that drops committed state is refused
  // (409 with its plan) unless this is set.
  bool accept_state_loss = false;
};

class GraphManager {
 public:
  struct Options {
    const ComponentRegistry* registry = nullptr;
    // Without store, restored or ingest: the manager provides them.
    EngineOptions engine;
    // Regions whose checkpoints the first start discards (--discard-state).
    std::set<std::string> discard_state;
  };
  // How a change or a query went; the API makes an HTTP status of it.
  enum class Outcome {
    kOk,
    kCreated,
    kInvalid,      // the request or the graph it makes is not valid
    kNotFound,
    kConflict,     // valid, but not now (a pipeline that feeds others, no version before)
    kUnavailable,  // the server is stopping, or too many changes wait
    kFailed,       // the new graph did not start
  };
  // An answer for the API: outcome and JSON body.
  struct Answer {
    Outcome outcome = Outcome::kOk;
    nlohmann::ordered_json body;
  };

  explicit GraphManager(Options options);
  ~GraphManager();

  // Loads the stored graph (with a state directory) and the config file's
  // text, and builds the engine without starting it. On config errors fills
  // `errors` (file:line:column) and returns Invalid; other failures (an
  // unreadable state directory) return their status.
  Status Init(const std::string& file_text, const std::string& file_name, ErrorList* errors);
  // Starts the engine and returns once its inputs are open (at most 5 s).
  void Start();
  // A stop came: Start (or a change) starts no more of the graph's regions
  // and returns. Any thread.
  void CancelStart() { regions_.CancelStart(); }
  // Graceful stop with a savepoint (Engine::Stop). Later API calls get 503.
  // False when a region did not reach its savepoint within the stop timeout
  // (the log says which, and from which checkpoint the next start replays).
  bool Stop();

  IngestRouter* ingest() { return regions_.ingest(); }
  // The server's memory budget (null: none kept).
  MemoryBudget* memory() const { return opt_.engine.memory; }
  // The running graph as readers see it (null before Init). Any thread; the
  // caller keeps its engines alive for as long as it holds the pointer.
  std::shared_ptr<const RunningGraph> view() const { return regions_.view(); }
  // Whether Init has built the graph (a reader that finds view() null after
  // that meets a change being applied). Any thread.
  bool built() const { return built_.load(); }
  // The version number of a pipeline's running config (0 if unknown).
  int CurrentVersion(const std::string& id) const;

  // Runs `change` (Put, Delete, Revert or Restart) on the graph's own thread,
  // never the caller's, and hands its answer to `done` there. Changes run one
  // at a time, in order; false (nothing runs) when kMaxQueuedChanges wait
  // already or the server is stopping.
  static constexpr size_t kMaxQueuedChanges = 16;
  bool Submit(std::function<Answer()> change, std::function<void(Answer)> done);

  using PutOptions = GraphPutOptions;
  // kind: "pipeline" or "bucket". `body` is YAML or JSON holding one.
  Answer Put(const std::string& kind, const std::string& name, const std::string& body,
             PutOptions options = {});
  Answer Delete(const std::string& id);
  Answer Revert(const std::string& id);
  Answer Restart(const std::string& id);
  // A pipeline's versions, their bodies with secret option values as "***".
  Answer Versions(const std::string& id) const;

 private:
  using Entries = GraphHistory::Entries;
  using Entry = GraphHistory::Entry;
  using Version = GraphHistory::Version;

  // Waits (under `lock`) for Start; false if the server stops instead.
  bool WaitStarted(MutexLock& lock) KAYAK_REQUIRES(mu_);
  // Once the graph started, the live pipeline `id` in `*it`; otherwise the
  // answer saying why not (503 while stopping, 404).
  std::optional<Answer> FindLive(MutexLock& lock, const std::string& id,
                                 Entries::const_iterator* it) KAYAK_REQUIRES(mu_);
  // Puts `buckets` and `pipelines` in force and makes them run, or puts the
  // graph before back when they do not start.
  Answer Apply(Entries buckets, Entries pipelines, const std::string& kind,
               const std::string& name, Outcome ok_status) KAYAK_REQUIRES(mu_);
  // What making `c` the graph does to state; `c` valid, else the answer
  // saying why not.
  std::optional<Answer> PlanOf(const GraphHistory::Composed& c, Plan* plan) KAYAK_REQUIRES(mu_);
  // Makes the history's current graph run; `persist` stores it first.
  Status Run(bool persist, std::vector<Checkpointer::Missed>* missed = nullptr,
             const std::string& restart = "") KAYAK_REQUIRES(mu_);

  void ChangeLoop();

  const Options opt_;
  // Orders Init, Start, Stop and the changes; the history and the regions
  // are changed only with it held (their readers synchronise themselves).
  Mutex mu_;
  std::condition_variable started_cv_;  // Start or Stop happened
  GraphHistory history_;
  RegionManager regions_;
  bool started_ KAYAK_GUARDED_BY(mu_) = false;
  bool stopped_ KAYAK_GUARDED_BY(mu_) = false;
  std::atomic<bool> built_{false};

  // Changes from the API wait here for the change thread.
  struct Change {
    std::function<Answer()> run;
    std::function<void(Answer)> done;
  };
  Mutex changes_mu_;
  std::condition_variable changes_cv_;
  std::deque<Change> changes_ KAYAK_GUARDED_BY(changes_mu_);
  bool changes_closed_ KAYAK_GUARDED_BY(changes_mu_) = false;
  std::thread change_thread_;
};

}  // namespace kayak
