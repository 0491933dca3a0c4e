// The graph's history, the config side of a graph change (SPEC 5.6,
// docs/lifecycle.md): every version of every pipeline and bucket, whether
// the config file or the API decides it, the graph text they compose, its
// validation, and the graph file that keeps them in the state directory.
// It runs nothing: the region manager (engine/region_manager.h) makes a
// graph text run.
//
// Threading: the owner (GraphManager) calls everything but the readers on
// one thread at a time; Versions and CurrentVersion read the copy Publish
// made, from any thread.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/store.h"
#include "common/clock.h"
#include "kayak/thread_annotations.h"
#include "config/loader.h"

namespace kayak {

class GraphHistory {
 public:
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
  using Entries = std::map<std::string, Entry>;
  // A graph text with the body under test last (its lines, to report errors
  // at the body's own lines).
  struct Composed {
    std::string text;
    int body_first_line = 0;  // 1-based line where the body under test starts (0: none)
    int body_lines = 0;
  };

  GraphHistory(const ComponentRegistry* registry, bool checkpointing, const Clock* clock,
               std::string state_dir);

  // With checkpointing: the store whose key seals the literal secrets of the
  // graph file (set before Load and Persist).
  void SetStore(const checkpoint::Store* store) { store_ = store; }
  // Reads the graph file, if there is one (`found`).
  Status Load(bool* found);
  // Writes the graph file (nothing without checkpointing).
  Status Persist() const;
  // The config file decides every entry not changed through the API.
  void Seed(const std::string& file_text);

  const Entries& buckets() const { return buckets_; }
  const Entries& pipelines() const { return pipelines_; }
  // Puts `buckets` and `pipelines` in force and the ones before in theirs.
  void Swap(Entries* buckets, Entries* pipelines);
  // A pipeline joins the graph's order (first seen first) if it is new.
  void Order(const std::string& pipeline);

  // The graph text of `buckets` and `pipelines`, with entry (`kind`, `name`)
  // last; "" for no entry under test.
  Composed Compose(const Entries& buckets, const Entries& pipelines, const std::string& kind,
                   const std::string& name) const;
  Composed Current() const { return Compose(buckets_, pipelines_, "", ""); }
  // Loads and checks `c`; errors inside the body are reported at its own
  // lines and columns (0 for errors about the graph around it).
  bool Validate(const Composed& c, GraphSpec* spec, nlohmann::ordered_json* errors) const;

  // After the entries changed: what readers on other threads see.
  void Publish();
  // Any thread: a pipeline's versions, secret option values as "***"
  // (nullopt: no such pipeline); its running version (0 if unknown).
  std::optional<nlohmann::ordered_json> Versions(const std::string& id) const;
  int CurrentVersion(const std::string& id) const;

  int64_t NowMs() const { return clock_->NowMs(); }

 private:
  std::string WithoutSecrets(const std::string& body) const;
  // A version's body as the graph file keeps it, and back.
  std::string AtRest(const std::string& body) const;
  Status FromRest(std::string* body) const;

  const ComponentRegistry* registry_;
  const bool checkpointing_;
  const Clock* clock_;
  const std::string state_dir_;
  const checkpoint::Store* store_ = nullptr;
  Entries buckets_, pipelines_;
  std::vector<std::string> order_;  // pipeline ids, first seen first

  mutable Mutex view_mu_;
  Entries view_pipelines_ KAYAK_GUARDED_BY(view_mu_);
};

}  // namespace kayak
