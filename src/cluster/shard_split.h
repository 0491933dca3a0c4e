// Moving keyed state between servers with its partitions.
//
// In a cluster a keyed state's key is the key its input's producers
// partition by, so each entry belongs to one input partition: the shard
// (region, partition) that holds it. When a partition changes owner, the old
// owner writes the shard's slice of the state and the new owner folds it into
// its own. Both work on a unit's full chunk (docs/state_format.md) without
// parsing a value or a point: a shard's slice is itself a full chunk.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/partitioner.h"
#include "kayak/status.h"

namespace kayak::cluster {

// The full chunks that split by key: a bucket's, a rolling_window's (whose
// count of late points goes with partition 0's slice, and whose slices'
// counts add up when merged), and a buffer's, whose held messages split by
// their Kafka keys (each slice keeps the time the oldest held message
// arrived; merged, the earliest of the slices that hold any).
enum class KeyedState { kBucket, kRollingWindow, kBuffer };

// (*shards)[p], for every p < `partitions`, becomes the full chunk of the
// entries of `full` whose key `partitioner` puts in partition p, in `full`'s
// order (least recently written first). Corruption when `full` is
// malformed; Invalid when `partitions` < 1.
Status SplitStateChunk(KeyedState kind, std::string_view full, Partitioner partitioner,
                       int32_t partitions, std::vector<std::string>* shards);

// The full chunk holding every entry of `shards` (full chunks of disjoint
// sets of keys), least recently written first: entries are interleaved by
// their last write, each shard's own order kept (the earlier shard first on
// a tie). Corruption when a chunk is malformed or a key is in two of them:
// a key lives in one shard only. A buffer's messages are kept in each
// shard's order, the shards one after the other.
Status MergeStateChunks(KeyedState kind, const std::vector<std::string_view>& shards,
                        std::string* out);

}  // namespace kayak::cluster
