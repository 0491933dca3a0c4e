// What a change does to state, judged against committed units: kept,
// starts empty with the option that decides it, moved, dropped; regions.
#include "engine/plan.h"

#include <gtest/gtest.h>

#include "checkpoint/state_layout.h"
#include "components.h"

namespace kayak {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kBefore = R"(
buckets:
  totals: {idle_timeout_secs: 60, max_keys: 10}
pipelines:
  p:
    input:
      dummy: {rate_per_sec: 100}
    transforms:
      - map: {key: "this.seq % 10"}
      - rolling_window: {key: key, window_secs: 60, field: seq}
      - bucket: {name: totals, key: key, op: add, field: seq}
    outputs:
      - file: {path: /tmp/plan-test-out}
  q:
    input:
      dummy: {rate_per_sec: 100}
    outputs:
      - stdout: {}
)";

GraphSpec Load(const std::string& text) {
  GraphSpec spec;
  ErrorList errors;
  EXPECT_TRUE(LoadGraphText(text, "t.yaml", BuiltinComponents(), &spec, &errors))
      << errors.ToString();
  return spec;
}

std::string Seal(std::string_view fp) { return "k1:" + std::string(fp); }

// Every stateful unit of `text` committed at checkpoint 7, as a start from
// it would find them.
checkpoint::CommittedUnits CommitAll(const GraphSpec& g) {
  checkpoint::CommittedUnits c;
  for (const auto& p : g.pipelines) {
    c[layout::InputUnit(p.id)] = {Seal(p.input.fingerprint), p.id, 7, 0, 10};
    for (size_t i = 0; i < p.transforms.size(); ++i) {
      if (p.transforms[i].def->type == "rolling_window") {
        c[layout::TransformUnit(p.id, i)] = {Seal(p.transforms[i].fingerprint), p.id, 7, 0, 100};
      }
    }
    for (size_t k = 0; k < p.outputs.size(); ++k) {
      if (p.outputs[k].def->type == "file") {
        c[layout::OutputUnit(p.id, k)] = {Seal(p.outputs[k].fingerprint), p.id, 7, 0, 20};
      }
    }
  }
  for (const auto& b : g.buckets) c[layout::BucketUnit(b.name)] = {Seal(b.fingerprint), "p", 7, 0, 1000};
  return c;
}

struct Planned {
  Plan plan;
  const Json* Find(const std::string& component) const {
    for (const auto& c : plan.json["components"]) {
      if (c["component"] == component) return &c;
    }
    return nullptr;
  }
  std::string State(const std::string& component) const {
    const Json* c = Find(component);
    return c == nullptr ? "(absent)" : (*c)["state"].get<std::string>();
  }
};

Planned PlanOf(const std::string& after_text, bool live) {
  const GraphSpec before = Load(kBefore), after = Load(after_text);
  const checkpoint::CommittedUnits committed = CommitAll(before);
  PlanInput in;
  in.before = &before;
  in.after = &after;
  in.committed = &committed;
  in.seal = Seal;
  in.live = live;
  return Planned{MakePlan(in)};
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

TEST(PlanTest, TheSameGraphKeepsEverything) {
  for (bool live : {false, true}) {
    Planned p = PlanOf(kBefore, live);
    EXPECT_FALSE(p.plan.drops_state);
    EXPECT_EQ(p.State("pipeline p transforms[1] (rolling_window)"), "kept");
    EXPECT_EQ(p.State("pipeline p transforms[0] (map)"), live ? "kept" : "none");
    EXPECT_EQ(p.State("bucket totals"), "kept");
    for (const auto& r : p.plan.json["regions"]) {
      EXPECT_EQ(r["action"], live ? "keeps_running" : "starts") << r.dump();
    }
  }
}

TEST(PlanTest, ATuningOptionKeepsStateAndAnIdentityOptionDropsItByName) {
  Planned tuning = PlanOf(Replace(Replace(kBefore, "max_keys: 10", "max_keys: 20"),
                                  "rate_per_sec: 100}\n    transforms", "rate_per_sec: 5}\n    transforms"),
                          true);
  EXPECT_FALSE(tuning.plan.drops_state) << tuning.plan.json.dump(2);
  EXPECT_EQ(tuning.State("bucket totals"), "kept");

  Planned window = PlanOf(Replace(kBefore, "window_secs: 60", "window_secs: 30"), true);
  EXPECT_TRUE(window.plan.drops_state);
  const Json* w = window.Find("pipeline p transforms[1] (rolling_window)");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ((*w)["state"], "starts_empty");
  EXPECT_EQ((*w)["options"], Json::array({"window_secs"}));
  EXPECT_EQ((*w)["bytes"], 100);
  EXPECT_EQ(window.plan.json["lost_bytes"], 100);
  // Pipeline q's region is untouched and keeps running; p's stops and starts.
  std::map<std::string, std::string> actions;
  for (const auto& r : window.plan.json["regions"]) {
    actions[r["region"].get<std::string>() + ":" + r["action"].get<std::string>()] = "";
  }
  EXPECT_TRUE(actions.count("q:keeps_running")) << window.plan.json["regions"].dump();
  EXPECT_TRUE(actions.count("p:stops"));
  EXPECT_TRUE(actions.count("p:starts"));

  Planned idle = PlanOf(Replace(kBefore, "idle_timeout_secs: 60", "idle_timeout_secs: 61"), false);
  EXPECT_TRUE(idle.plan.drops_state);
  EXPECT_EQ((*idle.Find("bucket totals"))["options"], Json::array({"idle_timeout_secs"}));
}

TEST(PlanTest, AComponentInsertedBeforeAWindowMovesItAndItsStateGoes) {
  Planned p = PlanOf(Replace(kBefore, "      - rolling_window",
                             "      - filter: \"this.seq > 0\"\n      - rolling_window"),
                     true);
  EXPECT_TRUE(p.plan.drops_state);
  int dropped = 0;
  for (const auto& c : p.plan.json["components"]) {
    if (c["component"] == "pipeline p transforms[1] (rolling_window)") {
      EXPECT_EQ(c["state"], "dropped");
      EXPECT_NE(c["why"].get<std::string>().find("moved to transforms[2]"), std::string::npos)
          << c.dump();
      ++dropped;
    }
  }
  EXPECT_EQ(dropped, 1);
  EXPECT_EQ(p.State("pipeline p transforms[1] (filter)"), "new");
  EXPECT_EQ(p.State("pipeline p transforms[2] (rolling_window)"), "new");
}

TEST(PlanTest, APipelineLeftOutResetsItsPositionAndAWindowLeftOutIsALoss) {
  const std::string before = kBefore;
  Planned p = PlanOf(before.substr(0, before.find("  q:")), false);
  // An input's position is not computed state: reported, not a loss.
  EXPECT_FALSE(p.plan.drops_state) << p.plan.json.dump(2);
  EXPECT_EQ(p.plan.json["reset_components"], 1);
  const Json* q = p.Find("pipeline q input (dummy)");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ((*q)["state"], "dropped");
  EXPECT_EQ((*q)["kind"], "position");
  EXPECT_TRUE((*q)["loses_state"].get<bool>());
  EXPECT_NE((*q)["why"].get<std::string>().find("pipeline q is not in the new graph"),
            std::string::npos);

  Planned w = PlanOf(Replace(kBefore, "      - rolling_window: {key: key, window_secs: 60, field: seq}\n", ""),
                     false);
  EXPECT_TRUE(w.plan.drops_state);
  EXPECT_EQ(w.plan.json["losing_components"], 1) << w.plan.json.dump(2);
  EXPECT_EQ(w.plan.json["lost_bytes"], 100);
}

TEST(PlanTest, WithoutCheckpointsNothingCountsAsDropped) {
  const GraphSpec before = Load(kBefore);
  const GraphSpec after = Load(Replace(kBefore, "window_secs: 60", "window_secs: 30"));
  PlanInput in;
  in.before = &before;
  in.after = &after;
  in.live = true;
  const Plan plan = MakePlan(in);
  EXPECT_FALSE(plan.drops_state);
  EXPECT_FALSE(plan.json["state_dir"].get<bool>());
  const std::string text = PlanText(plan.json);
  EXPECT_NE(text.find("no state directory"), std::string::npos) << text;
}

TEST(PlanTest, TheTextNamesWhatIsLost) {
  Planned p = PlanOf(Replace(kBefore, "window_secs: 60", "window_secs: 30"), false);
  const std::string text = PlanText(p.plan.json);
  EXPECT_NE(text.find("STARTS EMPTY"), std::string::npos) << text;
  EXPECT_NE(text.find("identity option 'window_secs' changed; loses 100 B of checkpoint 7"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("this change drops state: 1 component(s) lose 100 B"), std::string::npos)
      << text;
}

}  // namespace
}  // namespace kayak

namespace kayak {
namespace {

TEST(PlanTest, ADeadLetterOutputIsItsOwnUnitAndAnOutputAddedBeforeItMovesNothing) {
  const std::string base = R"(
pipelines:
  p:
    input: {dummy: {rate_per_sec: 100}}
    outputs: [{file: {path: /tmp/plan-a}}]
    dead_letter: {file: {path: /tmp/plan-dead}}
)";
  const GraphSpec before = Load(base);
  std::string more = base;
  more.replace(more.find("outputs: [{file: {path: /tmp/plan-a}}]"),
               std::string("outputs: [{file: {path: /tmp/plan-a}}]").size(),
               "outputs: [{file: {path: /tmp/plan-a}}, {stdout: {}}]");
  const GraphSpec after = Load(more);
  ASSERT_EQ(after.pipelines[0].dead_letter, 2);
  const checkpoint::CommittedUnits committed = CommitAll(before);
  checkpoint::CommittedUnits with_dead = committed;
  with_dead["p.p.dead"] = {Seal(before.pipelines[0].outputs[1].fingerprint), "p", 7, 0, 30};
  PlanInput in;
  in.before = &before;
  in.after = &after;
  in.committed = &with_dead;
  in.seal = Seal;
  const Plan plan = MakePlan(in);
  EXPECT_FALSE(plan.drops_state) << plan.json.dump(2);
  bool seen = false;
  for (const auto& c : plan.json["components"]) {
    if (c["unit"] == "p.p.dead") {
      seen = true;
      EXPECT_EQ(c["component"], "pipeline p dead_letter (file)");
      EXPECT_EQ(c["state"], "kept");
      EXPECT_EQ(c["kind"], "output");
    }
  }
  EXPECT_TRUE(seen);
}

}  // namespace
}  // namespace kayak
