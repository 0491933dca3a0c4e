// The engine: builds the graph of pipelines from a GraphSpec and runs it.
//
// Threads: one per pipeline (input -> transforms -> fan-out) and one per
// output. Every edge is a lane of the downstream pipeline's Inbox and every
// output has its own one-lane Inbox in front of it, all bounded: a slow
// output blocks its pipeline, which stops reading its input (backpressure).
// See docs/architecture.md.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/store.h"
#include "common/clock.h"
#include "common/defaults.h"
#include "config/loader.h"
#include "state/bucket.h"
#include "engine/channel.h"
#include "checkpoint/checkpointer.h"
#include "cluster/shard_agent.h"
#include "engine/crash_guard.h"
#include "kayak/ingest.h"
#include "kayak/component.h"
#include "kayak/thread_annotations.h"

namespace kayak {

// The dead-letter envelope of `r` (docs/config.md, "Dead letters"): what
// `card`'s component of `pipeline` set aside and why, and `position`, where
// its input was then ("" when not known). Moves the message's key and
// headers.
Message DeadLetterEnvelope(Rejected* r, const std::string& pipeline, const ComponentStats& card,
                           const std::string& position, int64_t now_ms);

// Runs one output on its own thread behind a bounded queue.
class OutputRunner final : public TwoPhaseParticipant {
 public:
  // `lanes`: 1, or for a pipeline's dead-letter output one more than the
  // pipeline's other outputs (lane 0 its pipeline's, lane k+1 output k's
  // refusals), whose barriers it aligns.
  OutputRunner(std::unique_ptr<Output> output, ComponentStats* stats, RetryPolicy retry,
               size_t queue_batches, const Clock* clock, size_t lanes = 1);
  ~OutputRunner();
  void Start();
  // Blocks while the queue is full.
  void Push(Item item) { queue_.Push(0, std::move(item)); }
  // Before Start: what the output refuses one message at a time goes to
  // `dead_letter` (the pipeline's dead-letter output), on its lane `lane`,
  // as envelopes naming `pipeline`; barriers follow it there, so that a
  // checkpoint holds a refusal wherever it holds the write it came from.
  void RefuseTo(OutputRunner* dead_letter, size_t lane, std::string pipeline);
  // Waits for the thread; call after pushing kEnd.
  void Join();
  // Makes a blocked Push return and the thread stop without draining.
  void Abort();
  const Inbox& queue() const { return queue_; }
  ComponentStats* stats() const { return stats_; }
  // Under checkpointing: barriers make the output durable and report to
  // `cp`; failed writes are retried until they succeed.
  void SetCheckpointing(Checkpointer* cp, size_t region, std::string unit,
                        std::string fingerprint) {
    checkpointer_ = cp;
    region_ = region;
    unit_ = std::move(unit);
    fingerprint_ = std::move(fingerprint);
    two_phase_ = output_->TwoPhase();
  }
  // From the checkpoint thread, for a two-phase output: checkpoint `id` is
  // durable (`committed`), or it was abandoned.
  void Decide(uint64_t id, bool committed) override;
  Output* output() { return output_.get(); }
  // Before Start, with checkpointing: opens the output and describes its
  // state, for the checkpoint taken before any data flows.
  Status InitialCheckpoint(checkpoint::UnitState* unit);
  // Before Start: its queue and its own buffer are charged to `budget`.
  void SetMemory(MemoryBudget* budget, const std::string& pipeline);
  // What its queue and its own buffer hold now.
  int64_t memory_bytes() const {
    return queue_memory_ ? queue_memory_->bytes() + buffer_memory_->bytes() : 0;
  }

 private:
  void Run();
  bool WriteWithRetry(const Batch& batch);
  // What the output refused since the last call, to the dead-letter output.
  void SendRefusals();
  // Barrier `id` came on `lane`: whether every lane has it now (the
  // others held until they do).
  bool Aligned(size_t lane, uint64_t id);
  void TakeBarrier(uint64_t id);
  // A two-phase output after acking barrier `id`: waits for the decision on
  // it, and commits the checkpoint if it is durable.
  void AwaitDecision(uint64_t id);
  // Sleeps `ms` unless aborted first.
  void Backoff(int64_t ms);

  // Published after each write and tick.
  void PublishMemory() {
    if (buffer_memory_) buffer_memory_->Set(static_cast<int64_t>(output_->MemoryBytes()));
  }

  std::unique_ptr<Output> output_;
  ComponentStats* stats_;
  const RetryPolicy retry_;
  const Clock* clock_;
  // Before queue_, which charges the first.
  std::unique_ptr<MemoryAccount> queue_memory_, buffer_memory_;
  Inbox queue_;
  std::atomic<bool> aborted_{false};
  bool opened_ = false;  // output thread only (or before Start)
  bool initial_open_ = false;
  Status open_status_;
  Checkpointer* checkpointer_ = nullptr;
  size_t region_ = 0;
  std::string unit_, fingerprint_;
  bool two_phase_ = false;
  // Output thread only: the lanes' ends and barriers (a dead-letter
  // output's), and where refusals go.
  std::vector<bool> lane_ended_;
  std::vector<uint64_t> lane_barrier_;
  uint64_t aligning_ = 0, done_barrier_ = 0;
  OutputRunner* dead_letter_ = nullptr;
  size_t dead_lane_ = 0;
  std::string pipeline_;
  std::vector<Rejected> refused_;
  Mutex decide_mu_;
  std::condition_variable decide_cv_;
  uint64_t decided_ KAYAK_GUARDED_BY(decide_mu_) = 0;  // the newest checkpoint decided
  uint64_t committed_ KAYAK_GUARDED_BY(decide_mu_) = 0;  // the newest one durable
  std::thread thread_;
};

enum class PipelineStatus { kStarting, kRunning, kFinished, kFailed, kStopped };
const char* PipelineStatusName(PipelineStatus s);

// One pipeline: its input (or its upstream lanes), transforms, and outputs.
class PipelineRunner final : public CheckpointedPipeline {
 public:
  PipelineRunner(const PipelineSpec& spec, const Clock* clock);
  ~PipelineRunner();

  const std::string& id() const override { return id_; }
  bool failed() const override { return status() == PipelineStatus::kFailed; }
  const PipelineSpec& spec() const { return spec_; }
  PipelineStatus status() const { return status_.load(); }
  std::vector<const ComponentStats*> cards() const;
  // Queue depths for metrics: ("edge:<upstream>" | "output[i]", depth).
  std::vector<std::pair<std::string, size_t>> QueueDepths() const;

  // ---- wiring, before Start ----
  void SetInput(std::unique_ptr<Input> input, std::unique_ptr<ComponentStats> card);
  void SetUpstreamInbox(std::unique_ptr<Inbox> inbox, std::unique_ptr<ComponentStats> card);
  void AddTransform(std::unique_ptr<Transform> t, std::unique_ptr<ComponentStats> card);
  // Runs the chain one message at a time: set when two transforms of the
  // chain share a bucket and one writes it, so that a message sees exactly
  // the state the messages before it left, whatever the batch size.
  void SetPerMessage(bool on) { per_message_ = on; }
  // Under checkpointing: marks what enters the transforms in the file at
  // `path`, so that a message the process dies on three times in a row is
  // set aside (engine/crash_guard.h). Opened on the pipeline thread.
  void SetCrashGuard(std::string path) { crash_path_ = std::move(path); }
  void AddOutput(std::unique_ptr<OutputRunner> out, std::unique_ptr<ComponentStats> card);
  // Output `k` is the pipeline's dead-letter output: it gets no batch the
  // chain emits, only what was set aside (a message a transform failed on,
  // or one the process died on), one envelope a message.
  // Also what the input cannot decode and what the other outputs refuse one
  // at a time go there.
  void SetDeadLetter(size_t k);
  // Batches this pipeline emits go also to `lane` of `inbox`.
  void AddDownstream(Inbox* inbox, size_t lane) { downstream_.push_back({inbox, lane}); }
  Inbox* upstream_inbox() { return inbox_.get(); }
  // After the wiring, before Start: every queue, buffer and state of the
  // pipeline is charged to `budget`, and its input waits while the budget
  // is exceeded (a source pipeline's; a downstream one drains).
  void SetMemory(MemoryBudget* budget);
  // Bytes charged to each component of the pipeline now, by card name
  // (empty without a budget).
  std::map<std::string, int64_t> MemoryUse() const;
  // The input is waiting for the memory budget now.
  bool memory_paused() const { return memory_paused_flag_.load(std::memory_order_relaxed); }
  bool is_source() const { return inbox_ == nullptr; }
  Input* input() { return input_.get(); }
  Transform* transform(size_t i) { return transforms_[i].get(); }
  OutputRunner* output(size_t i) { return outputs_[i].get(); }

  // Under checkpointing: barriers snapshot this pipeline into `cp` for
  // `region`; `buckets` are the buckets its transforms write.
  void SetCheckpointing(Checkpointer* cp, size_t region, std::vector<Bucket*> buckets);
  // Before Start: transform `i` was restored whole from a committed chain
  // of `base` and `deltas` bytes (the checkpoint at start may refer to it).
  void TransformRestored(size_t i, uint64_t base, uint64_t deltas) {
    restored_[i] = Chain{base, deltas};
  }
  // Asks a source pipeline to take barrier `id` between two batches; with
  // `stop_after` it reads nothing more after it (a savepoint).
  void RequestBarrier(uint64_t id, bool stop_after) override;
  // The pipeline's units (input position, stateful transforms) as they are
  // now. Called on the pipeline thread at a barrier, or before Start.
  // `id` is the barrier (0: the checkpoint at start).
  std::vector<checkpoint::UnitState> CollectUnits(uint64_t id);
  // The input's position in `units` (a checkpoint of its region that
  // committed), if they hold one.
  bool CommittedPosition(const std::vector<checkpoint::UnitState>& units,
                         std::string* position) const override;
  // Tells the input a checkpoint holding `position` committed. Called on
  // the acknowledgement thread (checkpoint/acknowledger.h).
  void InputCommitted(std::string_view position) override;
  uint64_t MessagesRead() const override { return input_card_ ? input_card_->in() : 0; }
  bool CaughtUp() const override { return caught_up_.load(std::memory_order_relaxed); }
  size_t region() const { return region_; }
  const std::vector<Bucket*>& written_buckets() const { return written_buckets_; }

  void Start();
  // Graceful stop of a source pipeline: stop reading, drain what transforms
  // hold, send kEnd downstream and to the outputs. Downstream pipelines stop
  // when every upstream lane has ended.
  void RequestStop();
  void Join();
  // Releases threads blocked on full queues; used when a graceful stop is
  // abandoned.
  void Abort();

 private:
  void Run();
  void RunChain(Batch batch, size_t first);
  // Runs transforms [first, end) over `batch` in place; false if one failed
  // (the batch is dropped, the card says why).
  bool RunTransforms(Batch* batch, size_t first);
  // The chain one message at a time from `first` into `out`, each marked
  // while careful.
  void RunOneByOne(Batch* batch, size_t first, Batch* out);
  // How many messages from the input a restart now would bring again before
  // the ones about to enter (where the next start is careful, should this
  // one die).
  uint64_t Replay() const { return processed_ - replay_base_; }
  void RunBatch(Batch batch, size_t first);
  void OpenCrashGuard();
  void SetAsideMessage(const Message& m, size_t first);
  void Emit(Batch batch);
  // Sends `rejected` (set aside by the input, a transform or the crash
  // guard) to the dead-letter output, one envelope each, and counts them on
  // `card`, the component's.
  void DeadLetter(std::vector<Rejected>* rejected, ComponentStats* card);
  void TickTransforms(int64_t now_ms);
  bool ReadSource(Batch* batch);
  bool ReadUpstream(Batch* batch, bool* all_ended);
  void SleepUnlessStopped(int64_t ms);
  // Whether the input waits for the memory budget now (then it waited a
  // little, or until a barrier or a stop was asked for).
  bool HeldByMemory();
  void PublishMemory();
  void DoBarrier(uint64_t id);
  void OnUpstreamBarrier(size_t lane, uint64_t id);

  const std::string id_;
  const PipelineSpec spec_;
  const Clock* clock_;
  // Before the components and the inbox that charge them.
  MemoryBudget* memory_ = nullptr;
  std::unique_ptr<MemoryAccount> input_memory_;
  std::vector<std::unique_ptr<MemoryAccount>> transform_memory_;
  bool memory_paused_ = false;  // pipeline thread only
  std::atomic<bool> memory_paused_flag_{false};
  // The input's lag was 0 after it read a message (CaughtUp); set on the
  // pipeline thread at a tick, never cleared.
  std::atomic<bool> caught_up_{false};
  int64_t memory_logged_ms_ = 0;  // pipeline thread only: the last pause logged
  std::unique_ptr<Input> input_;
  std::unique_ptr<Inbox> inbox_;
  std::vector<bool> lane_ended_;
  std::vector<std::unique_ptr<Transform>> transforms_;
  std::vector<std::unique_ptr<OutputRunner>> outputs_;
  int dead_letter_ = -1;                 // index in outputs_, -1: none
  std::vector<Rejected> rejected_;       // pipeline thread only: what the transforms set aside
  std::vector<Rejected> input_refused_;  // pipeline thread only: what the input could not decode
  std::vector<std::unique_ptr<ComponentStats>> cards_;  // input, transforms..., outputs...
  ComponentStats* input_card_ = nullptr;
  std::vector<ComponentStats*> transform_cards_;
  struct Edge {
    Inbox* inbox;
    size_t lane;
  };
  std::vector<Edge> downstream_;

  Checkpointer* checkpointer_ = nullptr;
  size_t region_ = 0;
  std::vector<Bucket*> written_buckets_;
  std::vector<bool> saved_once_;          // per transform, pipeline thread only
  // Per transform, pipeline thread only: the bytes of its last full state
  // and of the deltas saved after it (a full save once they reach half).
  struct Chain {
    uint64_t base = 0;
    uint64_t deltas = 0;
  };
  std::vector<Chain> chains_;
  std::map<size_t, Chain> restored_;  // TransformRestored, read by the first CollectUnits
  std::atomic<uint64_t> requested_barrier_{0};
  std::atomic<uint64_t> stop_after_barrier_{0};
  uint64_t done_barrier_ = 0;             // pipeline thread only
  std::vector<uint64_t> lane_barrier_;    // newest barrier seen per lane; pipeline thread only
  uint64_t aligning_ = 0;                 // the barrier being aligned; pipeline thread only

  std::atomic<PipelineStatus> status_{PipelineStatus::kStarting};
  std::atomic<bool> stop_{false};
  Mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool input_done_ = false;       // pipeline thread only
  bool per_message_ = false;
  bool past_savepoint_ = false;  // pipeline thread only: no timer releases after it
  int64_t backoff_ms_ = 0;        // pipeline thread only
  int64_t last_tick_ms_ = 0;      // pipeline thread only
  std::string crash_path_;
  CrashGuard guard_;              // pipeline thread only
  uint32_t death_stage_ = 0;      // the transform the last process died in
  // Messages from the input that entered the transforms since the start
  // (what a timer releases from a transform is not counted or marked: it
  // does not come again in the same order), and how many had
  // at the newest barrier known committed: a restart replays from there.
  uint64_t processed_ = 0;        // pipeline thread only
  uint64_t replay_base_ = 0;      // pipeline thread only
  std::deque<std::pair<uint64_t, uint64_t>> barrier_counts_;  // (barrier, processed_ at it)
  std::thread thread_;
};

struct EngineOptions {
  const Clock* clock = SystemClock::Get();
  bool checkpointing = false;
  std::string state_dir;  // with checkpointing: where http inputs keep their logs
  // With checkpointing: where checkpoints go, what was recovered, and when.
  checkpoint::Store* store = nullptr;
  // Restored units; two-phase outputs may make a region fall back (Store::FallBack).
  std::map<std::string, checkpoint::RestoredUnit>* restored = nullptr;
  int64_t checkpoint_interval_ms = defaults::kCheckpointIntervalSecs * 1000;
  int64_t checkpoint_timeout_ms = defaults::kCheckpointTimeoutSecs * 1000;
  // How long a graceful stop (or a graph change) waits for its savepoint.
  int64_t stop_timeout_ms = defaults::kStopTimeoutSecs * 1000;
  size_t edge_queue_batches = defaults::kEdgeQueueBatches;      // per edge lane
  size_t output_queue_batches = defaults::kOutputQueueBatches;  // in front of each output
  // Where http inputs register their paths; the engine's own when null. A
  // server that rebuilds its engine keeps one router for the listener.
  IngestRouter* ingest = nullptr;
  // The server's memory budget (common/memory_budget.h); null: none kept.
  MemoryBudget* memory = nullptr;
  // With `cluster:` in the server config (docs/cluster.md): the graph runs
  // on several servers, and each kafka input's region keeps its state in
  // shards that follow the input's partitions. Needs checkpointing.
  std::optional<cluster::ClusterConfig> cluster;
};

// The member's name for components of a cluster that own no partitions
// (outputs, and every component of a graph only checked).
class MemberOnly final : public PartitionOwner {
 public:
  explicit MemberOnly(const cluster::ClusterConfig& c)
      : member_(c.member), partitioner_(cluster::ProducerPartitioner(c.partitioner)) {}
  const std::string& member() const override { return member_; }
  const char* producer_partitioner() const override { return partitioner_; }
  Status Assign(std::vector<Assigned>* parts) override {
    (void)parts;
    return Status::Internal("only a kafka input's pipeline owns partitions");
  }

 private:
  std::string member_;
  const char* partitioner_;
};

// Builds every component of `spec` once, without starting anything, and
// records their semantic errors (bad expressions, bad option values). Used by
// `kayak check` and before a server starts. Safe on a spec with load errors.
// `checkpointing`: whether the server runs with a state directory (`kayak
// check` cannot know, and assumes one). `cluster`: the graph is to run in
// that cluster, whose rules (docs/cluster.md) it is held to as well.
void ValidateComponents(const GraphSpec& spec, ErrorList* errors, bool checkpointing = true,
                        const cluster::ClusterConfig* cluster = nullptr);

// The cluster's rules on the graph as a whole, from its spec: only a
// pipeline that reads a partitioned input writes buckets, and a region reads
// one partitioned input and no other source.
void ValidateClusterGraph(const GraphSpec& spec, ErrorList* errors);

// Pipelines joined by an edge or by a bucket they share form a region: they
// are checkpointed together, and a graph change stops and rebuilds whole
// regions. For each pipeline of `spec`, the index of the first pipeline of
// its region.
std::vector<size_t> GroupIntoRegions(const GraphSpec& spec);

// One region of a graph as a graph of its own: its pipelines (upstreams
// first) and the buckets they use. Buckets no pipeline uses form one more
// part without pipelines.
struct RegionSpec {
  std::string name;  // its smallest pipeline id; "" for the unused buckets
  // The config text of its pipelines and buckets: equal keys, same region.
  std::string key;
  std::set<std::string> bucket_names;
  GraphSpec spec;
};
std::vector<RegionSpec> SplitIntoRegions(const GraphSpec& spec);
// The checkpoint unit of output `k` of `p` (its dead-letter output's own).
std::string OutputUnitOf(const PipelineSpec& p, size_t k);

class Engine {
 public:
  // Builds every component. Component errors (a bad expression, a bad option
  // value) are added to `errors` with their place in the file; then nullptr.
  // State that cannot be restored (a checkpoint to fall back to that cannot
  // be read) sets `*fatal`, if given, and returns nullptr.
  static std::unique_ptr<Engine> Build(const GraphSpec& spec, const ComponentRegistry& registry,
                                       const EngineOptions& options, ErrorList* errors,
                                       Status* fatal = nullptr);
  ~Engine();

  void Start();
  // Graceful stop: sources stop reading, in-flight batches drain to the
  // outputs, every thread is joined. With checkpointing, a savepoint first;
  // a region that does not commit it within options.stop_timeout_ms (an
  // output stuck retrying, say) is aborted instead: its in-flight batches are
  // dropped and the next start replays them from its last committed
  // checkpoint. Returns those regions (empty: a clean stop).
  std::vector<Checkpointer::Missed> Stop();

  const std::vector<std::unique_ptr<PipelineRunner>>& pipelines() const { return pipelines_; }
  PipelineRunner* Find(const std::string& id) const;
  BucketRegistry& buckets() { return buckets_; }
  // The paths http inputs serve; the listener looks requests up here.
  IngestRouter* ingest() { return options_.ingest != nullptr ? options_.ingest : &ingest_; }
  const Clock* clock() const { return options_.clock; }
  int64_t checkpoint_interval_ms() const { return options_.checkpoint_interval_ms; }
  // nullptr without a state directory.
  Checkpointer* checkpointer() { return checkpointer_.get(); }

 private:
  explicit Engine(EngineOptions options) : options_(options) {}
  Status SetUpCheckpointing(const GraphSpec& spec);
  // In a cluster: each region's shard agent learns its region and buckets,
  // and the region's checkpoints prepare and publish its shards; `agents`
  // gets each region's agent with the region's place in `regions`.
  Status BindShards(std::vector<Checkpointer::Region>* regions,
                    std::vector<std::pair<size_t, cluster::ShardAgent*>>* agents);
  // Before restoring: asks each two-phase output whether the checkpoint it
  // is about to restore was committed to it, and makes the region restore
  // the one before where it was not.
  Status ConfirmTwoPhaseCommits(const GraphSpec& spec);
  Status CommitInitialCheckpoint();

  EngineOptions options_;
  IngestRouter ingest_;  // before the pipelines: their inputs unregister from it
  // In a cluster, one per pipeline reading kafka: before the pipelines,
  // whose inputs call them, and the coordinator, which does.
  std::map<const PipelineRunner*, std::unique_ptr<cluster::ShardAgent>> shard_agents_;
  std::unique_ptr<MemberOnly> member_only_;
  PartitionOwner* ClusterMember() {
    if (!member_only_) member_only_ = std::make_unique<MemberOnly>(*options_.cluster);
    return member_only_.get();
  }
  std::vector<std::unique_ptr<MemoryAccount>> bucket_memory_;  // before the buckets it counts
  BucketRegistry buckets_;
  std::vector<std::unique_ptr<PipelineRunner>> pipelines_;  // upstreams first
  std::unique_ptr<Checkpointer> checkpointer_;
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace kayak
