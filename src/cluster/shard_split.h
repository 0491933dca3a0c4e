// Moving a bucket's entries between servers with their partitions.
//
// In a cluster a bucket's key is the key its input's producers partition by,
// so each entry belongs to one input partition: the shard (region, partition)
// that holds it. When a partition changes owner, the old owner writes the
// shard's slice of the bucket and the new owner folds it into its own. Both
// work on the bucket's full chunk (docs/state_format.md, "bucket"), without
// parsing a value: a shard's slice is itself a full chunk.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/partitioner.h"
#include "kayak/status.h"

namespace kayak::cluster {

// (*shards)[p], for every p < `partitions`, becomes the full chunk of the
// entries of `full` whose key `partitioner` puts in partition p, in `full`'s
// order (least recently written first). Corruption when `full` is
// malformed; Invalid when `partitions` < 1.
Status SplitBucketChunk(std::string_view full, Partitioner partitioner, int32_t partitions,
                        std::vector<std::string>* shards);

// The full chunk holding every entry of `shards` (full chunks of disjoint
// sets of keys), least recently written first: entries are interleaved by
// their last write, each shard's own order kept (the earlier shard first on
// a tie). Corruption when a chunk is malformed or a key is in two of them:
// a key lives in one shard only.
Status MergeBucketChunks(const std::vector<std::string_view>& shards, std::string* out);

}  // namespace kayak::cluster
