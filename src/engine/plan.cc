#include "engine/plan.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "checkpoint/state_layout.h"
#include "common/human.h"
#include "engine/engine.h"

namespace kayak {

namespace {

using Json = nlohmann::ordered_json;

// One piece of a graph that may keep state, at its place.
struct Place {
  std::string pipeline;  // "" for a bucket
  std::string place;     // input, transforms[i], outputs[k]; "" for a bucket
  std::string unit;      // its checkpoint unit
  std::string type;      // the component's type; "bucket"
  const ComponentSpec* component = nullptr;
  const BucketSpec* bucket = nullptr;
  std::string Label() const {
    if (bucket != nullptr) return "bucket " + bucket->name;
    return "pipeline " + pipeline + " " + place + " (" + type + ")";
  }
  const std::string& fingerprint() const {
    return bucket != nullptr ? bucket->fingerprint : component->fingerprint;
  }
};

// A graph's places, and where each pipeline's are (a plan of a graph of
// thousands of pipelines looks a moved component up in its own pipeline).
struct Places {
  std::vector<Place> all;
  std::map<std::string, std::vector<const Place*>> by_pipeline;
  Places() = default;
  explicit Places(std::vector<Place> v) : all(std::move(v)) {
    for (const auto& p : all) {
      if (p.bucket == nullptr) by_pipeline[p.pipeline].push_back(&p);
    }
  }
  Places(const Places&) = delete;
  Places& operator=(const Places&) = delete;
};

std::vector<Place> PlacesOf(const GraphSpec& g) {
  std::vector<Place> out;
  auto add = [&](const PipelineSpec& p, std::string place, std::string unit,
                 const ComponentSpec& c) {
    out.push_back(Place{p.id, std::move(place), std::move(unit),
                        c.def != nullptr ? c.def->type : "?", &c, nullptr});
  };
  for (const auto& p : g.pipelines) {
    add(p, "input", layout::InputUnit(p.id), p.input);
    for (size_t i = 0; i < p.transforms.size(); ++i) {
      add(p, "transforms[" + std::to_string(i) + "]", layout::TransformUnit(p.id, i),
          p.transforms[i]);
    }
    for (size_t k = 0; k < p.outputs.size(); ++k) add(p, p.OutputName(k), OutputUnitOf(p, k), p.outputs[k]);
  }
  for (const auto& b : g.buckets) {
    out.push_back(Place{"", "", layout::BucketUnit(b.name), "bucket", nullptr, &b});
  }
  return out;
}

// The identity options that differ between two components of one type
// (added, removed or changed), by name; a bucket's is idle_timeout_secs.
std::vector<std::string> ChangedOptions(const Place& a, const Place& b) {
  std::vector<std::string> out;
  if (a.bucket != nullptr || b.bucket != nullptr) {
    if (a.bucket != nullptr && b.bucket != nullptr &&
        a.bucket->idle_timeout_secs != b.bucket->idle_timeout_secs) {
      out.push_back("idle_timeout_secs");
    }
    return out;
  }
  const auto x = IdentityOptions(*a.component), y = IdentityOptions(*b.component);
  std::set<std::string> names;
  for (const auto& [k, v] : x) names.insert(k);
  for (const auto& [k, v] : y) names.insert(k);
  for (const auto& n : names) {
    auto i = x.find(n), j = y.find(n);
    if (i == x.end() || j == y.end() || i->second != j->second) out.push_back(n);
  }
  return out;
}

bool Same(const Place& a, const Place& b) {
  if ((a.bucket != nullptr) != (b.bucket != nullptr)) return false;
  if (a.type != b.type) return false;
  if (a.bucket != nullptr) return a.bucket->idle_timeout_secs == b.bucket->idle_timeout_secs;
  return IdentityOptions(*a.component) == IdentityOptions(*b.component);
}

std::string Quoted(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "'" : ", '") + (n.empty() ? "value" : n) + "'";
  return s;
}

// The place in `c`'s pipeline of `places` where a component the same as `c`
// sits at another place than `c`'s (null for none).
const Place* Moved(const Place& c, const Places& places) {
  if (c.bucket != nullptr) return nullptr;
  auto it = places.by_pipeline.find(c.pipeline);
  if (it == places.by_pipeline.end()) return nullptr;
  for (const Place* p : it->second) {
    if (p->place != c.place && Same(*p, c)) return p;
  }
  return nullptr;
}

std::string MovedTo(const Place& c, const Places& places) {
  const Place* p = Moved(c, places);
  return p != nullptr ? p->place : "";
}

// Why the component at `now`'s place does not get the state committed there.
std::string WhyNotRestored(const Place* was, const Place& now, const Places& before,
                           uint64_t checkpoint,
                           std::vector<std::string>* options) {
  if (const std::string from = MovedTo(now, before); !from.empty()) {
    return "it moved from " + from + "; state is kept by place in the chain, so it starts empty";
  }
  if (was == nullptr) {
    return "checkpoint " + std::to_string(checkpoint) +
           " holds another component's state at this place";
  }
  *options = ChangedOptions(*was, now);
  if (!options->empty()) {
    return std::string(options->size() == 1 ? "identity option " : "identity options ") +
           Quoted(*options) + " changed";
  }
  return "its config differs from the one checkpoint " + std::to_string(checkpoint) +
         " was taken with";
}

// What a unit keeps: "position" (an input's), "output" (an output's record
// of what it wrote) or "state" (a transform's or a bucket's).
std::string UnitKind(const std::string& unit) {
  if (unit.size() > 6 && unit.compare(unit.size() - 6, 6, ".input") == 0) return "position";
  const size_t dot = unit.rfind('.');
  if (unit.rfind("p.", 0) == 0 && dot != std::string::npos && dot + 1 < unit.size() &&
      (unit[dot + 1] == 'o' || unit.compare(dot, std::string::npos, ".dead") == 0)) {
    return "output";
  }
  return "state";
}

std::string RegionLabel(const std::string& name) {
  return name.empty() ? "(buckets no pipeline uses)" : name;
}

}  // namespace

Plan MakePlan(const PlanInput& in) {
  Plan plan;
  const Places after(PlacesOf(*in.after));
  const Places before(in.before != nullptr ? PlacesOf(*in.before) : std::vector<Place>{});
  std::map<std::string, const Place*> before_by_unit, after_by_unit;
  for (const auto& p : before.all) before_by_unit[p.unit] = &p;
  for (const auto& p : after.all) after_by_unit[p.unit] = &p;

  // Regions: which keep running (live: unchanged config text).
  const std::vector<RegionSpec> after_regions = SplitIntoRegions(*in.after);
  const std::vector<RegionSpec> before_regions =
      in.before != nullptr ? SplitIntoRegions(*in.before) : std::vector<RegionSpec>{};
  std::set<std::string> before_keys, after_keys;
  for (const auto& r : before_regions) before_keys.insert(r.key);
  for (const auto& r : after_regions) after_keys.insert(r.key);
  std::set<std::string> running_pipelines, running_buckets;  // live, in unchanged regions
  if (in.live) {
    for (const auto& r : after_regions) {
      if (!before_keys.count(r.key)) continue;
      for (const auto& p : r.spec.pipelines) running_pipelines.insert(p.id);
      for (const auto& b : r.bucket_names) running_buckets.insert(b);
    }
  }
  auto keeps_running = [&](const Place& p) {
    return p.bucket != nullptr ? running_buckets.count(p.bucket->name) > 0
                               : running_pipelines.count(p.pipeline) > 0;
  };

  Json components = Json::array();
  uint64_t lost_bytes = 0;
  int losing = 0, resets = 0;
  // Committed state the new graph does not take. Only what the graph
  // computed (a transform's, a bucket's) is a loss that needs consent; an
  // input's position or an output's record belongs to what it reads or
  // writes, and a new source or destination starts its own.
  auto lose = [&](Json* e, uint64_t bytes) {
    (*e)["loses_state"] = true;
    if ((*e)["kind"] == "state") {
      ++losing;
      lost_bytes += bytes;
    } else {
      ++resets;
    }
  };
  auto entry = [](const Place& p) {
    Json e;
    e["component"] = p.Label();
    if (p.bucket != nullptr) {
      e["bucket"] = p.bucket->name;
    } else {
      e["pipeline"] = p.pipeline;
      e["place"] = p.place;
    }
    e["type"] = p.type;
    e["unit"] = p.unit;
    e["kind"] = UnitKind(p.unit);
    return e;
  };
  for (const auto& a : after.all) {
    Json e = entry(a);
    const checkpoint::CommittedUnit* cu = nullptr;
    if (in.committed != nullptr) {
      auto it = in.committed->find(a.unit);
      if (it != in.committed->end()) cu = &it->second;
    }
    auto was_it = before_by_unit.find(a.unit);
    const Place* was = was_it != before_by_unit.end() ? was_it->second : nullptr;
    bool loses = false;
    if (in.live && keeps_running(a)) {
      e["state"] = "kept";
      e["why"] = "its region keeps running";
    } else if (cu != nullptr && was != nullptr && was->type != a.type &&
               !(in.seal && in.seal(a.fingerprint()) == cu->fingerprint)) {
      // Another component held this place: its state goes, this one is new.
      Json d = entry(*was);
      const std::string to = MovedTo(*was, after);
      d["state"] = "dropped";
      d["why"] = to.empty() ? "a " + a.type + " takes its place"
                            : "it moved to " + to +
                                  "; state is kept by place in the chain, so its state goes";
      d["checkpoint"] = cu->checkpoint_id;
      d["bytes"] = cu->bytes;
      lose(&d, cu->bytes);
      components.push_back(std::move(d));
      const std::string from = MovedTo(a, before);
      e["state"] = "new";
      e["why"] = from.empty() ? "a new component at this place"
                              : "it moved from " + from + "; it starts empty here";
    } else if (cu != nullptr) {
      e["checkpoint"] = cu->checkpoint_id;
      e["bytes"] = cu->bytes;
      if (in.seal && in.seal(a.fingerprint()) == cu->fingerprint) {
        e["state"] = "kept";
        e["why"] = in.live ? "restored from the savepoint taken at the change"
                           : "restored from checkpoint " + std::to_string(cu->checkpoint_id);
      } else {
        std::vector<std::string> options;
        e["state"] = "starts_empty";
        e["why"] = WhyNotRestored(was, a, before, cu->checkpoint_id, &options);
        if (!options.empty()) e["options"] = options;
        loses = true;
      }
    } else if (in.committed == nullptr) {
      e["state"] = "starts_empty";
      e["why"] = "no state directory: its region is built again and keeps nothing";
    } else if (was != nullptr && Same(*was, a)) {
      e["state"] = "none";
      e["why"] = "nothing of it is checkpointed";
    } else {
      e["state"] = "new";
      std::vector<std::string> options;
      if (was != nullptr && was->type == a.type) options = ChangedOptions(*was, a);
      const Place* from = Moved(a, before);
      if (from != nullptr && !in.committed->count(from->unit)) e["state"] = "none";
      e["why"] = from != nullptr
                     ? "it moved from " + from->place +
                           (in.committed->count(from->unit) ? "; it starts empty here"
                                                            : "; nothing of it is checkpointed")
                 : was == nullptr   ? std::string("a new component")
                 : !options.empty() ? "identity " + Quoted(options) + " changed"
                                    : std::string("nothing of it is checkpointed");
      if (!options.empty()) e["options"] = options;
    }
    if (loses) {
      lose(&e, cu->bytes);
    } else {
      e["loses_state"] = false;
    }
    components.push_back(std::move(e));
  }
  // Committed state no component of the new graph takes.
  if (in.committed != nullptr) {
    for (const auto& [unit, cu] : *in.committed) {
      if (after_by_unit.count(unit)) continue;
      auto was_it = before_by_unit.find(unit);
      Json e;
      std::string why;
      if (was_it != before_by_unit.end()) {
        const Place& was = *was_it->second;
        e = entry(was);
        const bool pipeline_gone =
            was.bucket == nullptr &&
            after.by_pipeline.count(was.pipeline) == 0;
        if (was.bucket != nullptr) {
          why = "bucket " + was.bucket->name + " is not in the new graph";
        } else if (pipeline_gone) {
          why = "pipeline " + was.pipeline + " is not in the new graph";
        } else {
          why = "the new pipeline has no " + was.place;
          if (const std::string to = MovedTo(was, after); !to.empty()) {
            why = "it moved to " + to + "; state is kept by place in the chain, so its state goes";
          }
        }
      } else {
        e["component"] = "unit " + unit;
        e["unit"] = unit;
        e["kind"] = UnitKind(unit);
        why = "the new graph has no component at its place";
      }
      e["state"] = "dropped";
      e["why"] = why;
      e["checkpoint"] = cu.checkpoint_id;
      e["bytes"] = cu.bytes;
      lose(&e, cu.bytes);
      components.push_back(std::move(e));
    }
  }

  // Regions.
  std::map<std::string, uint64_t> last_checkpoint;  // by region name
  if (in.committed != nullptr) {
    for (const auto& [unit, cu] : *in.committed) {
      uint64_t& id = last_checkpoint[cu.region];
      id = std::max(id, cu.checkpoint_id);
    }
  }
  auto region_json = [&](const RegionSpec& r) {
    Json j;
    j["region"] = RegionLabel(r.name);
    Json ps = Json::array();
    for (const auto& p : r.spec.pipelines) ps.push_back(p.id);
    j["pipelines"] = std::move(ps);
    j["buckets"] = r.bucket_names;
    auto it = last_checkpoint.find(r.name);
    if (it != last_checkpoint.end()) j["checkpoint"] = it->second;
    return j;
  };
  Json regions = Json::array();
  if (in.live) {
    for (const auto& r : before_regions) {
      if (after_keys.count(r.key)) continue;
      Json j = region_json(r);
      j["action"] = "stops";
      j["says"] = "stops at a savepoint: its pipelines or buckets change";
      regions.push_back(std::move(j));
    }
  }
  for (const auto& r : after_regions) {
    Json j = region_json(r);
    auto it = last_checkpoint.find(r.name);
    const std::string n = it != last_checkpoint.end() ? std::to_string(it->second) : "";
    if (in.live && before_keys.count(r.key)) {
      j["action"] = "keeps_running";
      j["says"] = "keeps running";
    } else if (in.live) {
      j["action"] = "starts";
      j["says"] = in.committed == nullptr
                      ? std::string("starts empty (no state directory)")
                  : n.empty() ? std::string("starts from the savepoint taken at the change")
                              : "starts from the savepoint taken at the change (from checkpoint " +
                                    n + " if the savepoint misses)";
    } else {
      j["action"] = "starts";
      j["says"] = n.empty() ? std::string("starts with nothing committed: its inputs begin at "
                                          "their start_from")
                            : "starts from checkpoint " + n +
                                  ": its inputs go back to the positions it holds";
    }
    regions.push_back(std::move(j));
  }

  plan.drops_state = losing > 0;
  plan.json["drops_state"] = plan.drops_state;
  plan.json["state_dir"] = in.committed != nullptr;
  plan.json["live"] = in.live;
  plan.json["losing_components"] = losing;
  plan.json["lost_bytes"] = lost_bytes;
  plan.json["reset_components"] = resets;
  plan.json["components"] = std::move(components);
  plan.json["regions"] = std::move(regions);
  return plan;
}

std::string PlanText(const Json& plan) {
  std::string out = "components:\n";
  size_t width = 0;
  for (const auto& c : plan["components"]) {
    width = std::max(width, c["component"].get<std::string>().size());
  }
  for (const auto& c : plan["components"]) {
    std::string state = c["state"].get<std::string>();
    if (c.value("loses_state", false)) {
      std::transform(state.begin(), state.end(), state.begin(),
                     [](unsigned char ch) { return ch == '_' ? ' ' : std::toupper(ch); });
    } else {
      std::replace(state.begin(), state.end(), '_', ' ');
    }
    std::string name = c["component"].get<std::string>();
    name.resize(width, ' ');
    std::string line = "  " + state;
    line.resize(16, ' ');
    line += name + "  " + c["why"].get<std::string>();
    if (c.contains("bytes")) {
      if (c.value("loses_state", false)) {
        line += "; loses " + HumanBytes(c["bytes"].get<uint64_t>()) + " of checkpoint " +
                std::to_string(c["checkpoint"].get<uint64_t>());
      } else {
        line += " (" + HumanBytes(c["bytes"].get<uint64_t>()) + ")";
      }
    }
    out += line + "\n";
  }
  out += "regions:\n";
  for (const auto& r : plan["regions"]) {
    std::string ps;
    for (const auto& p : r["pipelines"]) ps += (ps.empty() ? "" : ", ") + p.get<std::string>();
    out += "  " + r["region"].get<std::string>() + (ps.empty() ? "" : " (" + ps + ")") + ": " +
           r["says"].get<std::string>() + "\n";
  }
  if (plan.value("reset_components", 0) > 0) {
    out += "positions and output records reset: " +
           std::to_string(plan["reset_components"].get<int>()) +
           " (a new source or destination starts its own)\n";
  }
  if (plan["drops_state"].get<bool>()) {
    out += "this change drops state: " + std::to_string(plan["losing_components"].get<int>()) +
           " component(s) lose " + HumanBytes(plan["lost_bytes"].get<uint64_t>()) +
           " of committed state\n";
  } else {
    out += "this change keeps all committed state\n";
  }
  return out;
}

}  // namespace kayak
