#include "engine/region_manager.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "checkpoint/state_layout.h"
#include "common/log.h"

namespace kayak {

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

RegionManager::RegionManager(const ComponentRegistry* registry, EngineOptions engine,
                             std::set<std::string> discard_state)
    : registry_(registry), engine_(std::move(engine)), discard_state_(std::move(discard_state)) {}

std::shared_ptr<const RunningGraph> RegionManager::view() const {
  MutexLock lock(view_mu_);
  return view_;
}

Status RegionManager::Open() {
  if (!engine_.checkpointing || store_) return Status::Ok();
  auto store = std::make_unique<checkpoint::Store>(engine_.state_dir);
  uint64_t max_id = 0;
  recover_started_ms_ = MonotonicMs();
  KAYAK_RETURN_IF_ERROR(store->Recover(&restored_, &max_id, discard_state_));
  store_ = std::move(store);
  return Status::Ok();
}

void RegionManager::PublishEngines(bool changing) {
  std::vector<std::shared_ptr<Engine>> engines;
  for (const auto& part : parts_) engines.push_back(part.engine);
  std::vector<std::string> order;
  for (const auto& p : spec_.pipelines) order.push_back(p.id);
  auto view = std::make_shared<const RunningGraph>(std::move(engines), order, changing,
                                                   engine_.checkpointing, engine_.clock,
                                                   engine_.checkpoint_interval_ms);
  MutexLock lock(view_mu_);
  view_ = std::move(view);
}

std::vector<Checkpointer::Missed> RegionManager::StopParts(
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

Status RegionManager::Rebuild(const std::string& text, bool start,
                              const std::function<Status()>& before_build,
                              std::vector<Checkpointer::Missed>* missed,
                              const std::string& restart) {
  GraphSpec spec;
  ErrorList el;
  if (!LoadGraphText(text, "graph", *registry_, &spec, &el)) {
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
  if (before_build) KAYAK_RETURN_IF_ERROR(before_build());
  EngineOptions o = engine_;
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
    auto engine = Engine::Build(regions[r].spec, *registry_, o, &el, &fatal);
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
  if (start) Start();
  PublishEngines(/*changing=*/false);
  if (!to_build.empty()) {
    KLOG_INFO("graph: {} of {} regions built, {} kept running", to_build.size(), parts_.size(),
              parts_.size() - to_build.size());
  }
  return Status::Ok();
}

void RegionManager::Start() {
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
  const int64_t deadline = engine_.clock->NowMs() + 5000;
  for (const auto& part : parts_) {
    for (const auto& p : part.engine->pipelines()) {
      while (p->status() == PipelineStatus::kStarting && engine_.clock->NowMs() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
  }
}

std::vector<Checkpointer::Missed> RegionManager::Stop() {
  std::vector<std::shared_ptr<Engine>> engines;
  for (const auto& part : parts_) engines.push_back(part.engine);
  return StopParts(engines);
}

void RegionManager::DropDeleted(const std::string& id, const std::string& private_dir) {
  if (!engine_.checkpointing || !store_) return;
  // Its state goes: the checkpoints of a region that no longer exists (every
  // live region committed at the new engine's start, restored state
  // included), and its input's private files.
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
  if (!private_dir.empty()) {
    std::filesystem::remove_all(private_dir, ec);
    if (ec) KLOG_ERROR("pipeline {} deleted, but not its input's files: {}", id, ec.message());
  }
  std::filesystem::remove(layout::CrashFile(engine_.state_dir, id), ec);
}

}  // namespace kayak
