// What a graph change does to state, before it is made (SPEC 5.4,
// docs/operations.md "Plan a change"): for every component, whether its
// committed state is kept, starts empty (and the option whose change decides
// it) or is dropped; which regions keep running, which stop, and from which
// checkpoint each one built goes on. `kayak plan`, `PUT ...?dry_run=1` and
// the refusal of a PUT that drops state all read it.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <string_view>

#include "checkpoint/store.h"
#include "config/loader.h"

namespace kayak {

struct PlanInput {
  // The graph now: the running one, or the one the state directory's graph
  // file holds (null: none known, every component is judged by the
  // checkpoints alone). Its fingerprints are not read.
  const GraphSpec* before = nullptr;
  // The graph after the change (fingerprints in clear, as LoadGraphText
  // gives them).
  const GraphSpec* after = nullptr;
  // What the state directory committed (null: no state directory; state
  // lives in memory only and a rebuilt region starts empty).
  const checkpoint::CommittedUnits* committed = nullptr;
  // A clear fingerprint as the manifests keep it (Store::Seal).
  std::function<std::string(std::string_view)> seal;
  // A change to a running server: a region whose pipelines and buckets are
  // unchanged keeps running, the others stop at a savepoint. Otherwise (an
  // offline plan for the next start) every region starts from its newest
  // committed checkpoint.
  bool live = false;
};

struct Plan {
  // {"drops_state", "state_dir", "components": [...], "regions": [...]}
  // (docs/api.md has the fields).
  nlohmann::ordered_json json;
  // Committed state the new graph does not restore: a PUT refuses it
  // without ?accept_state_loss=1.
  bool drops_state = false;
};

Plan MakePlan(const PlanInput& in);

// The plan for a terminal: one line per component with state, one per
// region, then what the change loses.
std::string PlanText(const nlohmann::ordered_json& plan);

}  // namespace kayak
