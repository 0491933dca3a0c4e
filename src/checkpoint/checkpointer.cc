#include "checkpoint/chain_policy.h"
#include "checkpoint/checkpointer.h"
#include "checkpoint/state_layout.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "common/log.h"

namespace kayak {

Checkpointer::Checkpointer(checkpoint::Store* store, int64_t interval_ms, int64_t timeout_ms,
                           const Clock* clock)
    : store_(store), interval_ms_(interval_ms), timeout_ms_(timeout_ms), clock_(clock) {}

Checkpointer::~Checkpointer() { Stop(); }

size_t Checkpointer::AddRegion(Region region) {
  RegionState rs;
  rs.status.name = region.name;
  for (Bucket* b : region.buckets) b->TrackChanges();
  for (auto* p : region.pipelines) rs.status.pipelines.push_back(p->id());
  rs.region = std::move(region);
  auto& reg = metrics::Registry::Global();
  rs.duration = reg.GetHistogram("kayak_checkpoint_duration_seconds",
                                 "Time from a region's barrier to its checkpoint's commit.",
                                 {{"region", rs.status.name}}, metrics::LatencyBounds());
  rs.pause = reg.GetHistogram("kayak_checkpoint_barrier_pause_seconds",
                              "Time a pipeline stopped at a barrier to snapshot its state.",
                              {{"region", rs.status.name}}, metrics::LatencyBounds());
  MutexLock lock(mu_);
  regions_.push_back(std::move(rs));
  return regions_.size() - 1;
}

Status Checkpointer::CommitInitial(std::map<size_t, std::vector<checkpoint::UnitState>> units,
                                   const std::set<size_t>& incomplete) {
  MutexLock lock(mu_);
  Status result;
  for (size_t r = 0; r < regions_.size(); ++r) {
    RegionState& rs = regions_[r];
    auto& list = units[r];
    if (incomplete.count(r)) {  // an output could not start: nothing to commit
      rs.needs_full = true;
      continue;
    }
    std::vector<std::pair<Bucket*, RegionState::Chain>> chains;
    for (Bucket* b : rs.region.buckets) {
      const std::string& fp = rs.region.bucket_fingerprints[b];
      checkpoint::UnitState u{layout::BucketUnit(b->name()), fp, std::nullopt};
      rs.bucket_saved_once[b] = true;
      RegionState::Chain chain;
      auto restored = rs.restored.find(b);
      if (restored != rs.restored.end() &&
          store_->LatestChain(u.unit, fp, &chain.base, &chain.deltas) &&
          chain.base == restored->second.base && chain.deltas == restored->second.deltas) {
        // Restored from the chain the store names: the checkpoint refers to
        // it, and changes count from here.
        b->MarkSaved();
        rs.pending[b].clear();
      } else {
        auto& pending = rs.pending[b];
        pending.clear();
        pending.emplace_back();
        b->TakeChanges(/*all=*/true, &pending.back());
        u.data.emplace();
        if (Status st = Bucket::Compact({}, {}, pending, &*u.data); !st.ok()) return st;
        chain = RegionState::Chain{u.data->size(), 0};
      }
      chains.emplace_back(b, chain);
      list.push_back(std::move(u));
    }
    rs.restored.clear();
    if (Status st = CollectSealed(&list); !st.ok()) return st;
    const uint64_t id = store_->NextId();
    checkpoint::CommitStats stats;
    const int64_t now = clock_->NowMs();
    Status st = store_->Commit(rs.region.name, id, now, list, &stats);
    if (st.ok()) {
      rs.status.last_committed_id = id;
      rs.status.last_committed_ms = now;
      rs.status.bytes_written = stats.bytes_written;
      rs.status.bytes_reused = stats.bytes_reused;
      rs.status.committed++;
      Record(rs, id, "", 0, &stats);
      for (auto& [b, chain] : chains) {
        rs.chains[b] = chain;
        rs.pending[b].clear();
      }
      TellInputs(rs, id, list);
    } else {
      // A bucket written whole keeps its entries pending; one that referred
      // to its restored chain is still that chain in the store.
      for (auto& [b, chain] : chains) {
        rs.chains[b] = rs.pending[b].empty() ? chain : RegionState::Chain{};
      }
      rs.status.abandoned++;
      rs.status.last_error = st.message();
      Record(rs, id, st.message(), 0, nullptr);
      rs.needs_full = true;
      result = st;
    }
  }
  return result;
}

void Checkpointer::BucketRestored(Bucket* bucket, uint64_t base, uint64_t deltas) {
  MutexLock lock(mu_);
  for (auto& rs : regions_) {
    if (rs.region.writers.count(bucket)) rs.restored[bucket] = RegionState::Chain{base, deltas};
  }
}

void Checkpointer::Start() {
  {
    MutexLock lock(mu_);
    const int64_t now = clock_->SteadyMs();
    for (auto& rs : regions_) {
      rs.next_due_mono_ms = now + interval_ms_;
      // Only where the wait shows: an output whose writes are seen at a
      // commit (exactly_once). Elsewhere what is replayed is out already.
      rs.first_after_start = !rs.region.sources.empty() && !rs.region.two_phase.empty();
    }
  }
  acker_.Start();
  thread_ = std::thread([this] { Run(); });
}

void Checkpointer::Stop() {
  halting_.store(true);
  {
    MutexLock lock(mu_);
    // Once only: the engine stops the coordinator before it frees the
    // pipelines and outputs, and the destructor must not touch them again.
    if (stopping_) return;
    stopping_ = true;
    // No decision on an unfinished checkpoint would come any more.
    for (auto& rs : regions_) {
      if (rs.inflight.id != 0) Decide(rs, rs.inflight.id, false);
    }
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  {
    MutexLock lock(mu_);
    NotifyInputs();  // for a savepoint whose outputs committed just now
  }
  // What a savepoint covers is acknowledged before the inputs go.
  acker_.Stop();
}

void Checkpointer::TellInputs(const RegionState& rs, uint64_t id,
                              const std::vector<checkpoint::UnitState>& units) {
  for (auto* p : rs.region.pipelines) {
    std::string position;
    if (!p->CommittedPosition(units, &position)) continue;
    acker_.Post(p, [p, position = std::move(position)] { p->InputCommitted(position); });
  }
  if (rs.region.publish_shards) {
    acker_.Post(&rs.region.publish_shards,
                [publish = rs.region.publish_shards, id] { publish(id); });
  }
}

void Checkpointer::AcknowledgeUncommitted(CheckpointedPipeline* p, std::string position) {
  acker_.Post(p, [p, position = std::move(position)] { p->InputCommitted(position); });
}

void Checkpointer::PublishThenDecide(RegionState& rs, uint64_t id) {
  TryPublishThenDecide(&rs.region.publish_before_commit, rs.region.publish_before_commit,
                       rs.region.two_phase, rs.region.name, id, 0);
}

void Checkpointer::TryPublishThenDecide(const void* key,
                                        std::function<Status(uint64_t)> publish,
                                        std::vector<TwoPhaseParticipant*> outputs,
                                        std::string region, uint64_t id, int64_t pause_ms) {
  // A store that does not answer holds this region's outputs, not the
  // acknowledger: the other regions' acknowledgements go on meanwhile.
  acker_.Post(
      key,
      [this, key, publish = std::move(publish), outputs = std::move(outputs),
       region = std::move(region), id, pause_ms]() mutable {
        if (halting_.load()) return;
        Status st = publish(id);
        if (st.ok()) {
          for (auto* o : outputs) o->Decide(id, true);
          return;
        }
        if (!st.retryable()) {
          // The outputs wait for a decision that never comes: the region
          // commits nothing more, and its restart goes back to the last
          // checkpoint they committed.
          KLOG_ERROR("checkpoint {} of region {} is not committed to its outputs: {}", id, region,
                     st.message());
          return;
        }
        const int64_t next = std::min<int64_t>(std::max<int64_t>(pause_ms * 2, 100), 5000);
        KLOG_WARN("checkpoint {} of region {}: {}; asking again in {} ms", id, region,
                  st.message(), next);
        TryPublishThenDecide(key, std::move(publish), std::move(outputs), std::move(region), id,
                             next);
      },
      pause_ms);
}

void Checkpointer::Decide(RegionState& rs, uint64_t id, bool committed) {
  for (auto* o : rs.region.two_phase) o->Decide(id, committed);
}

void Checkpointer::BarrierPause(size_t region, uint64_t id, int64_t us) {
  MutexLock lock(mu_);
  RegionState& rs = regions_[region];
  if (id > rs.pause_id) {
    rs.pause_id = id;
    rs.status.barrier_pause_us = us;
  } else if (id == rs.pause_id) {
    rs.status.barrier_pause_us = std::max(rs.status.barrier_pause_us, us);
  }
  rs.status.longest_barrier_pause_us = std::max(rs.status.longest_barrier_pause_us, us);
  rs.pause->Observe(static_cast<double>(us) / 1e6);
}

void Checkpointer::Record(RegionState& rs, uint64_t id, std::string reason, int64_t duration_ms,
                          const checkpoint::CommitStats* stats) {
  CheckpointRecord r;
  r.id = id;
  r.committed = stats != nullptr;
  r.reason = std::move(reason);
  r.at_ms = clock_->NowMs();
  r.duration_ms = duration_ms;
  if (stats != nullptr) {
    r.bytes_written = stats->bytes_written;
    r.bytes_reused = stats->bytes_reused;
    rs.status.bytes_written_total += stats->bytes_written;
    rs.status.bytes_reused_total += stats->bytes_reused;
    rs.duration->Observe(static_cast<double>(duration_ms) / 1e3);
  }
  if (rs.pause_id == id) r.barrier_pause_us = rs.status.barrier_pause_us;
  rs.status.history.push_back(std::move(r));
  while (rs.status.history.size() > RegionStatus::kHistory) rs.status.history.pop_front();
}

void Checkpointer::OutputCommitted(size_t region, uint64_t id) {
  MutexLock lock(mu_);
  Awaiting& a = regions_[region].awaiting;
  if (a.id != id || a.remaining == 0) return;
  a.remaining--;
  cv_.notify_all();
}

void Checkpointer::NotifyInputs() {
  for (auto& rs : regions_) {
    Awaiting& a = rs.awaiting;
    if (a.id == 0 || a.remaining > 0) continue;
    TellInputs(rs, a.id, a.units);
    a = Awaiting{};
  }
}

std::string Checkpointer::HeldBack(const RegionState& rs) const {
  for (auto* p : rs.region.pipelines) {
    if (p->failed()) {
      return "pipeline " + p->id() + " stopped without a savepoint (failed); the region does "
             "not commit until it is rebuilt or deleted";
    }
  }
  return "";
}

bool Checkpointer::CaughtUp(const RegionState& rs) const {
  if (!rs.first_after_start) return false;
  return std::all_of(rs.region.sources.begin(), rs.region.sources.end(),
                     [](const CheckpointedPipeline* p) { return p->CaughtUp(); });
}

void Checkpointer::StartCheckpoint(size_t r, bool stop_after) {
  RegionState& rs = regions_[r];
  rs.first_after_start = false;
  Inflight& in = rs.inflight;
  in = Inflight{};
  in.id = store_->NextId();
  in.started_mono_ms = clock_->SteadyMs();
  in.expected = rs.region.pipelines.size() + rs.region.outputs + rs.region.buckets.size();
  in.stop_after = stop_after;
  in.full = rs.needs_full;
  for (const auto* p : rs.region.sources) in.messages_read += p->MessagesRead();
  KLOG_DEBUG("checkpoint {} of region {} started", in.id, rs.region.name);
  for (auto* p : rs.region.sources) p->RequestBarrier(in.id, stop_after);
}

void Checkpointer::Ack(size_t region, uint64_t id, std::vector<checkpoint::UnitState> units) {
  MutexLock lock(mu_);
  Inflight& in = regions_[region].inflight;
  if (in.id != id) return;  // abandoned, or already complete
  for (auto& u : units) in.units.push_back(std::move(u));
  in.acks++;
  cv_.notify_all();
}

bool Checkpointer::FullSave(size_t region, uint64_t id) const {
  MutexLock lock(mu_);
  const Inflight& in = regions_[region].inflight;
  return in.id == id && in.full;
}

bool Checkpointer::IsSavepoint(size_t region, uint64_t id) const {
  MutexLock lock(mu_);
  const Inflight& in = regions_[region].inflight;
  return in.id == id && in.stop_after;
}

void Checkpointer::ArriveAtBucket(size_t region, uint64_t id, Bucket* bucket) {
  MutexLock lock(mu_);
  RegionState& rs = regions_[region];
  if (rs.inflight.id != id) return;
  Meeting& m = meetings_[{bucket, id}];
  m.arrived++;
  if (m.arrived >= rs.region.writers[bucket]) {
    // Every writer is at the barrier: none writes past the cut while the
    // bucket is copied.
    checkpoint::UnitState u;
    u.unit = layout::BucketUnit(bucket->name());
    u.fingerprint = rs.region.bucket_fingerprints[bucket];
    bool& saved_once = rs.bucket_saved_once[bucket];
    auto& pending = rs.pending[bucket];
    if (!saved_once || rs.inflight.full || !pending.empty() || bucket->StateChanged()) {
      // Nothing is copied here but on a bucket's first save: the changes are
      // sealed (copy on write), then collected and encoded at commit, on the
      // coordinator's thread.
      if (!saved_once) {
        pending.clear();
        pending.emplace_back();
        bucket->TakeChanges(/*all=*/true, &pending.back());
        rs.chains[bucket] = RegionState::Chain{};
      } else {
        bucket->Seal();
      }
      u.data.emplace();
      rs.inflight.encode.emplace_back(rs.inflight.units.size(), bucket);
      saved_once = true;
    }
    rs.inflight.units.push_back(std::move(u));
    rs.inflight.acks++;
    m.done = true;
    cv_.notify_all();
    return;
  }
  lock.Wait(cv_, [&]() KAYAK_REQUIRES(mu_) {
    auto it = meetings_.find({bucket, id});
    return stopping_ || it == meetings_.end() || it->second.done;
  });
}

void Checkpointer::AbandonOverdue(int64_t now_mono) {
  for (auto& rs : regions_) {
    Inflight& in = rs.inflight;
    if (in.id == 0 || now_mono - in.started_mono_ms < timeout_ms_) continue;
    KLOG_WARN("checkpoint {} of region {} abandoned: not complete after {} s ({} of {} parts "
              "reported); the previous checkpoint stays in force",
              in.id, rs.region.name, timeout_ms_ / 1000, in.acks, in.expected);
    rs.status.abandoned++;
    rs.status.last_error = "checkpoint " + std::to_string(in.id) + " timed out";
    Record(rs, in.id,
           "not complete after " + std::to_string(timeout_ms_ / 1000) + " s (" +
               std::to_string(in.acks) + " of " + std::to_string(in.expected) +
               " parts reported)",
           now_mono - in.started_mono_ms, nullptr);
    for (auto it = meetings_.begin(); it != meetings_.end();) {
      it = it->first.second == in.id ? meetings_.erase(it) : std::next(it);
    }
    if (in.stop_after) rs.savepoint_requested = false;
    rs.needs_full = true;
    Decide(rs, in.id, false);
    in = Inflight{};
    rs.next_due_mono_ms = now_mono + interval_ms_;
  }
  cv_.notify_all();
}

void Checkpointer::CommitReady() {
  for (size_t r = 0; r < regions_.size(); ++r) {
    RegionState& rs = regions_[r];
    Inflight& in = rs.inflight;
    if (in.id == 0 || in.acks < in.expected) continue;
    const uint64_t id = in.id;
    const bool stop_after = in.stop_after;
    const int64_t started = in.started_mono_ms;
    const bool full = in.full;
    const uint64_t messages_read = in.messages_read;
    std::vector<checkpoint::UnitState> units = std::move(in.units);
    struct Encode {
      size_t index;
      std::vector<std::vector<Bucket::Change>> changes;
      RegionState::Chain chain;
      Bucket* bucket;
    };
    std::vector<Encode> encode;
    for (const auto& [index, bucket] : in.encode) {
      encode.push_back({index, std::move(rs.pending[bucket]), rs.chains[bucket], bucket});
      rs.pending[bucket].clear();
    }
    for (auto it = meetings_.begin(); it != meetings_.end();) {
      it = it->first.second == id ? meetings_.erase(it) : std::next(it);
    }
    in = Inflight{};
    // Keep other regions' pipelines moving while this one is written. (No
    // barrier of this region runs meanwhile: the next checkpoint starts on
    // this thread.)
    mu_.unlock();
    Status st;
    std::set<Bucket*> unreadable;  // whose chain could not be read back to compact
    for (auto& e : encode) {
      // What the barrier sealed, as it was then (a first save sealed
      // nothing: its changes are pending already).
      e.changes.emplace_back();
      e.bucket->CollectSealed(&e.changes.back());
      if (!st.ok()) continue;
      st = EncodeBucket(units[e.index].fingerprint, e.chain, e.changes, &units[e.index]);
      if (!st.ok()) unreadable.insert(e.bucket);
    }
    if (st.ok()) st = CollectSealed(&units);
    for (auto& u : units) {
      if (st.ok() && u.delta && u.compact) st = CompactIfDue(&u);
    }
    checkpoint::CommitStats stats;
    const int64_t now_ms = clock_->NowMs();
    if (st.ok()) st = store_->Commit(rs.region.name, id, now_ms, units, &stats);
    Status ps;
    if (st.ok() && rs.region.prepare_shards) {
      // Before the next checkpoint commits: the chain read back is this one's.
      ps = rs.region.prepare_shards(
          id, units,
          [&](const std::string& unit, const std::string& fp, checkpoint::RestoredUnit* out) {
            return store_->ReadChain(unit, fp, out);
          });
      if (!ps.ok()) {
        KLOG_ERROR("checkpoint {} of region {}: its cluster shards are not published: {}", id,
                   rs.region.name, ps.message());
      }
    }
    mu_.lock();
    const int64_t done = clock_->SteadyMs();
    if (st.ok()) {
      rs.status.last_committed_id = id;
      rs.status.last_committed_ms = now_ms;
      rs.status.messages_at_commit = messages_read;
      rs.status.last_duration_ms = done - started;
      rs.status.bytes_written = stats.bytes_written;
      rs.status.bytes_reused = stats.bytes_reused;
      rs.status.committed++;
      rs.status.last_error.clear();  // the region commits again
      Record(rs, id, "", done - started, &stats);
      if (full) rs.needs_full = false;
      for (auto& e : encode) {
        const uint64_t bytes = units[e.index].data->size();
        rs.chains[e.bucket] = units[e.index].delta
                                  ? RegionState::Chain{e.chain.base, e.chain.deltas + bytes}
                                  : RegionState::Chain{bytes, 0};
      }
      if (rs.region.two_phase.empty()) {
        TellInputs(rs, id, units);
      } else {
        // Inputs release what this checkpoint covers (offsets, the http
        // log) only once the two-phase outputs made it visible: until then
        // a restart may have to go back to the checkpoint before.
        rs.awaiting = Awaiting{id, rs.region.two_phase.size(), std::move(units)};
        if (rs.region.publish_before_commit && !ps.ok()) {
          // Its outputs' commit would cover shards no entry restores.
          KLOG_ERROR("checkpoint {} of region {} is not committed to its outputs: its cluster "
                     "shards could not be cut ({}); the region commits nothing more until it "
                     "restarts", id, rs.region.name, ps.message());
        } else if (rs.region.publish_before_commit) {
          PublishThenDecide(rs, id);
        } else {
          Decide(rs, id, true);
        }
      }
      KLOG_DEBUG("checkpoint {} of region {} committed in {} ms ({} bytes written, {} reused)", id,
                 rs.region.name, done - started, stats.bytes_written, stats.bytes_reused);
      if (stop_after) {
        rs.savepoint_committed = true;
        KLOG_INFO("savepoint {} of region {} committed", id, rs.region.name);
      }
    } else {
      rs.status.abandoned++;
      rs.status.last_error = st.message();
      Record(rs, id, st.message(), done - started, nullptr);
      rs.needs_full = true;
      // The buckets' changes go with the next checkpoint: the store's chain
      // is still the one before them.
      for (auto& e : encode) rs.pending[e.bucket] = std::move(e.changes);
      // A chain that cannot be read back is not built on again: the next
      // checkpoint takes the bucket whole from memory, a new full chunk (a
      // window: the full save that needs_full asks for).
      for (Bucket* b : unreadable) rs.bucket_saved_once[b] = false;
      Decide(rs, id, false);
      KLOG_ERROR("checkpoint {} of region {} abandoned: {}; the previous checkpoint stays in "
                 "force and the next one is tried in {} s",
                 id, rs.region.name, st.message(), interval_ms_ / 1000);
    }
    if (stop_after) rs.savepoint_requested = false;
    rs.next_due_mono_ms = done + interval_ms_;
    cv_.notify_all();
  }
}

Status Checkpointer::EncodeBucket(const std::string& fingerprint, const RegionState::Chain& chain,
                                  const std::vector<std::vector<Bucket::Change>>& changes,
                                  checkpoint::UnitState* u) {
  u->data.emplace();
  u->delta = false;
  // What a delta would write, counted before it is encoded: exact for one
  // list (its keys are distinct), so a delta past the chain's share is not
  // encoded only to be thrown away. Several lists (after an abandoned
  // checkpoint) may share keys: those are encoded and measured.
  uint64_t estimate = 16;
  for (const auto& list : changes) {
    for (const Bucket::Change& c : list) {
      estimate += c.dropped ? 8 + c.key.size() : 24 + c.key.size() + c.value.size();
    }
  }
  const bool over = !chain::DeltaFits(chain.base, chain.deltas, estimate, /*compacted=*/true);
  if (chain.base > 0 && (!over || changes.size() > 1)) {
    Bucket::EncodeDelta(changes, &*u->data);
    u->delta = chain::DeltaFits(chain.base, chain.deltas, u->data->size(), /*compacted=*/true);
    if (u->delta) return Status::Ok();
    u->data->clear();
  }
  // A new full chunk: the committed chain, read back, with the changes.
  checkpoint::RestoredUnit committed;
  if (chain.base > 0) KAYAK_RETURN_IF_ERROR(store_->ReadChain(u->unit, fingerprint, &committed));
  std::vector<std::string_view> deltas(committed.deltas.begin(), committed.deltas.end());
  return Bucket::Compact(committed.data, deltas, changes, &*u->data);
}

Status Checkpointer::CollectSealed(std::vector<checkpoint::UnitState>* units) {
  for (auto& u : *units) {
    if (!u.collect) continue;
    u.data.emplace();
    Status st = u.collect(&*u.data);
    u.collect = nullptr;
    if (!st.ok()) return Status::Internal(u.unit + ": " + st.message());
  }
  return Status::Ok();
}

Status Checkpointer::CompactIfDue(checkpoint::UnitState* u) {
  uint64_t base = 0, deltas = 0;
  // No chain: the store refuses the delta, the commit fails and the next
  // checkpoint saves everything.
  if (!store_->LatestChain(u->unit, u->fingerprint, &base, &deltas)) return Status::Ok();
  if (chain::DeltaFits(base, deltas, u->data->size(), /*compacted=*/true)) return Status::Ok();
  checkpoint::RestoredUnit committed;
  KAYAK_RETURN_IF_ERROR(store_->ReadChain(u->unit, u->fingerprint, &committed));
  std::vector<std::string_view> chain(committed.deltas.begin(), committed.deltas.end());
  chain.push_back(*u->data);
  std::string full;
  KAYAK_RETURN_IF_ERROR(u->compact(committed.data, chain, &full));
  *u->data = std::move(full);
  u->delta = false;
  return Status::Ok();
}

void Checkpointer::Run() {
  pthread_setname_np(pthread_self(), "kayak-ckpt");
  // The coordinator's heavy work (collecting sealed state, compacting
  // chains, writing chunks) yields to the pipelines when both want a core,
  // as RocksDB lowers the CPU priority of its compaction threads: on a busy
  // machine a pipeline loses less to a checkpoint, and a checkpoint takes
  // longer. On Linux a thread's nice value is its own. Best effort.
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), kCoordinatorNice) != 0) {
    KLOG_DEBUG("checkpoint coordinator: cannot lower its priority ({})", errno);
  }
  MutexLock lock(mu_);
  while (!stopping_) {
    lock.WaitFor(cv_, std::chrono::milliseconds(50));
    if (stopping_) break;
    const int64_t now = clock_->SteadyMs();
    for (size_t r = 0; r < regions_.size(); ++r) {
      RegionState& rs = regions_[r];
      const std::string held = HeldBack(rs);
      if (held != rs.status.held_back) {
        if (!held.empty()) KLOG_WARN("region {} is held back: {}", rs.region.name, held);
        rs.status.held_back = held;
      }
      if (rs.inflight.id != 0 || !held.empty()) continue;
      if (rs.savepoint_requested) {
        StartCheckpoint(r, /*stop_after=*/true);
      } else if (now >= rs.next_due_mono_ms || rs.checkpoint_requested || CaughtUp(rs)) {
        rs.checkpoint_requested = false;
        StartCheckpoint(r, false);
      }
    }
    AbandonOverdue(now);
    CommitReady();
    NotifyInputs();
  }
}

std::vector<Checkpointer::Missed> Checkpointer::Savepoint(int64_t wait_ms) {
  MutexLock lock(mu_);
  std::vector<Missed> missed;
  if (!thread_.joinable()) {
    for (const auto& rs : regions_) {
      missed.push_back({rs.region.name, "the checkpoint coordinator is not running",
                        rs.status.last_committed_id});
    }
    return missed;
  }
  for (auto& rs : regions_) {
    rs.savepoint_committed = false;
    if (rs.status.held_back.empty()) rs.savepoint_requested = true;
  }
  cv_.notify_all();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  lock.WaitUntil(cv_, deadline, [&]() KAYAK_REQUIRES(mu_) {
    return std::none_of(regions_.begin(), regions_.end(),
                        [](const RegionState& rs) { return rs.savepoint_requested; });
  });
  for (auto& rs : regions_) {
    if (rs.savepoint_committed) continue;
    std::string why;
    if (!rs.status.held_back.empty()) {
      why = "held back: " + rs.status.held_back;
    } else if (rs.savepoint_requested) {
      why = "not complete after " + std::to_string(wait_ms / 1000) + " s";
      // Still requested: no later checkpoint is to stop the sources.
      rs.savepoint_requested = false;
    } else {
      why = "abandoned: " + (rs.status.last_error.empty() ? std::string("unknown reason")
                                                          : rs.status.last_error);
    }
    missed.push_back({rs.region.name, why, rs.status.last_committed_id});
  }
  return missed;
}

bool Checkpointer::CheckpointNow(int64_t wait_ms) {
  MutexLock lock(mu_);
  std::vector<uint64_t> before;
  for (auto& rs : regions_) {
    before.push_back(rs.status.committed + rs.status.abandoned);
    rs.checkpoint_requested = true;
  }
  cv_.notify_all();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  // A region counts once a checkpoint started after this call has ended.
  std::vector<uint64_t> target(before.size());
  for (size_t i = 0; i < regions_.size(); ++i) {
    target[i] = before[i] + (regions_[i].inflight.id != 0 ? 2 : 1);
  }
  bool ok = lock.WaitUntil(cv_, deadline, [&]() KAYAK_REQUIRES(mu_) {
    for (size_t i = 0; i < regions_.size(); ++i) {
      if (!regions_[i].status.held_back.empty()) continue;
      if (regions_[i].status.committed + regions_[i].status.abandoned < target[i]) return false;
    }
    return true;
  });
  // A region that abandoned the checkpoint asked for keeps its reason in last_error.
  for (const auto& rs : regions_) ok = ok && rs.status.held_back.empty() && rs.status.last_error.empty();
  return ok;
}

uint64_t Checkpointer::RequestCheckpoint(size_t region) {
  MutexLock lock(mu_);
  RegionState& rs = regions_[region];
  rs.checkpoint_requested = true;
  cv_.notify_all();
  return std::max(rs.inflight.id, rs.status.last_committed_id);
}

std::vector<RegionStatus> Checkpointer::Regions() const {
  MutexLock lock(mu_);
  std::vector<RegionStatus> out;
  const int64_t now = clock_->SteadyMs();
  for (const auto& rs : regions_) {
    out.push_back(rs.status);
    RegionStatus& r = out.back();
    r.messages_read = 0;
    for (const auto* p : rs.region.sources) r.messages_read += p->MessagesRead();
    r.inflight_id = rs.inflight.id;
    r.inflight_ms = rs.inflight.id != 0 ? now - rs.inflight.started_mono_ms : 0;
  }
  return out;
}

uint64_t Checkpointer::LastCommitted(size_t region) const {
  MutexLock lock(mu_);
  return regions_[region].status.last_committed_id;
}

}  // namespace kayak
