// One region's shards on one member of a cluster (docs/cluster.md).
//
// The region's kafka input tells the agent of every assignment (on the
// input's thread). For each partition given, the agent either keeps what
// the server holds (its own shard, current: it is the newest owner in the
// store and the input still has a position for it), or claims the shard at
// a new epoch and folds the shard's newest checkpoint into the region's
// buckets, replacing what they held for that partition, and tells the input
// the offset that checkpoint stops at. A partition no longer given loses its
// keys.
//
// After each checkpoint of the region commits locally, Prepare (on the
// coordinator's thread) cuts the buckets' state as that checkpoint holds it
// into one slice per owned shard; Publish (once the checkpoint is final)
// writes each slice with the partition's offset in the same checkpoint as
// the shard's next entry. With two-phase outputs (exactly_once kafka) the
// entries are written before the outputs commit (PublishBeforeCommit) and
// name that commit; a claim restores the newest entry whose commit took
// place. A shard whose log shows a newer owner is dropped: this server is a
// zombie for it and writes nothing more to it (and, with two-phase outputs,
// commits nothing more).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cluster/partitioner.h"
#include "cluster/shard_store.h"
#include "kayak/component.h"
#include "kayak/thread_annotations.h"

namespace kayak {
class Bucket;
}

namespace kayak::cluster {

class Membership;

struct ClusterConfig {
  std::string name;    // the cluster's directory under `store`
  std::string member;  // this server
  std::string store;   // the shared directory, or s3://bucket/prefix (for messages)
  Partitioner partitioner = Partitioner::kCrc32;
  // Where agents say what they own (the member file); may be null.
  Membership* membership = nullptr;
  // The store itself; null: the directory `store`.
  std::shared_ptr<Blobs> blobs;
  // Called once when a region's exactly-once outputs are fenced from a
  // shard (another member claimed it): with the region's name, a pipeline
  // id, so the server restarts the region. From the acknowledgement thread;
  // must not wait for the region.
  std::function<void(const std::string& region)> on_fenced;
};

class ShardAgent final : public PartitionOwner {
 public:
  // `card`: the input's, for errors a user must see; may be null.
  ShardAgent(const ClusterConfig& config, ComponentStats* card, const Clock* clock);
  ~ShardAgent() override;
  ShardAgent(const ShardAgent&) = delete;
  ShardAgent& operator=(const ShardAgent&) = delete;

  // Before the input runs: the region (its name, the buckets it writes,
  // and the transforms of the input's pipeline whose state is keyed by
  // partition, each with its checkpoint unit). Then the agent is in the
  // member file.
  void Bind(std::string region, std::vector<Bucket*> buckets,
            std::vector<std::pair<std::string, Transform*>> transforms = {});

  const std::string& member() const override { return config_.member; }
  const char* producer_partitioner() const override {
    return ProducerPartitioner(config_.partitioner);
  }
  Status Assign(std::vector<Assigned>* parts) override;
  void Progress(const std::string& topic, int32_t partition, int64_t next, int64_t lag) override;
  bool HandOver() override;
  bool HandedOver() override;
  bool StateHeld() const override { return state_held_.load(); }
  void Fenced() override;

  // How the agent asks its region for a checkpoint now, for a hand-over:
  // returns the id of the newest checkpoint the region began before the
  // call (any later one covers everything the input read until then). Set
  // before the input runs; without it a revoked partition is let go at
  // once and its next owner replays from the last published checkpoint.
  using CheckpointRequest = std::function<uint64_t()>;
  void SetCheckpointRequest(CheckpointRequest request) { request_checkpoint_ = std::move(request); }

  // With two-phase outputs: whether the commit the output states of an
  // entry name (output unit -> state) took place. Set before the input
  // runs; asked on the input's thread when a shard is claimed.
  using CommitCheck = std::function<bool(const std::map<std::string, std::string>& outputs)>;
  void SetCommitCheck(CommitCheck check) { commit_check_ = std::move(check); }

  // The full chunk of a unit (a bucket's, a transform's) as checkpoint
  // `id` committed it.
  using FullChunk = std::function<Status(const std::string& unit, std::string* full)>;
  // Right after checkpoint `id` of the region committed to the local store,
  // before the next one: each owned shard's slice and offset in it
  // (`position`: the kafka input's, docs/state_format.md), kept until
  // published. A shard whose offset did not move since it was last
  // published is left out. `outputs`: the two-phase outputs' states in the
  // checkpoint (output unit -> state), empty when the region has none.
  Status Prepare(uint64_t id, const std::string& position,
                 const std::map<std::string, std::string>& outputs, const FullChunk& full_of);
  // With two-phase outputs: checkpoint `id` is durable and its outputs have
  // not committed it yet. Its prepared slices go to the store, each entry
  // naming the outputs' commit, so the commit is made only once every
  // shard it covers can be restored to match it. Unavailable: some were
  // not written (try again; the outputs must wait). Invalid: a shard was
  // claimed by another member, or moved away unpublished; the outputs must
  // never commit `id` (nor any later checkpoint: the region has to restart).
  Status PublishBeforeCommit(uint64_t id);
  // Checkpoint `id` is final (its two-phase outputs committed it): its
  // prepared slices, if not published yet, go to the store. Earlier
  // prepared checkpoints are dropped (`id` covers them).
  void Publish(uint64_t id);

  // What the member file says of the region (Membership).
  struct Shard {
    int32_t partition = 0;
    uint64_t epoch = 0;
    int64_t next = -1;  // the input's next offset (< 0: not reported yet)
    int64_t lag = -1;   // messages behind the partition's end (< 0: not known)
  };
  struct Description {
    std::string region;
    std::vector<std::string> buckets;
    std::string topic;
    int32_t partitions = 0;
    std::vector<Shard> owned;
  };
  Description Describe() const;

 private:
  struct Holding {
    uint64_t epoch = 0;
    int32_t partitions = 0;
    int64_t published_offset = -1;  // the offset of the newest entry written by this server
    // Another member claimed it (a publication was fenced): nothing more is
    // published; its keys go at the next assignment, or are restored from
    // the new owner's if the partition is given back.
    bool lost = false;
    // The newest entry written (or restored) may hold a buffer's messages,
    // which the buffer can release with no new input: the shard is
    // published at the next checkpoint even if its offset did not move.
    bool held_messages = false;
    int64_t next = -1;  // the input's progress (Progress)
    int64_t lag = -1;
  };
  struct Slice {
    ShardId shard;
    uint64_t epoch = 0;
    int64_t offset = 0;
    std::map<std::string, std::string> units;  // unit -> its slice (a full chunk)
    std::map<std::string, std::string> outputs;  // the two-phase outputs' states
    bool held_messages = false;  // a buffer's slice of it holds messages
  };
  ShardId IdOf(const std::string& topic, int32_t partition) const;
  // Checkpoint `id`'s prepared slices into the store. Before a commit
  // (PublishBeforeCommit), a slice not written stays prepared, and a shard
  // claimed or moved away fences the region's commits for good.
  Status PublishPrepared(uint64_t id, bool before_commit);
  // Whether an entry's outputs committed it (CommitCheck), remembered for
  // the states already asked about; true when nothing is to be checked.
  bool Committed(const ShardManifest& m, std::map<std::string, bool>* asked) const;
  void Error(const std::string& what) const;

  const ClusterConfig config_;
  ComponentStats* card_;
  const Clock* clock_;
  ShardStore store_;
  std::string region_;
  std::vector<Bucket*> buckets_;
  std::vector<std::pair<std::string, Transform*>> transforms_;
  bool holds_messages_ = false;  // one of transforms_ is a buffer (set by Bind)
  // Until the first successful Assign(), and from HandOver() to the next
  // one (both on the pipeline's thread): what a restart restored from the
  // local checkpoint may be of partitions that moved meanwhile.
  std::atomic<bool> state_held_{true};
  CheckpointRequest request_checkpoint_;
  CommitCheck commit_check_;

  mutable Mutex mu_;
  std::map<std::pair<std::string, int32_t>, Holding> owned_ KAYAK_GUARDED_BY(mu_);
  std::map<uint64_t, std::vector<Slice>> prepared_ KAYAK_GUARDED_BY(mu_);
  std::string topic_ KAYAK_GUARDED_BY(mu_);  // of the newest assignment
  int32_t partitions_ KAYAK_GUARDED_BY(mu_) = 0;
  // A hand-over waits for the publication of a checkpoint above this id.
  bool handing_over_ KAYAK_GUARDED_BY(mu_) = false;
  uint64_t handover_after_ KAYAK_GUARDED_BY(mu_) = 0;
  // A checkpoint that covered a shard this server no longer owns could not
  // be published before its outputs' commit: no later one may commit.
  std::string fenced_ KAYAK_GUARDED_BY(mu_);
  bool restart_asked_ KAYAK_GUARDED_BY(mu_) = false;  // on_fenced called
};

}  // namespace kayak::cluster
