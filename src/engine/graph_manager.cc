#include "engine/graph_manager.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>

#include "checkpoint/state_layout.h"
#include "common/json_util.h"
#include "common/log.h"

namespace kayak {

namespace {

using Json = nlohmann::ordered_json;

// Regions that did not reach the savepoint before a change, in its answer:
// the change runs, and they replay from their last committed checkpoint.
void AddMissed(const std::vector<Checkpointer::Missed>& missed, Json* body) {
  if (missed.empty()) return;
  Json list = Json::array();
  for (const auto& m : missed) {
    list.push_back(Json{{"region", m.region}, {"why", m.why},
                        {"replays_from_checkpoint", m.last_committed_id}});
  }
  (*body)["savepoint_missed"] = std::move(list);
}

// In a cluster, a region whose exactly-once outputs were fenced restarts
// through `graph`'s change thread, as POST .../restart would.
EngineOptions WithFencedRestarts(EngineOptions e, GraphManager* graph) {
  if (e.cluster) {
    e.cluster->on_fenced = [graph](const std::string& region) {
      const bool queued = graph->Submit(
          [graph, region] { return graph->Restart(region); },
          [region](const GraphManager::Answer& a) {
            if (a.outcome == GraphManager::Outcome::kOk) {
              KLOG_INFO("cluster: region {} restarted", region);
            } else {
              KLOG_ERROR("cluster: region {} did not restart: {}", region, a.body.dump());
            }
          });
      if (!queued) KLOG_WARN("cluster: region {} cannot restart now (stopping, or busy)", region);
    };
  }
  return e;
}

}  // namespace

GraphManager::GraphManager(Options options)
    : opt_(std::move(options)),
      history_(opt_.registry, opt_.engine.checkpointing, opt_.engine.clock,
               opt_.engine.state_dir),
      regions_(opt_.registry, WithFencedRestarts(opt_.engine, this), opt_.discard_state) {
  change_thread_ = std::thread([this] { ChangeLoop(); });
}

GraphManager::~GraphManager() { Stop(); }

bool GraphManager::Submit(std::function<Answer()> change, std::function<void(Answer)> done) {
  {
    MutexLock lock(changes_mu_);
    if (changes_closed_ || changes_.size() >= kMaxQueuedChanges) return false;
    changes_.push_back(Change{std::move(change), std::move(done)});
  }
  changes_cv_.notify_one();
  return true;
}

void GraphManager::ChangeLoop() {
  for (;;) {
    Change c;
    {
      MutexLock lock(changes_mu_);
      while (!changes_closed_ && changes_.empty()) lock.Wait(changes_cv_);
      if (changes_.empty()) return;  // closed and drained
      c = std::move(changes_.front());
      changes_.pop_front();
    }
    Answer a;
    try {
      a = c.run();
    } catch (const std::exception& e) {
      KLOG_ERROR("graph: a change failed: {}", e.what());
      a = {Outcome::kFailed, Json{{"error", std::string("the change failed: ") + e.what()}}};
    }
    try {
      c.done(std::move(a));
    } catch (const std::exception& e) {
      KLOG_ERROR("graph: a change's answer could not be sent: {}", e.what());
    }
  }
}

int GraphManager::CurrentVersion(const std::string& id) const {
  return history_.CurrentVersion(id);
}

GraphManager::Answer GraphManager::Versions(const std::string& id) const {
  auto versions = history_.Versions(id);
  if (!versions) return {Outcome::kNotFound, Json{{"error", "no pipeline '" + id + "'"}}};
  return {Outcome::kOk, std::move(*versions)};
}

Status GraphManager::Run(bool persist, std::vector<Checkpointer::Missed>* missed,
                         const std::string& restart) {
  std::function<Status()> store;
  if (persist) store = [this] { return history_.Persist(); };
  return regions_.Rebuild(history_.Current().text, started_, store, missed, restart);
}

Status GraphManager::Init(const std::string& file_text, const std::string& file_name,
                          ErrorList* errors) {
  MutexLock lock(mu_);
  {
    GraphSpec spec;
    const bool loaded = LoadGraphText(file_text, file_name, *opt_.registry, &spec, errors);
    ValidateComponents(spec, errors, opt_.engine.checkpointing,
                       opt_.engine.cluster ? &*opt_.engine.cluster : nullptr);
    if (!loaded || !errors->empty()) return Status::Invalid("the config file has errors");
  }
  bool stored = false;
  // The store first: its key opens what the graph file keeps sealed.
  KAYAK_RETURN_IF_ERROR(regions_.Open());
  history_.SetStore(regions_.store());
  if (opt_.engine.checkpointing) KAYAK_RETURN_IF_ERROR(history_.Load(&stored));
  history_.Seed(file_text);
  GraphSpec spec;
  Json errs;
  if (!history_.Validate(history_.Current(), &spec, &errs)) {
    return Status::Invalid("the stored graph (" + layout::GraphFile(opt_.engine.state_dir) +
                           ") with the config file is not valid: " + DumpJson(errs));
  }
  KAYAK_RETURN_IF_ERROR(Run(/*persist=*/false));
  history_.Publish();
  built_ = true;
  if (stored) KLOG_INFO("graph: versions loaded from {}", layout::GraphFile(opt_.engine.state_dir));
  return history_.Persist();
}

void GraphManager::Start() {
  {
    MutexLock lock(mu_);
    started_ = true;
    regions_.Start();
  }
  started_cv_.notify_all();
}

bool GraphManager::Stop() {
  {
    MutexLock lock(mu_);
    if (stopped_) return true;
    stopped_ = true;
  }
  started_cv_.notify_all();  // a change waiting for the start gets 503
  // The change running ends (its stop is bounded by the stop timeout); the
  // ones queued behind it are answered 503.
  {
    MutexLock lock(changes_mu_);
    changes_closed_ = true;
  }
  changes_cv_.notify_all();
  if (change_thread_.joinable()) change_thread_.join();
  MutexLock lock(mu_);
  return regions_.Stop().empty();
}

// A change that comes between the listener's start and the graph's waits for
// the graph, so that its answer means the new graph runs.
bool GraphManager::WaitStarted(MutexLock& lock) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!started_ && !stopped_) {
    if (!lock.WaitUntil(started_cv_, deadline)) break;
  }
  return started_ && !stopped_;
}

namespace {

// A graph that is not valid, as an answer: the first error, located, and all.
GraphManager::Answer InvalidGraph(Json errors) {
  std::string first = errors.empty() ? "invalid" : errors[0]["message"].get<std::string>();
  if (!errors.empty() && errors[0]["line"].get<int>() > 0) {
    first = "line " + std::to_string(errors[0]["line"].get<int>()) + ", column " +
            std::to_string(errors[0]["column"].get<int>()) + ": " + first;
  }
  return {GraphManager::Outcome::kInvalid, Json{{"error", first}, {"errors", std::move(errors)}}};
}

}  // namespace

std::optional<GraphManager::Answer> GraphManager::PlanOf(const GraphHistory::Composed& c,
                                                         Plan* plan) {
  GraphSpec after;
  Json errors;
  if (!history_.Validate(c, &after, &errors)) return InvalidGraph(std::move(errors));
  checkpoint::CommittedUnits committed;
  PlanInput in;
  in.before = &regions_.spec();
  in.after = &after;
  in.live = true;
  if (const checkpoint::Store* store = regions_.store()) {
    committed = store->Committed();
    in.committed = &committed;
    in.seal = [store](std::string_view fp) { return store->Seal(fp); };
  }
  *plan = MakePlan(in);
  return std::nullopt;
}

GraphManager::Answer GraphManager::Apply(Entries buckets, Entries pipelines,
                                         const std::string& kind, const std::string& name,
                                         Outcome ok_status) {
  const GraphHistory::Composed c = history_.Compose(buckets, pipelines, kind, name);
  GraphSpec check;
  Json errors;
  if (!history_.Validate(c, &check, &errors)) return InvalidGraph(std::move(errors));
  const std::string old_text = history_.Current().text;
  history_.Swap(&buckets, &pipelines);
  history_.Publish();
  std::vector<Checkpointer::Missed> missed;
  // A change is made whole or not at all: whatever stops the new graph (an
  // error or an exception) puts the one before back.
  Status st;
  try {
    st = Run(/*persist=*/true, &missed);
  } catch (const std::exception& e) {
    st = Status::Internal(e.what());
  }
  if (!st.ok()) {
    KLOG_ERROR("graph: the new graph did not start ({}); going back to the one before",
               st.message());
    history_.Swap(&buckets, &pipelines);
    history_.Publish();
    if (Status back = regions_.Rebuild(old_text, started_); !back.ok()) {
      KLOG_ERROR("graph: the graph before did not start again: {}", back.message());
    }
    // The graph file may already hold the new graph: it goes back too.
    if (Status p = history_.Persist(); !p.ok()) {
      KLOG_ERROR("graph: the graph file could not be put back ({}); a restart may start the "
                 "change that failed", p.message());
    }
    return {Outcome::kFailed, Json{{"error", "the new graph did not start: " + st.message()}}};
  }
  const Entries& es = kind == "bucket" ? history_.buckets() : history_.pipelines();
  auto it = es.find(name);
  Json body{{kind == "bucket" ? "bucket" : "id", name}};
  if (it != es.end() && !it->second.versions.empty()) {
    body["version"] = it->second.versions.back().number;
    body["change"] = it->second.versions.back().change;
  }
  AddMissed(missed, &body);
  return {ok_status, std::move(body)};
}

GraphManager::Answer GraphManager::Put(const std::string& kind, const std::string& name,
                                       const std::string& body, PutOptions options) {
  MutexLock lock(mu_);
  if (!WaitStarted(lock)) return {Outcome::kUnavailable, Json{{"error", "the server is stopping"}}};
  if (!IsValidId(name)) {
    return {Outcome::kInvalid, Json{{"error", "'" + name + "' is not a valid " + kind +
                                    " name: 1 to 64 of a-z, 0-9, _ and -"}}};
  }
  std::string text = body;
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  if (text.empty()) {
    return {Outcome::kInvalid, Json{{"error", "the body is empty; send the " + kind + " as YAML or JSON"}}};
  }
  text.push_back('\n');
  try {
    (void)YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return {Outcome::kInvalid, Json{{"error", "line " + std::to_string(e.mark.line + 1) + ", column " +
                                    std::to_string(e.mark.column + 1) + ": " + e.msg},
                      {"errors", Json::array({Json{{"line", e.mark.line + 1},
                                                   {"column", e.mark.column + 1},
                                                   {"message", e.msg}}})}}};
  }
  Entries buckets = history_.buckets(), pipelines = history_.pipelines();
  Entries& es = kind == "bucket" ? buckets : pipelines;
  Entry& e = es[name];
  const bool created = !e.live();
  const bool unchanged = !created && e.versions.back().body == text;
  if (options.dry_run || (!unchanged && opt_.engine.checkpointing && !options.accept_state_loss)) {
    Entries b = buckets, p = pipelines;
    Entry& te = (kind == "bucket" ? b : p)[name];
    if (!unchanged) {
      te.versions.push_back(Version{te.versions.empty() ? 1 : te.versions.back().number + 1,
                                    history_.NowMs(), created ? "created" : "updated", text});
    }
    Plan plan;
    if (auto no = PlanOf(history_.Compose(b, p, kind, name), &plan)) return *no;
    const char* what = kind == "bucket" ? "bucket" : "id";
    if (options.dry_run) {
      return {Outcome::kOk, Json{{what, name},
                                 {"dry_run", true},
                                 {"change", unchanged ? "unchanged" : created ? "created" : "updated"},
                                 {"plan", std::move(plan.json)}}};
    }
    if (plan.drops_state) {
      std::string which;
      for (const auto& c : plan.json["components"]) {
        if (!c["loses_state"].get<bool>() || c["kind"] != "state") continue;
        which += (which.empty() ? "" : "; ") + c["component"].get<std::string>() + ": " +
                 c["why"].get<std::string>();
      }
      return {Outcome::kConflict,
              Json{{what, name},
                   {"error", "this change drops committed state (" + which +
                                 "); send it again with ?accept_state_loss=1 to make it"},
                   {"plan", std::move(plan.json)}}};
    }
  }
  if (unchanged) {
    return {Outcome::kOk, Json{{kind == "bucket" ? "bucket" : "id", name},
                      {"version", e.versions.back().number},
                      {"change", "unchanged"}}};
  }
  const int n = e.versions.empty() ? 1 : e.versions.back().number + 1;
  e.versions.push_back(Version{n, history_.NowMs(), created ? "created" : "updated", text});
  e.from_api = true;
  if (kind == "pipeline") history_.Order(name);
  return Apply(std::move(buckets), std::move(pipelines), kind, name, created ? Outcome::kCreated : Outcome::kOk);
}

std::optional<GraphManager::Answer> GraphManager::FindLive(MutexLock& lock,
                                                          const std::string& id,
                                                          Entries::const_iterator* it) {
  if (!WaitStarted(lock)) return Answer{Outcome::kUnavailable, Json{{"error", "the server is stopping"}}};
  *it = history_.pipelines().find(id);
  if (*it == history_.pipelines().end() || !(*it)->second.live()) {
    return Answer{Outcome::kNotFound, Json{{"error", "no pipeline '" + id + "'"}}};
  }
  return std::nullopt;
}

GraphManager::Answer GraphManager::Delete(const std::string& id) {
  MutexLock lock(mu_);
  Entries::const_iterator it;
  if (auto no = FindLive(lock, id, &it)) return *no;
  std::vector<std::string> fed;
  std::string private_dir;  // the deleted pipeline's input's private directory, if it had one
  for (const auto& p : regions_.spec().pipelines) {
    if (std::find(p.upstreams.begin(), p.upstreams.end(), id) != p.upstreams.end()) {
      fed.push_back(p.id);
    }
    if (p.id == id && p.input.def != nullptr && p.input.def->private_dir &&
        opt_.engine.checkpointing) {
      private_dir = layout::PrivateDir(opt_.engine.state_dir, p.input.def->type, id);
    }
  }
  if (!fed.empty()) {
    std::string list;
    for (const auto& f : fed) list += (list.empty() ? "" : ", ") + f;
    return {Outcome::kConflict, Json{{"error", "pipeline '" + id + "' feeds " + list +
                                    "; delete or change those first"},
                      {"downstreams", fed}}};
  }
  Entries pipelines = history_.pipelines();
  Entry& e = pipelines[id];
  e.versions.push_back(Version{e.versions.back().number + 1, history_.NowMs(), "deleted", ""});
  e.from_api = true;
  Answer a = Apply(history_.buckets(), std::move(pipelines), "pipeline", id, Outcome::kOk);
  if (a.outcome == Outcome::kOk) regions_.DropDeleted(id, private_dir);
  return a;
}

GraphManager::Answer GraphManager::Revert(const std::string& id) {
  MutexLock lock(mu_);
  if (!WaitStarted(lock)) return {Outcome::kUnavailable, Json{{"error", "the server is stopping"}}};
  auto it = history_.pipelines().find(id);
  if (it == history_.pipelines().end()) return {Outcome::kNotFound, Json{{"error", "no pipeline '" + id + "'"}}};
  const auto& vs = it->second.versions;
  if (vs.size() < 2 || vs[vs.size() - 2].change == "deleted") {
    return {Outcome::kConflict, Json{{"error", "pipeline '" + id + "' has no previous version to go back to"}}};
  }
  Entries pipelines = history_.pipelines();
  Entry& e = pipelines[id];
  const Version& prev = e.versions[e.versions.size() - 2];
  e.versions.push_back(Version{e.versions.back().number + 1, history_.NowMs(),
                               "reverted to version " + std::to_string(prev.number), prev.body});
  e.from_api = true;
  return Apply(history_.buckets(), std::move(pipelines), "pipeline", id, Outcome::kOk);
}

GraphManager::Answer GraphManager::Restart(const std::string& id) {
  MutexLock lock(mu_);
  Entries::const_iterator it;
  int version = 0;  // a part a repartition step cut from its pipeline has none of its own
  if (auto no = FindLive(lock, id, &it)) {
    const auto& running = regions_.spec().pipelines;
    if (no->outcome != Outcome::kNotFound ||
        std::none_of(running.begin(), running.end(),
                     [&](const PipelineSpec& p) { return p.id == id; })) {
      return *no;
    }
  } else {
    version = it->second.versions.back().number;
  }
  std::vector<Checkpointer::Missed> missed;
  if (Status st = Run(/*persist=*/false, &missed, id); !st.ok()) {
    return {Outcome::kFailed, Json{{"error", "the graph did not build again: " + st.message()}}};
  }
  Json body{{"id", id}, {"version", version}, {"change", "restarted"}};
  AddMissed(missed, &body);
  return {Outcome::kOk, std::move(body)};
}

}  // namespace kayak
