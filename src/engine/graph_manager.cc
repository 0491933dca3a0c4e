#include "engine/graph_manager.h"
#include "engine/state_layout.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <filesystem>
#include <set>
#include <sstream>

#include "common/format.h"
#include "common/io.h"
#include "common/json_util.h"
#include "common/log.h"

namespace kayak {

namespace {

using Json = nlohmann::ordered_json;

// docs/state_format.md, "the graph file".
constexpr int kGraphFormat = 1;

std::string Emit(const YAML::Node& node) {
  YAML::Emitter e;
  e << node;
  std::string s = e.c_str();
  if (s.empty() || s.back() != '\n') s.push_back('\n');
  return s;
}

void AppendIndented(std::string* out, const std::string& body, int* lines) {
  std::istringstream in(body);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out->append("    ").append(line).push_back('\n');
    ++n;
  }
  if (n == 0) {  // an empty body: the key's value is null
    out->append("    ~\n");
    n = 1;
  }
  *lines = n;
}

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

int CountLines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

GraphManager::GraphManager(Options options)
    : opt_(std::move(options)) {
  change_thread_ = std::thread([this] { ChangeLoop(); });
}

GraphManager::~GraphManager() { Stop(); }

int64_t GraphManager::NowMs() const { return opt_.engine.clock->NowMs(); }

std::shared_ptr<const RunningGraph> GraphManager::view() const {
  std::lock_guard lock(view_mu_);
  return view_;
}

void GraphManager::Publish() {
  std::lock_guard lock(view_mu_);
  view_pipelines_ = pipelines_;
}

bool GraphManager::Submit(std::function<Answer()> change, std::function<void(Answer)> done) {
  {
    std::lock_guard lock(changes_mu_);
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
      std::unique_lock lock(changes_mu_);
      changes_cv_.wait(lock, [&] { return changes_closed_ || !changes_.empty(); });
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
  std::lock_guard lock(view_mu_);
  auto it = view_pipelines_.find(id);
  if (it == view_pipelines_.end() || !it->second.live()) return 0;
  return it->second.versions.back().number;
}

GraphManager::Composed GraphManager::Compose(const Entries& buckets, const Entries& pipelines,
                                             const std::string& kind,
                                             const std::string& name) const {
  Composed c;
  auto section = [&](const char* title, const Entries& entries, const std::string& k,
                     const std::vector<std::string>& order) {
    std::vector<std::string> names;
    for (const auto& n : order) {
      auto it = entries.find(n);
      if (it != entries.end() && it->second.live() && !(k == kind && n == name)) {
        names.push_back(n);
      }
    }
    const bool tested = k == kind && entries.count(name) && entries.at(name).live();
    if (names.empty() && !tested) return false;
    c.text.append(title).append(":\n");
    for (const auto& n : names) {
      c.text.append("  ").append(n).append(":\n");
      int lines = 0;
      AppendIndented(&c.text, entries.at(n).versions.back().body, &lines);
    }
    if (tested) {  // the body under test goes last, so its lines are easy to find
      c.text.append("  ").append(name).append(":\n");
      c.body_first_line = CountLines(c.text) + 1;
      AppendIndented(&c.text, entries.at(name).versions.back().body, &c.body_lines);
    }
    return true;
  };
  std::vector<std::string> bucket_order;
  for (const auto& [n, e] : buckets) bucket_order.push_back(n);
  section("buckets", buckets, "bucket", bucket_order);
  if (!section("pipelines", pipelines, "pipeline", order_)) c.text.append("pipelines: {}\n");
  return c;
}

bool GraphManager::Validate(const Composed& c, GraphSpec* spec, Json* errors) const {
  ErrorList el;
  const bool loaded = LoadGraphText(c.text, "body", *opt_.registry, spec, &el);
  ValidateComponents(*spec, &el, opt_.engine.checkpointing);
  if (loaded && el.empty()) return true;
  *errors = Json::array();
  for (const auto& e : el.errors()) {
    int line = e.mark.line, column = e.mark.column;
    if (c.body_first_line > 0 && line >= c.body_first_line &&
        line < c.body_first_line + c.body_lines) {
      line = line - c.body_first_line + 1;
      column = std::max(1, column - 4);
    } else {
      line = column = 0;  // about the graph around the body (a cycle, a missing upstream)
    }
    errors->push_back(Json{{"line", line}, {"column", column}, {"message", e.message}});
  }
  return false;
}

namespace {

// Every fingerprint of `spec` as the store keeps it: keyed hashes, so no
// option value reaches a manifest.
void SealFingerprints(const checkpoint::Store& store, GraphSpec* spec) {
  for (auto& b : spec->buckets) b.fingerprint = store.Seal(b.fingerprint);
  for (auto& p : spec->pipelines) {
    p.input.fingerprint = store.Seal(p.input.fingerprint);
    for (auto& t : p.transforms) t.fingerprint = store.Seal(t.fingerprint);
    for (auto& o : p.outputs) o.fingerprint = store.Seal(o.fingerprint);
  }
}

}  // namespace

Status GraphManager::OpenStore() {
  if (!opt_.engine.checkpointing || store_) return Status::Ok();
  auto store = std::make_unique<checkpoint::Store>(opt_.engine.state_dir);
  uint64_t max_id = 0;
  recover_started_ms_ = MonotonicMs();
  KAYAK_RETURN_IF_ERROR(store->Recover(&restored_, &max_id, opt_.discard_state));
  store_ = std::move(store);
  return Status::Ok();
}

void GraphManager::PublishEngines(bool changing) {
  std::vector<std::shared_ptr<Engine>> engines;
  for (const auto& part : parts_) engines.push_back(part.engine);
  std::vector<std::string> order;
  for (const auto& p : spec_.pipelines) order.push_back(p.id);
  auto view = std::make_shared<const RunningGraph>(std::move(engines), order, changing,
                                                   opt_.engine.checkpointing, opt_.engine.clock,
                                                   opt_.engine.checkpoint_interval_ms);
  std::lock_guard lock(view_mu_);
  view_ = std::move(view);
}

std::vector<Checkpointer::Missed> GraphManager::StopParts(
    const std::vector<std::shared_ptr<Engine>>& engines) {
  // In parallel: each waits at most the stop timeout for its savepoint, so
  // the whole stop does too, however many regions are stuck.
  std::vector<std::vector<Checkpointer::Missed>> each(engines.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < engines.size(); ++i) {
    threads.emplace_back([&, i] { each[i] = engines[i]->Stop(); });
  }
  for (auto& t : threads) t.join();
  std::vector<Checkpointer::Missed> missed;
  for (auto& m : each) missed.insert(missed.end(), m.begin(), m.end());
  return missed;
}

Status GraphManager::Rebuild(const std::string& text, bool start, bool persist,
                             std::vector<Checkpointer::Missed>* missed,
                             const std::string& restart) {
  GraphSpec spec;
  ErrorList el;
  if (!LoadGraphText(text, "graph", *opt_.registry, &spec, &el)) {
    return Status::Invalid(el.ToString());
  }
  if (store_) SealFingerprints(*store_, &spec);
  std::vector<RegionSpec> regions = SplitIntoRegions(spec);
  // A region whose pipelines and buckets are all unchanged keeps running;
  // every other one stops at a savepoint and is built again from it.
  std::map<std::string, size_t> old_by_key;
  for (size_t i = 0; i < parts_.size(); ++i) old_by_key[parts_[i].key] = i;
  std::vector<bool> kept(parts_.size(), false);
  std::vector<Part> next(regions.size());
  std::vector<size_t> to_build;
  for (size_t r = 0; r < regions.size(); ++r) {
    const bool restarting =
        !restart.empty() && std::any_of(regions[r].spec.pipelines.begin(),
                                        regions[r].spec.pipelines.end(),
                                        [&](const PipelineSpec& p) { return p.id == restart; });
    auto it = old_by_key.find(regions[r].key);
    if (it != old_by_key.end() && !restarting && !kept[it->second]) {
      kept[it->second] = true;
      next[r] = parts_[it->second];
    } else {
      to_build.push_back(r);
    }
  }
  std::vector<std::shared_ptr<Engine>> stopping;
  std::vector<Part> staying;
  for (size_t i = 0; i < parts_.size(); ++i) {
    if (kept[i]) {
      staying.push_back(parts_[i]);
    } else {
      stopping.push_back(parts_[i].engine);
    }
  }
  if (!stopping.empty()) {
    PublishEngines(/*changing=*/true);  // readers see the regions stopping
    // A savepoint: the new engines restore exactly where these stopped (or,
    // for a region that missed it, from its last committed checkpoint).
    auto m = StopParts(stopping);
    if (missed != nullptr) *missed = std::move(m);
    // Gone before the new ones are built (their http inputs give their paths
    // up in their destructors); a reader holds a view only while it answers.
    std::vector<std::weak_ptr<Engine>> old(stopping.begin(), stopping.end());
    stopping.clear();
    parts_ = staying;
    PublishEngines(/*changing=*/true);
    for (const auto& w : old) {
      while (!w.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  // The new graph is stored before its engines commit a checkpoint taken
  // with it: after a crash at any point the graph that is restored is the
  // one its newest checkpoint was taken with (or the change not yet made).
  if (persist) KAYAK_RETURN_IF_ERROR(Persist());
  EngineOptions o = opt_.engine;
  o.ingest = &router_;
  std::map<std::string, checkpoint::RestoredUnit> restored;
  bool first = false;  // the build that restores what Recover read
  if (o.checkpointing && !to_build.empty()) {
    if (!restored_read_) {
      restored = std::move(restored_);
      restored_read_ = first = true;
    } else {
      // What the stopped regions committed (and what regions no longer
      // running left), read again; running regions' units are not needed.
      std::set<std::string> running;
      for (const auto& part : staying) running.insert(part.name);
      KAYAK_RETURN_IF_ERROR(store_->ReadLatest(running, &restored));
    }
    o.store = store_.get();
    o.restored = &restored;
  }
  for (size_t r : to_build) {
    Status fatal;
    auto engine = Engine::Build(regions[r].spec, *opt_.registry, o, &el, &fatal);
    if (!fatal.ok()) return fatal;
    if (engine == nullptr) return Status::Invalid(el.ToString());
    next[r] = Part{regions[r].name, regions[r].key, std::move(engine), false};
  }
  if (first && !restored.empty()) {
    size_t bytes = 0;
    for (const auto& [unit, u] : restored) bytes += u.data.size();
    KLOG_INFO("state restored in {} ms ({} units, {} bytes)",
              MonotonicMs() - recover_started_ms_, restored.size(), bytes);
  }
  parts_ = std::move(next);
  spec_ = std::move(spec);
  if (start) StartParts();
  PublishEngines(/*changing=*/false);
  if (!to_build.empty()) {
    KLOG_INFO("graph: {} of {} regions built, {} kept running", to_build.size(), parts_.size(),
              parts_.size() - to_build.size());
  }
  return Status::Ok();
}

void GraphManager::StartParts() {
  for (auto& part : parts_) {
    // Thousands of regions take a while to start: a stop meanwhile leaves
    // the rest unstarted (nothing of theirs ran, nothing to save).
    if (cancel_start_) return;
    if (part.started) continue;
    part.engine->Start();
    part.started = true;
  }
  // Returns once the inputs are open (an http input answers 503 before), or
  // after a few seconds: an input that cannot open shows it on its card.
  const int64_t deadline = NowMs() + 5000;
  for (const auto& part : parts_) {
    for (const auto& p : part.engine->pipelines()) {
      while (p->status() == PipelineStatus::kStarting && NowMs() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
  }
}

Status GraphManager::Persist() const {
  if (!opt_.engine.checkpointing) return Status::Ok();
  auto entries = [this](const Entries& es) {
    Json j = Json::object();
    for (const auto& [name, e] : es) {
      Json vs = Json::array();
      for (const auto& v : e.versions) {
        vs.push_back(Json{{"version", v.number}, {"created_ms", v.created_ms},
                          {"change", v.change}, {"body", AtRest(v.body)}});
      }
      j[name] = Json{{"from_api", e.from_api}, {"versions", std::move(vs)}};
    }
    return j;
  };
  Json j{{"format", kGraphFormat},
         {"order", order_},
         {"buckets", entries(buckets_)},
         {"pipelines", entries(pipelines_)}};
  const std::string dir = layout::GraphDir(opt_.engine.state_dir);
  KAYAK_RETURN_IF_ERROR(CreateDirsDurably(dir));
  const std::string bytes = checkpoint::Frame(checkpoint::FileKind::kGraph, DumpJson(j));
  KAYAK_RETURN_IF_ERROR(checkpoint::WriteFileSynced(dir + "/GRAPH.tmp", bytes));
  return checkpoint::RenameSynced(dir + "/GRAPH.tmp", dir + "/GRAPH", dir);
}

Status GraphManager::LoadStored(bool* found) {
  *found = false;
  const std::string path = layout::GraphFile(opt_.engine.state_dir);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Status::Ok();
  auto bytes = checkpoint::ReadWholeFile(path);
  if (!bytes.ok()) return bytes.status();
  auto payload = checkpoint::Unframe(checkpoint::FileKind::kGraph, *bytes);
  const std::string fix = "; move it away to start from the config file alone";
  if (!payload.ok()) return Status::Corruption(path + ": " + payload.status().message() + fix);
  Json j = Json::parse(payload.value(), nullptr, false);
  if (!j.is_object() || j.value("format", 0) != kGraphFormat) {
    return Status::Corruption(path + ": not a graph file of format " +
                              std::to_string(kGraphFormat) + fix);
  }
  try {
    Status opened;
    auto load = [&](const Json& src, Entries* out) {
      for (const auto& [name, e] : src.items()) {
        Entry& entry = (*out)[name];
        entry.from_api = e.at("from_api").get<bool>();
        for (const auto& v : e.at("versions")) {
          entry.versions.push_back(Version{v.at("version").get<int>(),
                                           v.at("created_ms").get<int64_t>(),
                                           v.at("change").get<std::string>(),
                                           v.at("body").get<std::string>()});
          if (Status st = FromRest(&entry.versions.back().body); !st.ok() && opened.ok()) {
            opened = Status::Corruption(name + " version " +
                                        std::to_string(entry.versions.back().number) + ": " +
                                        st.message());
          }
        }
      }
    };
    load(j.at("buckets"), &buckets_);
    load(j.at("pipelines"), &pipelines_);
    if (!opened.ok()) return Status::Corruption(path + ": " + opened.message() + fix);
    order_ = j.at("order").get<std::vector<std::string>>();
  } catch (const std::exception& e) {
    return Status::Corruption(path + ": " + e.what() + fix);
  }
  *found = true;
  return Status::Ok();
}

// The config file decides every pipeline and bucket not changed through the
// API: new or changed ones get a version, ones it no longer names are
// deleted. What the API changed keeps its stored version (with a warning when
// the file says otherwise). docs/lifecycle.md.
void GraphManager::Seed(const std::string& file_text) {
  YAML::Node root = YAML::Load(file_text);  // the file was validated before
  const int64_t now = NowMs();
  auto merge = [&](const YAML::Node& section, Entries* entries, const char* what,
                   std::vector<std::string>* order) {
    std::set<std::string> in_file;
    if (section.IsMap()) {
      for (const auto& kv : section) {
        const std::string name = kv.first.as<std::string>();
        const std::string body = Emit(kv.second);
        in_file.insert(name);
        Entry& e = (*entries)[name];
        if (order && std::find(order->begin(), order->end(), name) == order->end()) {
          order->push_back(name);
        }
        if (e.from_api) {
          if (!e.live() || e.versions.back().body != body) {
            KLOG_WARN("{} {}: the config file differs from version {} made through the API, "
                      "which stays in force (docs/lifecycle.md)",
                      what, name, e.versions.empty() ? 0 : e.versions.back().number);
          }
          continue;
        }
        if (!e.live() || e.versions.back().body != body) {
          const int n = e.versions.empty() ? 1 : e.versions.back().number + 1;
          e.versions.push_back(Version{n, now, "from-file", body});
        }
      }
    }
    for (auto& [name, e] : *entries) {
      if (!e.from_api && e.live() && !in_file.count(name)) {
        KLOG_INFO("{} {}: no longer in the config file, deleted", what, name);
        e.versions.push_back(Version{e.versions.back().number + 1, now, "deleted", ""});
      }
    }
  };
  merge(root["buckets"], &buckets_, "bucket", nullptr);
  merge(root["pipelines"], &pipelines_, "pipeline", &order_);
}

Status GraphManager::Init(const std::string& file_text, const std::string& file_name,
                          ErrorList* errors) {
  std::lock_guard lock(mu_);
  {
    GraphSpec spec;
    const bool loaded = LoadGraphText(file_text, file_name, *opt_.registry, &spec, errors);
    ValidateComponents(spec, errors, opt_.engine.checkpointing);
    if (!loaded || !errors->empty()) return Status::Invalid("the config file has errors");
  }
  bool stored = false;
  // The store first: its key opens what the graph file keeps sealed.
  KAYAK_RETURN_IF_ERROR(OpenStore());
  if (opt_.engine.checkpointing) KAYAK_RETURN_IF_ERROR(LoadStored(&stored));
  Seed(file_text);
  const Composed c = Compose(buckets_, pipelines_, "", "");
  GraphSpec spec;
  Json errs;
  if (!Validate(c, &spec, &errs)) {
    return Status::Invalid("the stored graph (" + layout::GraphFile(opt_.engine.state_dir) +
                           ") with the config file is not valid: " + DumpJson(errs));
  }
  KAYAK_RETURN_IF_ERROR(Rebuild(c.text, /*start=*/false));
  Publish();
  built_ = true;
  if (stored) KLOG_INFO("graph: versions loaded from {}/graph/GRAPH", opt_.engine.state_dir);
  return Persist();
}

void GraphManager::Start() {
  {
    std::lock_guard lock(mu_);
    started_ = true;
    StartParts();
  }
  started_cv_.notify_all();
}

bool GraphManager::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopped_) return true;
    stopped_ = true;
  }
  started_cv_.notify_all();  // a change waiting for the start gets 503
  // The change running ends (its stop is bounded by the stop timeout); the
  // ones queued behind it are answered 503.
  {
    std::lock_guard lock(changes_mu_);
    changes_closed_ = true;
  }
  changes_cv_.notify_all();
  if (change_thread_.joinable()) change_thread_.join();
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<Engine>> engines;
  for (const auto& part : parts_) engines.push_back(part.engine);
  return StopParts(engines).empty();
}

// A change that comes between the listener's start and the graph's waits for
// the graph, so that its answer means the new graph runs.
bool GraphManager::WaitStarted(std::unique_lock<std::mutex>& lock) {
  started_cv_.wait_for(lock, std::chrono::seconds(60), [&] { return started_ || stopped_; });
  return started_ && !stopped_;
}

GraphManager::Answer GraphManager::Apply(Entries buckets, Entries pipelines,
                                         const std::string& kind, const std::string& name,
                                         Outcome ok_status) {
  const Composed c = Compose(buckets, pipelines, kind, name);
  GraphSpec check;
  Json errors;
  if (!Validate(c, &check, &errors)) {
    std::string first = errors.empty() ? "invalid" : errors[0]["message"].get<std::string>();
    if (!errors.empty() && errors[0]["line"].get<int>() > 0) {
      first = "line " + std::to_string(errors[0]["line"].get<int>()) + ", column " +
              std::to_string(errors[0]["column"].get<int>()) + ": " + first;
    }
    return {Outcome::kInvalid, Json{{"error", first}, {"errors", std::move(errors)}}};
  }
  const std::string old_text = Compose(buckets_, pipelines_, "", "").text;
  std::swap(buckets_, buckets);
  std::swap(pipelines_, pipelines);
  Publish();
  std::vector<Checkpointer::Missed> missed;
  // A change is made whole or not at all: whatever stops the new graph (an
  // error or an exception) puts the one before back.
  Status st;
  try {
    st = Rebuild(Compose(buckets_, pipelines_, "", "").text, started_, /*persist=*/true, &missed);
  } catch (const std::exception& e) {
    st = Status::Internal(e.what());
  }
  if (!st.ok()) {
    KLOG_ERROR("graph: the new graph did not start ({}); going back to the one before",
               st.message());
    std::swap(buckets_, buckets);
    std::swap(pipelines_, pipelines);
    Publish();
    if (Status back = Rebuild(old_text, started_); !back.ok()) {
      KLOG_ERROR("graph: the graph before did not start again: {}", back.message());
    }
    // The graph file may already hold the new graph: it goes back too.
    if (Status p = Persist(); !p.ok()) {
      KLOG_ERROR("graph: the graph file could not be put back ({}); a restart may start the "
                 "change that failed", p.message());
    }
    return {Outcome::kFailed, Json{{"error", "the new graph did not start: " + st.message()}}};
  }
  const Entries& es = kind == "bucket" ? buckets_ : pipelines_;
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
                                       const std::string& body) {
  std::unique_lock lock(mu_);
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
  Entries buckets = buckets_, pipelines = pipelines_;
  Entries& es = kind == "bucket" ? buckets : pipelines;
  Entry& e = es[name];
  const bool created = !e.live();
  if (!created && e.versions.back().body == text) {
    return {Outcome::kOk, Json{{kind == "bucket" ? "bucket" : "id", name},
                      {"version", e.versions.back().number},
                      {"change", "unchanged"}}};
  }
  const int n = e.versions.empty() ? 1 : e.versions.back().number + 1;
  e.versions.push_back(Version{n, NowMs(), created ? "created" : "updated", text});
  e.from_api = true;
  if (kind == "pipeline" && std::find(order_.begin(), order_.end(), name) == order_.end()) {
    order_.push_back(name);
  }
  return Apply(std::move(buckets), std::move(pipelines), kind, name, created ? Outcome::kCreated : Outcome::kOk);
}

std::optional<GraphManager::Answer> GraphManager::FindLive(std::unique_lock<std::mutex>& lock,
                                                          const std::string& id,
                                                          Entries::iterator* it) {
  if (!WaitStarted(lock)) return Answer{Outcome::kUnavailable, Json{{"error", "the server is stopping"}}};
  *it = pipelines_.find(id);
  if (*it == pipelines_.end() || !(*it)->second.live()) {
    return Answer{Outcome::kNotFound, Json{{"error", "no pipeline '" + id + "'"}}};
  }
  return std::nullopt;
}

GraphManager::Answer GraphManager::Delete(const std::string& id) {
  std::unique_lock lock(mu_);
  Entries::iterator it;
  if (auto no = FindLive(lock, id, &it)) return *no;
  std::vector<std::string> fed;
  for (const auto& p : spec_.pipelines) {
    if (std::find(p.upstreams.begin(), p.upstreams.end(), id) != p.upstreams.end()) {
      fed.push_back(p.id);
    }
  }
  if (!fed.empty()) {
    std::string list;
    for (const auto& f : fed) list += (list.empty() ? "" : ", ") + f;
    return {Outcome::kConflict, Json{{"error", "pipeline '" + id + "' feeds " + list +
                                    "; delete or change those first"},
                      {"downstreams", fed}}};
  }
  std::string input_dir;  // the deleted pipeline's input's private directory, if it had one
  for (const auto& p : spec_.pipelines) {
    if (p.id == id && p.input.def != nullptr && p.input.def->private_dir) {
      input_dir = layout::PrivateDir(opt_.engine.state_dir, p.input.def->type, id);
    }
  }
  Entries pipelines = pipelines_;
  Entry& e = pipelines[id];
  e.versions.push_back(Version{e.versions.back().number + 1, NowMs(), "deleted", ""});
  e.from_api = true;
  Answer a = Apply(buckets_, std::move(pipelines), "pipeline", id, Outcome::kOk);
  if (a.outcome != Outcome::kOk || !opt_.engine.checkpointing || !store_) return a;
  // Its state goes: the checkpoints of a region that no longer exists (every
  // live region committed at the new engine's start, restored state
  // included), and its http input's logged posts.
  std::set<std::string> live;
  std::string uncommitted;
  for (const auto& part : parts_) {
    if (Checkpointer* cp = part.engine->checkpointer()) {
      for (const auto& r : cp->Regions()) {
        live.insert(r.name);
        if (r.committed == 0) uncommitted = r.name;
      }
    }
  }
  if (!uncommitted.empty()) {
    // Its state may still be only in a checkpoint of a region that is gone.
    KLOG_WARN("pipeline {} deleted; its checkpoints stay until region {} has committed", id,
              uncommitted);
  } else if (Status st = store_->DropRegionsExcept(live); !st.ok()) {
    KLOG_ERROR("pipeline {} deleted, but its checkpoints were not removed: {}", id, st.message());
  }
  std::error_code ec;
  if (!input_dir.empty() && opt_.engine.checkpointing) {
    std::filesystem::remove_all(input_dir, ec);
    if (ec) KLOG_ERROR("pipeline {} deleted, but not its input's files: {}", id, ec.message());
  }
  std::filesystem::remove(layout::CrashFile(opt_.engine.state_dir, id), ec);
  return a;
}

GraphManager::Answer GraphManager::Revert(const std::string& id) {
  std::unique_lock lock(mu_);
  if (!WaitStarted(lock)) return {Outcome::kUnavailable, Json{{"error", "the server is stopping"}}};
  auto it = pipelines_.find(id);
  if (it == pipelines_.end()) return {Outcome::kNotFound, Json{{"error", "no pipeline '" + id + "'"}}};
  const auto& vs = it->second.versions;
  if (vs.size() < 2 || vs[vs.size() - 2].change == "deleted") {
    return {Outcome::kConflict, Json{{"error", "pipeline '" + id + "' has no previous version to go back to"}}};
  }
  Entries pipelines = pipelines_;
  Entry& e = pipelines[id];
  const Version& prev = e.versions[e.versions.size() - 2];
  e.versions.push_back(Version{e.versions.back().number + 1, NowMs(),
                               "reverted to version " + std::to_string(prev.number), prev.body});
  e.from_api = true;
  return Apply(buckets_, std::move(pipelines), "pipeline", id, Outcome::kOk);
}

GraphManager::Answer GraphManager::Restart(const std::string& id) {
  std::unique_lock lock(mu_);
  Entries::iterator it;
  if (auto no = FindLive(lock, id, &it)) return *no;
  std::vector<Checkpointer::Missed> missed;
  if (Status st = Rebuild(Compose(buckets_, pipelines_, "", "").text, started_, false, &missed, id);
      !st.ok()) {
    return {Outcome::kFailed, Json{{"error", "the graph did not build again: " + st.message()}}};
  }
  Json body{{"id", id}, {"version", it->second.versions.back().number}, {"change", "restarted"}};
  AddMissed(missed, &body);
  return {Outcome::kOk, std::move(body)};
}

namespace {

// A secret option's value that names where the secret is, not the secret:
// one ${NAME} (or ${file:...}) reference and nothing around it.
bool IsReference(const YAML::Node& v) {
  if (!v.IsScalar()) return false;
  const std::string& s = v.Scalar();
  return s.size() > 3 && s.rfind("${", 0) == 0 && s.find('}') == s.size() - 1;
}

// Calls `f` with every secret option of the body's components whose value is
// not a reference (a literal secret, or a map of them): the options map and
// the option's name.
template <typename F>
void ForEachLiteralSecret(const ComponentRegistry& registry, YAML::Node root, F&& f) {
  auto component = [&](const char* kind, YAML::Node c) {
    if (!c.IsMap() || c.size() != 1) return;
    auto kv = *c.begin();
    const ComponentDef* def = registry.Find(kind, kv.first.Scalar());
    if (def == nullptr || !kv.second.IsMap()) return;
    for (const auto& p : def->props) {
      YAML::Node v = kv.second[p.name];
      if (!p.secret || !v.IsDefined() || v.IsNull() || IsReference(v)) continue;
      if (v.IsMap()) {
        bool all = true;
        for (const auto& e : v) all = all && IsReference(e.second);
        if (all) continue;
      }
      f(kv.second, p.name);
    }
  };
  component("input", root["input"]);
  for (const char* list : {"transforms", "outputs"}) {
    YAML::Node l = root[list];
    if (!l.IsSequence()) continue;
    for (auto c : l) component(list == std::string("outputs") ? "output" : "transform", c);
  }
}

YAML::Node LoadBody(const std::string& body) {
  try {
    YAML::Node root = YAML::Load(body);
    return root.IsMap() ? root : YAML::Node();
  } catch (const YAML::Exception&) {
    return YAML::Node();
  }
}

constexpr std::string_view kSealedBody = "${sealed:";

}  // namespace

// A pipeline body as the API may show it: the values of secret options
// (PropDef::secret) replaced by "***", unless they are ${ENV} references.
std::string GraphManager::WithoutSecrets(const std::string& body) const {
  YAML::Node root = LoadBody(body);
  if (!root.IsDefined() || root.IsNull()) return body;
  bool masked = false;
  ForEachLiteralSecret(*opt_.registry, root, [&](YAML::Node options, const std::string& name) {
    options[name] = "***";
    masked = true;
  });
  return masked ? Emit(root) : body;
}

// A body as the graph file keeps it: one that holds a literal secret sealed
// whole (Store::SealText), so the file never holds the secret.
std::string GraphManager::AtRest(const std::string& body) const {
  if (store_ == nullptr) return body;
  YAML::Node root = LoadBody(body);
  if (!root.IsDefined() || root.IsNull()) return body;
  bool literal = false;
  ForEachLiteralSecret(*opt_.registry, root,
                       [&](YAML::Node, const std::string&) { literal = true; });
  if (!literal) return body;
  return std::string(kSealedBody) + store_->SealText(body) + "}";
}

Status GraphManager::FromRest(std::string* body) const {
  if (body->rfind(kSealedBody, 0) != 0 || body->back() != '}') return Status::Ok();
  if (store_ == nullptr) return Status::Corruption("a sealed body without the store's key");
  auto opened = store_->OpenText(
      std::string_view(*body).substr(kSealedBody.size(), body->size() - kSealedBody.size() - 1));
  if (!opened.ok()) return opened.status();
  *body = std::move(opened).value();
  return Status::Ok();
}

GraphManager::Answer GraphManager::Versions(const std::string& id) const {
  std::lock_guard lock(view_mu_);
  auto it = view_pipelines_.find(id);
  if (it == view_pipelines_.end()) {
    return {Outcome::kNotFound, Json{{"error", "no pipeline '" + id + "'"}}};
  }
  Json vs = Json::array();
  for (const auto& v : it->second.versions) {
    vs.push_back(Json{{"version", v.number}, {"created_ms", v.created_ms}, {"change", v.change},
                      {"body", WithoutSecrets(v.body)}});
  }
  return {Outcome::kOk, Json{{"id", id},
                    {"current", it->second.live() ? it->second.versions.back().number : 0},
                    {"versions", std::move(vs)}}};
}

}  // namespace kayak
