// `kayak plan NEW.yaml --state-dir DIR [--json] [--force-read]`: what
// starting on DIR with the config file NEW.yaml would do to each
// component's committed state, read offline without changing anything
// (docs/operations.md "Plan a change"). The graph now is the one the
// directory's graph file keeps (the config file and the API's changes as
// the last server ran them); the new one is what a start with NEW.yaml
// makes of it, as the server composes it.
//
// Exit: 0 every piece of committed state is kept; 3 the change drops state
// (the plan says which); 1 the directory cannot be read or the composed
// graph is not valid; 2 usage, or NEW.yaml has errors (as `kayak check`).
#include "cli/plan_cmd.h"

#include <sys/stat.h>

#include <cstdio>
#include <string>

#include "common/format.h"
#include "checkpoint/store.h"
#include "cli/config_file.h"
#include "cli/state_cmd.h"
#include "common/clock.h"
#include "common/json_util.h"
#include "common/log.h"
#include "components.h"
#include "engine/engine.h"
#include "engine/graph_history.h"
#include "engine/plan.h"

namespace kayak {

namespace {

constexpr int kKeeps = 0, kFault = 1, kUsage = 2, kDrops = 3;

int Usage(const std::string& problem) {
  std::fprintf(stderr,
               "kayak plan: %s\nusage: kayak plan NEW.yaml --state-dir DIR [--json] "
               "[--force-read]\n",
               problem.c_str());
  return kUsage;
}

}  // namespace

int PlanCommand(const std::vector<std::string>& args) {
  std::string config, dir;
  bool json = false, force = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--json") {
      json = true;
    } else if (a == "--force-read") {
      force = true;
    } else if (a == "--state-dir" && i + 1 < args.size()) {
      dir = args[++i];
    } else if (a.rfind("--state-dir=", 0) == 0) {
      dir = a.substr(12);
    } else if (a.rfind("-", 0) == 0) {
      return Usage("unknown option '" + a + "'");
    } else if (config.empty()) {
      config = a;
    } else {
      return Usage("unexpected '" + a + "'");
    }
  }
  if (config.empty()) return Usage("give the new config file");
  (void)SetLogLevel("warn");  // to stderr: what composing the graph warns of
  if (dir.empty()) return Usage("give the state directory (--state-dir DIR)");
  const ComponentRegistry& registry = BuiltinComponents();
  if (GraphSpec spec; !LoadConfig(config, &spec)) return kUsage;
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    std::fprintf(stderr, "kayak plan: %s is not a directory\n", dir.c_str());
    return kFault;
  }
  std::string error;
  if (LockShared(dir, force, &error) != 0) {
    std::fprintf(stderr, "kayak plan: %s (a running server plans a change itself: PUT "
                 "/api/v1/pipelines/ID?dry_run=1)\n", error.c_str());
    return kFault;
  }
  auto text = checkpoint::ReadWholeFile(config);
  if (!text.ok()) {
    std::fprintf(stderr, "kayak plan: %s\n", text.status().message().c_str());
    return kFault;
  }
  checkpoint::Store store(dir);
  if (Status s = store.LoadKeyReadOnly(); !s.ok()) {
    std::fprintf(stderr, "kayak plan: %s\n", s.message().c_str());
    return kFault;
  }
  checkpoint::Inventory inv;
  if (Status s = store.Inspect(/*verify=*/false, &inv); !s.ok()) {
    std::fprintf(stderr, "kayak plan: %s\n", s.message().c_str());
    return kFault;
  }
  for (const auto& f : inv.faults) {
    std::fprintf(stderr, "kayak plan: warning: %s (kayak state %s verify)\n", f.c_str(),
                 dir.c_str());
  }
  const checkpoint::CommittedUnits committed = checkpoint::CommittedUnitsOf(inv);

  GraphHistory history(&registry, /*checkpointing=*/true, SystemClock::Get(), dir);
  history.SetStore(&store);
  bool found = false;
  if (Status s = history.Load(&found); !s.ok()) {
    std::fprintf(stderr, "kayak plan: %s\n", s.message().c_str());
    return kFault;
  }
  GraphSpec before, after;
  nlohmann::ordered_json errors;
  if (found && !history.Validate(history.Current(), &before, &errors)) {
    std::fprintf(stderr, "kayak plan: the graph the state directory keeps is not valid: %s\n",
                 DumpJson(errors).c_str());
    return kFault;
  }
  history.Seed(*text);
  if (!history.Validate(history.Current(), &after, &errors)) {
    std::fprintf(stderr,
                 "kayak plan: %s with the pipelines made through the API is not valid: %s\n",
                 config.c_str(), DumpJson(errors).c_str());
    return kFault;
  }
  PlanInput in;
  in.before = found ? &before : nullptr;
  in.after = &after;
  in.committed = &committed;
  in.seal = [&store](std::string_view fp) { return store.Seal(fp); };
  in.live = false;
  const Plan plan = MakePlan(in);
  if (json) {
    std::printf("%s\n", DumpJson(plan.json).c_str());
  } else {
    if (!found) std::printf("(no graph file in %s: judged by the checkpoints alone)\n", dir.c_str());
    std::fputs(PlanText(plan.json).c_str(), stdout);
  }
  return plan.drops_state ? kDrops : kKeeps;
}

}  // namespace kayak
