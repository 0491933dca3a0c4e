// When a checkpoint writes a unit's changes as a delta on its chain, and
// when the whole state instead: the one rule, for buckets, windows and every
// other stateful transform (docs/state_format.md, "Delta chunks").
//
// A chain is a full chunk of `base` bytes and the deltas written on it since,
// `deltas` bytes in all. A delta of `delta` bytes goes on it while the deltas
// stay within a share of the full chunk: so a restore reads at most 1 + share
// times the state, and a compaction (which reads and writes the whole state)
// comes once the changes since the last one add up to that share. A unit the
// coordinator compacts off the pipeline's thread (a bucket, a window) may go
// to kCompactedShare; one the pipeline must save whole itself stops at half.
// At 0.5 a state whose keys all change every few seconds was compacted every
// second checkpoint, and compacting cost the coordinator more than
// everything else it did (docs/benchmarks.md), hence 1.0 where it can.
#pragma once

#include <cstdint>

namespace kayak::chain {

inline constexpr double kCompactedShare = 1.0;
inline constexpr double kSavedWholeShare = 0.5;

// Whether a delta of `delta` bytes goes on the chain; false with no full chunk
// to put it on.
inline bool DeltaFits(uint64_t base, uint64_t deltas, uint64_t delta, bool compacted) {
  if (base == 0) return false;
  const double share = compacted ? kCompactedShare : kSavedWholeShare;
  return static_cast<double>(deltas + delta) <= share * static_cast<double>(base);
}

}  // namespace kayak::chain
