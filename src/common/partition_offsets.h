// A partitioned input's position: the next offset to read of each
// (topic, partition), as the kafka input writes it in a checkpoint and as a
// cluster's shard agent reads it (docs/state_format.md):
//   {"offsets": [[topic, partition, next], ...]}
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>

namespace kayak {

using PartitionOffsets = std::map<std::pair<std::string, int32_t>, int64_t>;

std::string PartitionOffsetsToJson(const PartitionOffsets& offsets);

// Adds what `text` names to `out`; false when it is not such a position.
bool PartitionOffsetsFromJson(std::string_view text, PartitionOffsets* out);

}  // namespace kayak
