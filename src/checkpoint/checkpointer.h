// The checkpoint coordinator (SPEC 5.2-5.3): every interval it starts a
// checkpoint in each region, collects what every pipeline, output and
// bucket hands over at the barrier, and commits the region through the
// Store on its own thread, off the pipeline threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/metrics.h"
#include "checkpoint/acknowledger.h"
#include "checkpoint/store.h"
#include "state/bucket.h"
#include "kayak/thread_annotations.h"

namespace kayak {

// What the coordinator asks of a pipeline of its region (the engine's
// PipelineRunner): the coordinator knows the engine only through these two.
class CheckpointedPipeline {
 public:
  virtual ~CheckpointedPipeline() = default;
  virtual const std::string& id() const = 0;
  // The pipeline stopped without a savepoint: its region cannot commit.
  virtual bool failed() const = 0;
  // A source: take barrier `id` between two batches; with `stop_after` read
  // nothing more after it (a savepoint).
  virtual void RequestBarrier(uint64_t id, bool stop_after) = 0;
  // The input's position in `units` (a checkpoint of its region that
  // committed), if they hold one.
  virtual bool CommittedPosition(const std::vector<checkpoint::UnitState>& units,
                                 std::string* position) const = 0;
  // A checkpoint holding `position` committed; on the acknowledgement thread.
  virtual void InputCommitted(std::string_view position) = 0;
  // Messages its input has read since the start (a source's; any thread).
  virtual uint64_t MessagesRead() const { return 0; }
  // A source whose input has read, since the start, every message it knew
  // of at some instant after reading one (its lag was 0): what a restart
  // replays is read again by then. Any thread.
  virtual bool CaughtUp() const { return false; }
};

// An output whose writes become visible only when it commits a durable
// checkpoint (Output::TwoPhase).
class TwoPhaseParticipant {
 public:
  virtual ~TwoPhaseParticipant() = default;
  // On the coordinator's thread: checkpoint `id` is durable (`committed`),
  // or it was abandoned.
  virtual void Decide(uint64_t id, bool committed) = 0;
};

// One checkpoint of a region, for the history on the dashboard and in
// GET /api/v1/checkpoints.
struct CheckpointRecord {
  uint64_t id = 0;
  bool committed = false;
  std::string reason;  // why it was abandoned
  int64_t at_ms = 0;   // wall clock, when it was committed or abandoned
  int64_t duration_ms = 0;
  uint64_t bytes_written = 0;
  uint64_t bytes_reused = 0;
  int64_t barrier_pause_us = 0;  // the longest a pipeline paused at its barrier
};

struct RegionStatus {
  std::string name;
  std::vector<std::string> pipelines;
  uint64_t last_committed_id = 0;
  int64_t last_committed_ms = 0;
  int64_t last_duration_ms = 0;
  uint64_t bytes_written = 0;
  uint64_t bytes_reused = 0;
  uint64_t committed = 0;
  uint64_t abandoned = 0;
  // The longest a pipeline of the region stopped at the newest checkpoint's
  // barrier to snapshot its state (and meet the other writers of a bucket),
  // and the longest since start, in microseconds.
  int64_t barrier_pause_us = 0;
  int64_t longest_barrier_pause_us = 0;
  std::string held_back;  // why the region is not checkpointing, or ""
  std::string last_error;
  // What a kill -9 now would replay: the messages the region's inputs read
  // since the barrier of its last committed checkpoint was asked for (an
  // upper bound: a pipeline takes the barrier between two batches), from
  // `messages_read` now and `messages_at_commit`.
  uint64_t messages_at_commit = 0;
  // Filled by Regions() as it answers, not kept: the inputs' count now, and
  // the checkpoint under way (0: none) and how long it has been.
  uint64_t messages_read = 0;
  uint64_t inflight_id = 0;
  int64_t inflight_ms = 0;
  uint64_t bytes_written_total = 0;  // over every checkpoint since the start
  uint64_t bytes_reused_total = 0;
  std::deque<CheckpointRecord> history;  // the newest last, at most kHistory
  static constexpr size_t kHistory = 50;
};

class Checkpointer {
 public:
  Checkpointer(checkpoint::Store* store, int64_t interval_ms, int64_t timeout_ms,
               const Clock* clock);
  ~Checkpointer();

  // ---- set-up, before Start ----
  struct Region {
    std::string name;
    std::vector<CheckpointedPipeline*> pipelines;
    std::vector<CheckpointedPipeline*> sources;
    size_t outputs = 0;
    // Outputs whose writes become visible only when they commit a durable
    // checkpoint (Output::TwoPhase). The region's inputs hear of a
    // checkpoint only once every one of them committed it.
    std::vector<TwoPhaseParticipant*> two_phase;
    std::vector<Bucket*> buckets;  // written by the region's pipelines
    std::map<Bucket*, size_t> writers;
    std::map<Bucket*, std::string> bucket_fingerprints;
    // In a cluster (docs/cluster.md): right after each checkpoint of the
    // region commits to the store, on the coordinator's thread and before
    // the next one, `prepare_shards` gets its units and a way to read a
    // unit's chain as the checkpoint holds it; `publish_shards` hears, on
    // the acknowledgement thread, when the checkpoint is final (when the
    // inputs do).
    using ReadChain = std::function<Status(const std::string& unit, const std::string& fingerprint,
                                           checkpoint::RestoredUnit* out)>;
    std::function<Status(uint64_t id, const std::vector<checkpoint::UnitState>& units,
                         const ReadChain& read_chain)>
        prepare_shards;
    std::function<void(uint64_t id)> publish_shards;
    // With two-phase outputs in a cluster: called on the acknowledgement
    // thread once a checkpoint is durable, before its outputs are told to
    // commit it; they are told once it succeeds (Unavailable: asked again
    // after a pause). Invalid: the outputs are never told (docs/cluster.md).
    std::function<Status(uint64_t id)> publish_before_commit;
  };
  size_t AddRegion(Region region);
  // Before CommitInitial: `bucket` was restored whole from its committed
  // chain (a full chunk of `base` bytes and deltas of `deltas` bytes). If
  // the store still names that chain, the initial checkpoint refers to it
  // rather than write the bucket again.
  void BucketRestored(Bucket* bucket, uint64_t base, uint64_t deltas);
  // The bytes of the committed chain the store names for `unit` (its full
  // chunk, its deltas), if its fingerprint is `fingerprint`.
  bool CommittedChain(const std::string& unit, const std::string& fingerprint, uint64_t* base,
                      uint64_t* deltas) {
    return store_->LatestChain(unit, fingerprint, base, deltas);
  }

  // Before Start: commits each region's units as they are (buckets are
  // added here), before any data flows.
  // Regions in `incomplete` (an output could not start) are skipped.
  Status CommitInitial(std::map<size_t, std::vector<checkpoint::UnitState>> units,
                       const std::set<size_t>& incomplete);
  void Start();
  // Takes a savepoint of every region: sources stop right after the
  // barrier. Waits at most `wait_ms` for each region to commit it. Returns
  // the regions that did not (held back, abandoned, still running), each
  // with why and the checkpoint a restart replays from; empty when every
  // region committed its savepoint.
  struct Missed {
    std::string region;
    std::string why;
    uint64_t last_committed_id = 0;
  };
  std::vector<Missed> Savepoint(int64_t wait_ms);
  void Stop();

  // ---- from pipeline and output threads ----
  // Hands over units for checkpoint `id` of `region`.
  void Ack(size_t region, uint64_t id, std::vector<checkpoint::UnitState> units);
  // A writer of `bucket` reached barrier `id`. The last writer to arrive
  // copies the bucket and acks it; the others wait for that (or for the
  // checkpoint to be abandoned).
  void ArriveAtBucket(size_t region, uint64_t id, Bucket* bucket);
  // True when checkpoint `id` of `region` must carry every unit's state,
  // changed or not (the one before it did not commit).
  bool FullSave(size_t region, uint64_t id) const;
  // True when checkpoint `id` of `region` is a savepoint (nothing comes
  // after it: the region is stopping).
  bool IsSavepoint(size_t region, uint64_t id) const;
  // A pipeline of `region` spent `us` at barrier `id` (its snapshot and the
  // bucket meeting).
  void BarrierPause(size_t region, uint64_t id, int64_t us);
  // A two-phase output of `region` committed checkpoint `id`.
  void OutputCommitted(size_t region, uint64_t id);
  // Tells `p`'s input, on the acknowledgement thread, that `position` is
  // committed when no checkpoint holds it: only KAYAK_MUTATION=ack_on_read
  // (common/crash_point.h) does that.
  void AcknowledgeUncommitted(CheckpointedPipeline* p, std::string position);

  std::vector<RegionStatus> Regions() const;
  // The newest checkpoint `region` committed (0: none yet).
  uint64_t LastCommitted(size_t region) const;
  // Starts a checkpoint in every region now and waits until each has
  // committed or failed; true when all committed.
  bool CheckpointNow(int64_t wait_ms);
  // Asks `region` for a checkpoint as soon as the one in flight (if any)
  // is done, without waiting: the id of the newest checkpoint the region
  // began before this call (0: none). Every later one covers what the
  // region's inputs had read when it was asked.
  uint64_t RequestCheckpoint(size_t region);

 private:
  // The coordinator thread's nice value (docs/architecture.md, "Threads").
  static constexpr int kCoordinatorNice = 10;

  struct Inflight {
    uint64_t id = 0;
    int64_t started_mono_ms = 0;
    size_t acks = 0;
    size_t expected = 0;
    std::vector<checkpoint::UnitState> units;
    bool stop_after = false;
    bool full = false;  // every unit hands over its whole state
    uint64_t messages_read = 0;  // by the region's inputs when the barrier was asked for
    // Bucket units whose chunk is encoded at commit, off the pipeline
    // threads: (index in `units`, bucket).
    std::vector<std::pair<size_t, Bucket*>> encode;
  };
  // A durable checkpoint whose two-phase outputs have not all committed it.
  struct Awaiting {
    uint64_t id = 0;  // 0: none
    size_t remaining = 0;
    std::vector<checkpoint::UnitState> units;
  };
  struct RegionState {
    Region region;
    RegionStatus status;
    Inflight inflight;  // id == 0: none
    int64_t next_due_mono_ms = 0;
    // No checkpoint has started since Start in a region with a two-phase
    // output: the first one starts when every source has caught up
    // (CheckpointedPipeline::CaughtUp), if that comes before the interval.
    bool first_after_start = false;
    bool savepoint_requested = false;
    // A checkpoint is wanted now: the next starts as soon as none is in
    // flight, whatever the interval says.
    bool checkpoint_requested = false;
    bool savepoint_committed = false;  // the savepoint asked for last committed
    // Set when a checkpoint fails or is abandoned: components that saved
    // into it reset their "changed" flags, so the next one saves everything
    // rather than point at chunks older than those changes.
    bool needs_full = false;
    std::map<Bucket*, bool> bucket_saved_once;
    // The changes of a bucket taken since its last commit and not yet
    // committed: a first save's every entry, or those of a checkpoint that
    // failed (its changes go with the next one).
    std::map<Bucket*, std::vector<std::vector<Bucket::Change>>> pending;
    // A bucket's committed chain: the bytes of its last full chunk and of
    // the deltas after it. A checkpoint writes a delta while the deltas stay
    // under chain::kCompactedShare of the full chunk, then a full chunk again (so a
    // restore reads at most 1 + that share of the state), written by a
    // compaction of the chain and the changes. base == 0: no full chunk
    // committed yet.
    struct Chain {
      uint64_t base = 0;
      uint64_t deltas = 0;
    };
    std::map<Bucket*, Chain> chains;
    std::map<Bucket*, Chain> restored;  // BucketRestored
    Awaiting awaiting;
    uint64_t pause_id = 0;  // the checkpoint status.barrier_pause_us is about
    metrics::Histogram* duration = nullptr;  // seconds, barrier to commit
    metrics::Histogram* pause = nullptr;     // seconds, each pipeline's barrier pause
  };
  struct Meeting {
    size_t arrived = 0;
    bool done = false;
  };

  void Run();
  // A bucket's chunk at commit: a delta of `changes` on its committed chain
  // while the deltas stay within their share, else a compaction of the
  // chain and the changes into a full chunk (mu_ not held).
  // A delta that compacts (UnitState::compact): the full state instead,
  // merged from the committed chain and it, once the chain would pass
  // chain::kCompactedShare of its full chunk (mu_ not held).
  Status CompactIfDue(checkpoint::UnitState* u);
  // Writes the data of the units a barrier only sealed (UnitState::collect),
  // while their pipelines go on (mu_ not held).
  static Status CollectSealed(std::vector<checkpoint::UnitState>* units);
  Status EncodeBucket(const std::string& fingerprint, const RegionState::Chain& chain,
                      const std::vector<std::vector<Bucket::Change>>& changes,
                      checkpoint::UnitState* u);
  void StartCheckpoint(size_t r, bool stop_after) KAYAK_REQUIRES(mu_);
  // The region's first checkpoint since Start is due early: its sources
  // have read what they were behind by.
  bool CaughtUp(const RegionState& rs) const KAYAK_REQUIRES(mu_);
  void CommitReady() KAYAK_REQUIRES(mu_);  // drops mu_ while it writes
  void AbandonOverdue(int64_t now_mono) KAYAK_REQUIRES(mu_);
  void Decide(RegionState& rs, uint64_t id, bool committed) KAYAK_REQUIRES(mu_);
  // Region::publish_before_commit, then Decide, on acker_'s thread; a
  // retryable failure is tried again after `pause_ms` (doubling, up to 5 s)
  // by a post of its own, so the thread serves the other regions meanwhile.
  void PublishThenDecide(RegionState& rs, uint64_t id) KAYAK_REQUIRES(mu_);
  void TryPublishThenDecide(const void* key, std::function<Status(uint64_t)> publish,
                            std::vector<TwoPhaseParticipant*> outputs, std::string region,
                            uint64_t id, int64_t pause_ms);
  void NotifyInputs() KAYAK_REQUIRES(mu_);
  // Queues the region's inputs' acknowledgements of `units`: they go out on
  // acker_'s thread, off mu_.
  // Also queues the publication of the region's shards (a cluster's).
  void TellInputs(const RegionState& rs, uint64_t id,
                  const std::vector<checkpoint::UnitState>& units);
  // Into the region's history; `stats` is null for an abandoned one.
  void Record(RegionState& rs, uint64_t id, std::string reason, int64_t duration_ms,
              const checkpoint::CommitStats* stats) KAYAK_REQUIRES(mu_);
  std::string HeldBack(const RegionState& rs) const;

  checkpoint::Store* store_;
  const int64_t interval_ms_;
  const int64_t timeout_ms_;
  const Clock* clock_;

  mutable Mutex mu_;
  std::condition_variable cv_;
  std::vector<RegionState> regions_ KAYAK_GUARDED_BY(mu_);
  std::map<std::pair<Bucket*, uint64_t>, Meeting> meetings_ KAYAK_GUARDED_BY(mu_);
  bool stopping_ KAYAK_GUARDED_BY(mu_) = false;
  std::atomic<bool> halting_{false};  // Stop began: no more asking before a commit
  std::thread thread_;
  Acknowledger acker_;  // the inputs' acknowledgements, off mu_
};

}  // namespace kayak
