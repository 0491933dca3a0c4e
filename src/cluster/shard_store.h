// The cluster's shared checkpoint store: one directory per shard, in a
// directory every server of the cluster mounts or in an S3 bucket (Blobs;
// docs/decisions/0005, docs/state_format.md "Cluster shards").
//
//   ROOT/<region>/<topic>.<partition>/LOG-<seq:20>.kys
//   ROOT/<region>/<topic>.<partition>/chunk-<epoch:20>-<checkpoint:20>-<unit>.kyc
//
// A shard is (region, input partition). Its manifests form a log: entry
// <seq> names, for each unit of the region, the chunk of the shard's slice
// of that unit's state, and the partition's next offset, so state and
// position are committed together. An entry is put in place on the next
// free sequence number only if nothing is there (Blobs::WriteNew: link(2),
// or S3's conditional PUT), which fails if another writer took it first:
// every writer sees one order of commits.
//
// Fencing. An entry's epoch is the consumer-group generation at which its
// writer was given the partition. An entry counts only when no entry before
// it in the log has a higher epoch; a writer that finds a higher epoch in the
// log refuses to commit (kFenced). So once a new owner has claimed the shard
// (Claim: an entry at its epoch restating the newest one), an old owner that
// comes back, paused past its session timeout, can no longer commit to it,
// and a commit it made before the claim is what the claim restates.
//
// Thread-safety: none of its own; the files are what several processes
// share, and every method may run beside another server's.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/blobs.h"
#include "kayak/status.h"

namespace kayak::cluster {

struct ShardId {
  std::string region;
  std::string topic;
  int32_t partition = 0;
  // "<region>/<topic>.<partition>"
  std::string Path() const;
};

// A shard's slice of one unit's state.
struct ShardUnit {
  std::string chunk;  // the file's name in the shard's directory
  uint64_t bytes = 0;
  uint32_t crc = 0;
};

struct ShardManifest {
  uint64_t epoch = 0;
  uint64_t checkpoint = 0;
  std::string owner;        // the server that wrote it (its cluster member name)
  int64_t next_offset = 0;  // the partition's next offset to read
  int64_t created_ms = 0;
  // A claim's entry: it restates the newest checkpoint (of another owner,
  // numbered as that owner numbers them) at the claimer's epoch.
  bool claim = false;
  std::map<std::string, ShardUnit> units;
  // With two-phase outputs (exactly_once kafka): each output unit's state
  // at the checkpoint, naming the commit that makes the entry's outputs
  // visible. The entry is published before that commit, so it counts for a
  // claim only once the commit is seen (ShardStore::Usable). Empty on a
  // claim: the claimer decided.
  std::map<std::string, std::string> outputs;
};

enum class CommitOutcome { kCommitted, kFenced };

class ShardStore {
 public:
  // Whether an entry with outputs may be restored: its outputs' commit took
  // place. Null: every entry may.
  using Usable = std::function<bool(const ShardManifest&)>;

  // `root` is the cluster's directory in the shared store; made on first use.
  explicit ShardStore(std::string root);
  // The cluster's shards under `prefix` ("" or "<name>") in `blobs`.
  ShardStore(std::shared_ptr<Blobs> blobs, std::string prefix);

  // Writes (and fsyncs) one unit's slice for the shard's checkpoint
  // `checkpoint` at `epoch`; what a manifest names it by.
  Result<ShardUnit> WriteChunk(const ShardId& shard, uint64_t epoch, uint64_t checkpoint,
                               std::string_view unit, std::string_view state);
  // A unit's slice, checked against its manifest's length and CRC.
  Result<std::string> ReadChunk(const ShardId& shard, const ShardUnit& unit) const;

  // Commits `m` (its chunks written first) as the log's next entry. kFenced
  // when the log holds an entry of a higher epoch, or another of this epoch
  // and checkpoint already; then nothing is written. The same entry already
  // there (a try before whose answer was lost) is kCommitted.
  Result<CommitOutcome> Commit(const ShardId& shard, const ShardManifest& m);

  // Takes over the shard at `epoch`: commits an entry restating the newest
  // one (or an empty one at `next_offset` when there is none) at `epoch`, so
  // every writer of an older epoch is fenced from now on. `*claimed` gets
  // what the new owner restores from. kFenced when the log already holds an
  // entry of `epoch` or a higher one.
  Result<CommitOutcome> Claim(const ShardId& shard, uint64_t epoch, const std::string& owner,
                              int64_t next_offset, ShardManifest* claimed);

  // Claim at the epoch one above the highest the log holds (1 on an empty
  // log), decided on the same reading of the log as the claim itself: the
  // newest assignment of a partition always wins its shard. `*epoch` gets
  // the epoch taken.
  // The entry restated is the newest that `usable` accepts; those after it
  // are passed over.
  Result<CommitOutcome> ClaimNext(const ShardId& shard, const std::string& owner,
                                  int64_t next_offset, ShardManifest* claimed, uint64_t* epoch,
                                  const Usable& usable = nullptr);

  // The shard's newest entry that counts (the last of the log whose epoch
  // no entry before it exceeds), or nullopt when it has none. An entry that
  // fails its checks (or names a chunk that is missing) is passed over, and
  // `*notes` (if given) says which and why.
  Result<std::optional<ShardManifest>> Newest(const ShardId& shard,
                                              std::vector<std::string>* notes = nullptr) const;

  // Keeps the log from the `keep`-th newest entry that counts (at least 1)
  // on, and the chunks those entries name; removes what is older.
  Status Prune(const ShardId& shard, size_t keep);

  // The names that can make a path: letters, digits, '.', '_' and '-', not
  // "." or ".." (Kafka's own rule for topic names).
  static bool SafeName(std::string_view name);

 private:
  // Claim at `epoch`, or (`epoch` == 0) at one above the log's highest.
  Result<CommitOutcome> ClaimAt(const ShardId& shard, uint64_t epoch, const std::string& owner,
                                int64_t next_offset, ShardManifest* claimed,
                                const Usable& usable);
  // One log entry as read: `m` is set when it passed its checks.
  struct Entry {
    uint64_t seq = 0;
    std::string file;
    std::optional<ShardManifest> m;
    bool counts = false;  // no readable entry before it has a higher epoch
    std::string why;      // why it was passed over
  };
  Result<std::string> DirOf(const ShardId& shard) const;
  // The shard's log, oldest first, each entry read and judged.
  Result<std::vector<Entry>> ReadLog(const ShardId& shard, const std::string& dir) const;
  // Appends what `make` makes of the log as it is (nullopt: fenced) as the
  // log's next entry; when another writer takes that number first, reads
  // the log again and asks again.
  Result<CommitOutcome> Append(
      const ShardId& shard, const std::string& dir,
      const std::function<std::optional<ShardManifest>(std::vector<Entry>*)>& make);
  // The last entry of `log` that counts and whose chunks are all there;
  // `*notes` gets each later one passed over, and why.
  const Entry* NewestOf(const std::string& dir, std::vector<Entry>* log,
                        std::vector<std::string>* notes, const Usable& usable = nullptr) const;

  std::shared_ptr<Blobs> blobs_;
  std::string prefix_;  // the shards' directory in `blobs_`
};

}  // namespace kayak::cluster
