// The running graph and its history (SPEC 5.6 and 6, docs/lifecycle.md).
//
// Owns one engine per region of the graph. Creating, updating, reverting,
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

#include "state/store.h"
#include "config/loader.h"
#include "engine/engine.h"
#include "engine/running_graph.h"
#include "kayak/ingest.h"

namespace kayak {

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
  void CancelStart() { cancel_start_ = true; }
  // Graceful stop with a savepoint (Engine::Stop). Later API calls get 503.
  // False when a region did not reach its savepoint within the stop timeout
  // (the log says which, and from which checkpoint the next start replays).
  bool Stop();

  IngestRouter* ingest() { return &router_; }
  // The running graph as readers see it (null before Init). Any thread; the
  // caller keeps its engines alive for as long as it holds the pointer.
  std::shared_ptr<const RunningGraph> view() const;
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

  // kind: "pipeline" or "bucket". `body` is YAML or JSON holding one.
  Answer Put(const std::string& kind, const std::string& name, const std::string& body);
  Answer Delete(const std::string& id);
  Answer Revert(const std::string& id);
  Answer Restart(const std::string& id);
  // A pipeline's versions, their bodies with secret option values as "***".
  Answer Versions(const std::string& id) const;

 private:
  struct Version {
    int number = 0;
    int64_t created_ms = 0;
    std::string change;  // created, updated, reverted, deleted, from-file
    std::string body;    // YAML; empty when deleted
  };
  struct Entry {
    bool from_api = false;  // changed through the API: the config file no longer decides it
    std::vector<Version> versions;
    bool live() const { return !versions.empty() && versions.back().change != "deleted"; }
  };
  struct Composed {
    std::string text;
    int body_first_line = 0;  // 1-based line where the body under test starts (0: none)
    int body_lines = 0;
  };
  using Entries = std::map<std::string, Entry>;

  Composed Compose(const Entries& buckets, const Entries& pipelines, const std::string& kind,
                   const std::string& name) const;
  // Loads and checks `c`; errors inside the body are reported at its own
  // lines and columns.
  bool Validate(const Composed& c, GraphSpec* spec, nlohmann::ordered_json* errors) const;
  // Makes the graph `text` run: regions whose pipelines and buckets are
  // unchanged keep running; the others stop at a savepoint (all at once,
  // each bounded by the stop timeout), the graph is stored when `persist`,
  // and the new regions are built, restoring what was committed, and
  // started when `start`. `missed` gets the regions that did not reach the
  // savepoint. The region holding pipeline `restart` is rebuilt even when
  // unchanged.
  Status Rebuild(const std::string& text, bool start, bool persist = false,
                 std::vector<Checkpointer::Missed>* missed = nullptr,
                 const std::string& restart = "");
  // With checkpointing, once: opens the state directory and reads it.
  Status OpenStore();
  void StartParts();
  // Stops `engines` at once; the regions that missed their savepoint.
  static std::vector<Checkpointer::Missed> StopParts(
      const std::vector<std::shared_ptr<Engine>>& engines);
  // Publishes parts_ to readers.
  void PublishEngines(bool changing);
  Status Persist() const;
  Status LoadStored(bool* found);
  void Seed(const std::string& file_text);
  // Waits (under `lock`) for Start; false if the server stops instead.
  bool WaitStarted(std::unique_lock<std::mutex>& lock);
  // Once the graph started, the live pipeline `id` in `*it`; otherwise the
  // answer saying why not (503 while stopping, 404).
  std::optional<Answer> FindLive(std::unique_lock<std::mutex>& lock, const std::string& id,
                                 Entries::iterator* it);
  Answer Apply(Entries buckets, Entries pipelines, const std::string& kind,
               const std::string& name, Outcome ok_status);
  int64_t NowMs() const;
  std::string WithoutSecrets(const std::string& body) const;
  // A version's body as the graph file keeps it, and back.
  std::string AtRest(const std::string& body) const;
  Status FromRest(std::string* body) const;

  void ChangeLoop();
  // After the entries changed: what readers on other threads see.
  void Publish();

  const Options opt_;
  mutable std::mutex mu_;
  std::condition_variable started_cv_;  // Start or Stop happened
  IngestRouter router_;  // outlives every engine: the listener looks paths up here
  std::unique_ptr<checkpoint::Store> store_;
  // What Recover read, until the first build restores it.
  std::map<std::string, checkpoint::RestoredUnit> restored_;
  bool restored_read_ = false;
  int64_t recover_started_ms_ = 0;  // for the log line saying how long restoring took
  GraphSpec spec_;
  // One engine per region of the running graph (SplitIntoRegions).
  struct Part {
    std::string name;  // the region's
    std::string key;   // RegionSpec::key: what it was built from
    std::shared_ptr<Engine> engine;
    bool started = false;
  };
  std::vector<Part> parts_;
  Entries buckets_, pipelines_;
  std::vector<std::string> order_;  // pipeline ids and "bucket:" names, first seen first
  bool started_ = false;
  std::atomic<bool> built_{false};
  std::atomic<bool> cancel_start_{false};
  bool stopped_ = false;

  // What the API reads while a change runs: the running graph and a copy of
  // the pipelines' versions.
  mutable std::mutex view_mu_;
  std::shared_ptr<const RunningGraph> view_;  // guarded by view_mu_
  Entries view_pipelines_;                    // guarded by view_mu_

  // Changes from the API wait here for the change thread.
  struct Change {
    std::function<Answer()> run;
    std::function<void(Answer)> done;
  };
  std::mutex changes_mu_;
  std::condition_variable changes_cv_;
  std::deque<Change> changes_;   // guarded by changes_mu_
  bool changes_closed_ = false;  // guarded by changes_mu_
  std::thread change_thread_;
};

}  // namespace kayak
