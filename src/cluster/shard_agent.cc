#include "cluster/shard_agent.h"

#include <set>

#include <nlohmann/json.hpp>

#include "checkpoint/state_layout.h"
#include "cluster/membership.h"
#include "cluster/shard_split.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/partition_offsets.h"
#include "state/bucket.h"

namespace kayak::cluster {

namespace {

// How many entries of a shard's log stay (the newest that count, and the
// chunks they name): the newest, and one to fall back to when it is damaged.
// With two-phase outputs one more: the newest may name a commit that did
// not take place.
constexpr size_t kKeepEntries = 2;
constexpr size_t kKeepEntriesTwoPhase = 3;

}  // namespace

ShardAgent::ShardAgent(const ClusterConfig& config, ComponentStats* card, const Clock* clock)
    : config_(config),
      card_(card),
      clock_(clock),
      store_(config.blobs ? config.blobs : DirectoryBlobs(config.store), config.name) {}

ShardAgent::~ShardAgent() {
  if (config_.membership != nullptr) config_.membership->Remove(this);
}

ShardAgent::Description ShardAgent::Describe() const {
  Description d;
  d.region = region_;
  for (const Bucket* b : buckets_) d.buckets.push_back(b->name());
  MutexLock lock(mu_);
  d.topic = topic_;
  d.partitions = partitions_;
  for (const auto& [tp, o] : owned_) {
    if (!o.lost) d.owned.push_back(Shard{tp.second, o.epoch, o.next, o.lag});
  }
  return d;
}

void ShardAgent::Progress(const std::string& topic, int32_t partition, int64_t next,
                          int64_t lag) {
  MutexLock lock(mu_);
  auto it = owned_.find({topic, partition});
  if (it == owned_.end()) return;
  it->second.next = next;
  it->second.lag = lag;
}

void ShardAgent::Bind(std::string region, std::vector<Bucket*> buckets,
                      std::vector<std::pair<std::string, Transform*>> transforms) {
  region_ = std::move(region);
  buckets_ = std::move(buckets);
  transforms_ = std::move(transforms);
  for (const auto& [unit, t] : transforms_) {
    holds_messages_ = holds_messages_ || t->ShardedAs() == Transform::Sharding::kMessages;
  }
  // After the fields it reads are set: the member file's writer reads them
  // from now on (ordered by the membership's mutex).
  if (config_.membership != nullptr) config_.membership->Add(this);
}

ShardId ShardAgent::IdOf(const std::string& topic, int32_t partition) const {
  return ShardId{region_, topic, partition};
}

void ShardAgent::Error(const std::string& what) const {
  KLOG_ERROR("cluster: {}", what);
  if (card_ != nullptr) card_->RecordError("cluster: " + what);
}

Status ShardAgent::Assign(std::vector<Assigned>* parts) {
  std::set<std::pair<std::string, int32_t>> given;
  std::set<int32_t> given_partitions;
  for (const Assigned& a : *parts) {
    if (a.topic != parts->front().topic || a.partitions != parts->front().partitions) {
      return Status::Invalid("a cluster's input reads one topic: a key names one partition");
    }
    if (a.partitions < 1) return Status::Invalid("topic " + a.topic + " has no partitions");
    given.insert({a.topic, a.partition});
    given_partitions.insert(a.partition);
  }
  const int32_t partitions = parts->empty() ? 0 : parts->front().partitions;
  // The epochs this server holds the given partitions at. The store is read
  // and the commits are asked about without the mutex (a commit check may
  // wait a minute for an open transaction to end): the member file and the
  // checkpoints of what stays go on meanwhile. Only this thread adds or
  // removes what is owned; a publication meanwhile may mark a kept shard
  // lost (another member claimed it), which stays so.
  std::map<std::pair<std::string, int32_t>, uint64_t> held_epochs;
  {
    MutexLock lock(mu_);
    for (auto it = owned_.begin(); it != owned_.end();) {
      if (given.count(it->first)) {
        held_epochs[it->first] = it->second.epoch;
        ++it;
        continue;
      }
      KLOG_INFO("cluster: shard {} went to another member",
                IdOf(it->first.first, it->first.second).Path());
      it = owned_.erase(it);
    }
    if (!parts->empty()) {
      topic_ = parts->front().topic;
      partitions_ = partitions;
    }
  }
  // Each partition given is kept or claimed; a claimed one's slices are
  // read here and folded in below, with every state changed once.
  std::set<int32_t> claimed_partitions;
  std::map<std::string, std::vector<std::string>> slices;  // unit -> the claimed shards' slices
  std::vector<std::pair<Assigned*, Holding>> claims;
  struct Kept {
    Assigned* a;
    uint64_t epoch;          // of the newest entry, this server's
    int64_t published_offset;  // its offset
  };
  std::vector<Kept> kept;
  std::map<std::string, bool> asked;  // output state -> its commit took place
  const ShardStore::Usable usable = [&](const ShardManifest& m) { return Committed(m, &asked); };
  for (Assigned& a : *parts) {
    const ShardId id = IdOf(a.topic, a.partition);
    std::vector<std::string> notes;
    auto newest = store_.Newest(id, &notes);
    if (!newest.ok()) return newest.status();
    for (const std::string& n : notes) KLOG_WARN("cluster: {}", n);
    // The server's own state is current when it is the shard's newest owner
    // and still holds a position for it: its local checkpoint (or memory)
    // is at least as new as what it published.
    bool current = a.have_position && newest->has_value() && (*newest)->owner == config_.member;
    auto held = held_epochs.find({a.topic, a.partition});
    if (current && (held == held_epochs.end() || held->second != (*newest)->epoch)) {
      // The newest entry is from before a restart of this member. A claim:
      // it restored another owner's state, which may be newer than the
      // local checkpoint (the member stopped before a checkpoint covered
      // it), so the shard is claimed again. An entry published before its
      // outputs committed, whose commit did not take place: the local state
      // went back to the checkpoint before (the restart's fall-back), and
      // the shard is claimed again from the newest entry that did commit.
      if ((*newest)->claim || (!(*newest)->outputs.empty() && !usable(**newest))) {
        current = false;
      }
    }
    if (current) {
      kept.push_back(Kept{&a, (*newest)->epoch, (*newest)->next_offset});
      a.keep = true;
      continue;
    }
    ShardManifest claimed;
    uint64_t epoch = 0;
    auto outcome = store_.ClaimNext(id, config_.member, -1, &claimed, &epoch, usable);
    // A claim loses only to another claim that took the number first; the
    // next reading finds it and goes one above.
    for (int tries = 0; outcome.ok() && *outcome == CommitOutcome::kFenced && tries < 8; ++tries) {
      outcome = store_.ClaimNext(id, config_.member, -1, &claimed, &epoch, usable);
    }
    if (!outcome.ok()) return outcome.status();
    if (*outcome != CommitOutcome::kCommitted) {
      return Status::Unavailable("shard " + id.Path() + ": another member keeps claiming it");
    }
    for (const auto& [unit, ref] : claimed.units) {
      auto data = store_.ReadChunk(id, ref);
      if (!data.ok()) return data.status();
      slices[unit].push_back(std::move(*data));
    }
    claimed_partitions.insert(a.partition);
    Holding holding{epoch, a.partitions, claimed.next_offset};
    holding.held_messages = holds_messages_;  // a buffer's slice of it may hold some
    claims.emplace_back(&a, holding);
    KLOG_INFO("cluster: claimed shard {} at epoch {}: restoring checkpoint {}, reading from "
              "offset {}", id.Path(), epoch, claimed.checkpoint, claimed.next_offset);
  }
  // Every key of a partition not given goes: it moved to another member, or
  // it was left from before a restart (the local checkpoint held it). A
  // claimed partition's keys become its shard's. The bucket then answers
  // only for what this server owns.
  const Partitioner partitioner = config_.partitioner;
  const auto replaced = [&](const std::string& key) {
    if (key.empty()) return false;  // a record without a key names no partition
    if (partitions == 0) return true;
    const int32_t p = PartitionOf(partitioner, key, partitions);
    return !given_partitions.count(p) || claimed_partitions.count(p) > 0;
  };
  const auto fulls_of = [&](const std::string& unit) {
    std::vector<std::string_view> fulls;
    auto it = slices.find(unit);
    if (it != slices.end()) fulls.assign(it->second.begin(), it->second.end());
    return fulls;
  };
  for (Bucket* b : buckets_) {
    KAYAK_RETURN_IF_ERROR(b->ReplaceKeys(replaced, fulls_of(layout::BucketUnit(b->name()))));
  }
  for (const auto& [unit, t] : transforms_) {
    KAYAK_RETURN_IF_ERROR(t->ReplaceKeys(replaced, fulls_of(unit)));
  }
  {
    MutexLock lock(mu_);
    for (const Kept& k : kept) {
      auto& o = owned_[{k.a->topic, k.a->partition}];
      if (o.epoch != k.epoch) {
        o.published_offset = k.published_offset;
        o.held_messages = holds_messages_;  // what it restored is not known here
        o.lost = false;  // an epoch of this server's it was not fenced from
      }
      o.epoch = k.epoch;
      o.partitions = k.a->partitions;
    }
    for (auto& [a, holding] : claims) {
      owned_[{a->topic, a->partition}] = holding;
      a->keep = false;
      a->offset = holding.published_offset;
    }
  }
  // Only now are the keys of the partitions that went dropped: an
  // assignment that failed before (the store unreachable) is tried again,
  // and until then what they held is still their next owner's.
  state_held_.store(false);
  return Status::Ok();
}

bool ShardAgent::Committed(const ShardManifest& m, std::map<std::string, bool>* asked) const {
  if (m.outputs.empty() || !commit_check_) return true;
  std::string key;
  for (const auto& [unit, state] : m.outputs) key += unit + '\n' + state + '\n';
  auto it = asked->find(key);
  if (it != asked->end()) return it->second;
  const bool committed = commit_check_(m.outputs);
  if (!committed) {
    KLOG_WARN("cluster: checkpoint {} of {} was published before its outputs' commit, which did "
              "not take place; its shards are restored from the entry before",
              m.checkpoint, m.owner);
  }
  return (*asked)[key] = committed;
}

Status ShardAgent::Prepare(uint64_t id, const std::string& position,
                           const std::map<std::string, std::string>& outputs,
                           const FullChunk& full_of) {
  PartitionOffsets offsets;
  if (!PartitionOffsetsFromJson(position, &offsets)) {
    return Status::Corruption("cluster: the kafka input's position is unreadable");
  }
  std::map<std::pair<std::string, int32_t>, Holding> due;
  {
    MutexLock lock(mu_);
    for (const auto& [tp, o] : owned_) {
      auto at = offsets.find(tp);
      if (!o.lost && at != offsets.end() &&
          (at->second != o.published_offset || o.held_messages)) {
        due[tp] = o;
      }
    }
  }
  std::vector<Slice> slices;
  if (!due.empty()) {
    // Each bucket's state as checkpoint `id` holds it, cut once per
    // partition count.
    std::map<std::string, std::pair<KeyedState, std::string>> fulls;  // unit -> its state
    for (Bucket* b : buckets_) {
      auto& [kind, full] = fulls[layout::BucketUnit(b->name())];
      kind = KeyedState::kBucket;
      KAYAK_RETURN_IF_ERROR(full_of(layout::BucketUnit(b->name()), &full));
    }
    for (const auto& [unit, t] : transforms_) {
      auto& [kind, full] = fulls[unit];
      kind = t->ShardedAs() == Transform::Sharding::kMessages ? KeyedState::kBuffer
                                                               : KeyedState::kRollingWindow;
      KAYAK_RETURN_IF_ERROR(full_of(unit, &full));
    }
    std::map<int32_t, std::map<std::string, std::vector<std::string>>> cut;  // partitions -> unit
    for (const auto& [tp, o] : due) {
      auto& by_unit = cut[o.partitions];
      if (by_unit.empty()) {
        for (const auto& [unit, state] : fulls) {
          KAYAK_RETURN_IF_ERROR(SplitStateChunk(state.first, state.second, config_.partitioner,
                                                o.partitions, &by_unit[unit]));
        }
      }
      Slice s{IdOf(tp.first, tp.second), o.epoch, offsets[tp], {}, outputs};
      for (auto& [unit, shards] : by_unit) {
        s.units[unit] = shards[static_cast<size_t>(tp.second)];
        // A buffer's slice past its header (I64 time, U64 count) holds some.
        if (fulls[unit].first == KeyedState::kBuffer && s.units[unit].size() > 16) {
          s.held_messages = true;
        }
      }
      slices.push_back(std::move(s));
    }
  }
  MutexLock lock(mu_);
  prepared_[id] = std::move(slices);
  // A checkpoint waits for its outputs at most until the next one commits;
  // a few are kept for checkpoints whose decision is late.
  while (prepared_.size() > 4) prepared_.erase(prepared_.begin());
  return Status::Ok();
}

Status ShardAgent::PublishBeforeCommit(uint64_t id) {
  {
    MutexLock lock(mu_);
    if (!fenced_.empty()) return Status::Invalid(fenced_);
  }
  return PublishPrepared(id, /*before_commit=*/true);
}

void ShardAgent::Fenced() {
  std::string region;
  {
    MutexLock lock(mu_);
    if (restart_asked_ || !config_.on_fenced) return;
    restart_asked_ = true;
    region = region_;
  }
  KLOG_WARN("cluster: region {} restarts: its exactly-once outputs were fenced", region);
  config_.on_fenced(region);
}

void ShardAgent::Publish(uint64_t id) {
  (void)PublishPrepared(id, /*before_commit=*/false);
  MutexLock lock(mu_);
  if (handing_over_ && id > handover_after_) handing_over_ = false;
}

bool ShardAgent::HandOver() {
  if (!request_checkpoint_) return false;
  {
    MutexLock lock(mu_);
    if (owned_.empty()) return false;
    handing_over_ = true;
    handover_after_ = UINT64_MAX;  // until the request says which
  }
  // The input is in its rebalance callback: no barrier passes it before
  // this returns, so no checkpoint begun after the request can be
  // published first.
  const uint64_t after = request_checkpoint_();
  state_held_.store(true);
  MutexLock lock(mu_);
  handover_after_ = after;
  return true;
}

bool ShardAgent::HandedOver() {
  MutexLock lock(mu_);
  return !handing_over_;
}

Status ShardAgent::PublishPrepared(uint64_t id, bool before_commit) {
  std::vector<Slice> slices;
  {
    MutexLock lock(mu_);
    auto it = prepared_.find(id);
    if (it == prepared_.end()) return Status::Ok();
    slices = std::move(it->second);
    prepared_.erase(prepared_.begin(), std::next(it));
  }
  std::vector<Slice> unpublished;  // before a commit: tried again
  std::string unavailable, fenced;
  for (Slice& s : slices) {
    {
      MutexLock lock(mu_);
      auto o = owned_.find({s.shard.topic, s.shard.partition});
      // Moved or claimed again since: what was cut is not this shard's now.
      if (o == owned_.end() || o->second.epoch != s.epoch || o->second.lost) {
        // The outputs hold what this checkpoint read of it, and no entry
        // can say so any more: their commit would repeat it after the
        // partition's next owner replays.
        if (before_commit && fenced.empty()) {
          fenced = "shard " + s.shard.Path() + " moved to another member before checkpoint " +
                   std::to_string(id) + " was published";
        }
        continue;
      }
    }
    ShardManifest m;
    m.epoch = s.epoch;
    m.checkpoint = id;
    m.owner = config_.member;
    m.next_offset = s.offset;
    m.created_ms = clock_->NowMs();
    m.outputs = s.outputs;
    Status st;
    for (const auto& [unit, data] : s.units) {
      auto ref = store_.WriteChunk(s.shard, s.epoch, id, unit, data);
      if (!ref.ok()) {
        st = ref.status();
        break;
      }
      m.units[unit] = *ref;
    }
    Result<CommitOutcome> outcome = st.ok() ? store_.Commit(s.shard, m) : Result<CommitOutcome>(st);
    if (!outcome.ok()) {
      // The next checkpoint tries again: the offset stays unpublished.
      Error("shard " + s.shard.Path() + ": checkpoint " + std::to_string(id) +
            " not published: " + outcome.status().message());
      if (before_commit) {
        if (unavailable.empty()) unavailable = outcome.status().message();
        unpublished.push_back(std::move(s));
      }
      continue;
    }
    {
      MutexLock lock(mu_);
      auto o = owned_.find({s.shard.topic, s.shard.partition});
      if (*outcome == CommitOutcome::kCommitted) {
        if (o != owned_.end() && o->second.epoch == s.epoch) {
          o->second.published_offset = s.offset;
          o->second.held_messages = s.held_messages;
        }
      } else if (o != owned_.end() && o->second.epoch == s.epoch) {
        // Another member claimed the shard: this server writes to it no
        // more, and its state there is the new owner's.
        o->second.lost = true;
      }
    }
    if (*outcome == CommitOutcome::kFenced) {
      Error("shard " + s.shard.Path() + " was claimed by another member; this server no longer "
            "publishes it");
      if (before_commit && fenced.empty()) {
        fenced = "shard " + s.shard.Path() + " was claimed by another member";
      }
      continue;
    }
    const size_t keep = s.outputs.empty() ? kKeepEntries : kKeepEntriesTwoPhase;
    if (Status p = store_.Prune(s.shard, keep); !p.ok()) {
      KLOG_WARN("cluster: shard {}: pruning: {}", s.shard.Path(), p.message());
    }
  }
  if (!before_commit) return Status::Ok();
  MutexLock lock(mu_);
  if (!fenced.empty()) {
    fenced_ = fenced + ": the exactly-once outputs of region " + region_ +
              " commit nothing more until the region restarts" +
              (config_.on_fenced ? " (it restarts by itself)" : "");
    if (card_ != nullptr) card_->RecordError("cluster: " + fenced_);
    KLOG_ERROR("cluster: {}", fenced_);
    Status st = Status::Invalid(fenced_);
    lock.Unlock();
    Fenced();  // asks for the restart once
    return st;
  }
  if (!unpublished.empty()) {
    prepared_[id] = std::move(unpublished);
    return Status::Unavailable("checkpoint " + std::to_string(id) + " not published: " +
                               unavailable);
  }
  return Status::Ok();
}

}  // namespace kayak::cluster
