#include "cluster/shard_split.h"

#include <absl/container/flat_hash_set.h>

#include <functional>

#include "common/format.h"
#include "cluster/partitioner.h"

namespace kayak::cluster {
namespace {

using checkpoint::Decoder;
using checkpoint::Encoder;

// One entry of a full chunk, in place: its key, its last write, and all its
// bytes (the key included), copied as they are.
struct EntryView {
  std::string_view key;
  int64_t last_write_ms = 0;
  std::string_view bytes;
};

// Reads a full chunk's header, then its entries one at a time.
//   bucket:         U64 entries; per entry Str key, I64 last write, Str value
//   rolling_window: U64 keys, U64 late; per key Str key, I64 newest event
//                   time, I64 last write, U64 points, per point I64, F64
class EntryReader {
 public:
  EntryReader(KeyedState kind, std::string_view chunk) : kind_(kind), in_(chunk), d_(chunk) {}
  Status Start() {
    // An entry takes at least 24 bytes (bucket) or 32 (window).
    const size_t least = kind_ == KeyedState::kBucket ? 24 : 32;
    if (!d_.U64(&left_) || left_ > in_.size() / least) return Short();
    if (kind_ == KeyedState::kRollingWindow && !d_.U64(&late_)) return Short();
    return Status::Ok();
  }
  uint64_t count() const { return left_; }
  uint64_t late() const { return late_; }
  // False at the end; Corruption on a malformed entry.
  Result<bool> Next(EntryView* e) {
    if (left_ == 0) {
      if (!d_.done()) return Status::Corruption(std::string(Name()) + " chunk has trailing bytes");
      return false;
    }
    --left_;
    const size_t at = d_.pos();
    if (!d_.View(&e->key)) return Short();
    if (kind_ == KeyedState::kBucket) {
      std::string_view value;
      if (!d_.I64(&e->last_write_ms) || !d_.View(&value)) return Short();
    } else {
      int64_t newest = 0;
      uint64_t points = 0;
      if (!d_.I64(&newest) || !d_.I64(&e->last_write_ms) || !d_.U64(&points) ||
          points > in_.size() / 16 || !d_.Skip(points * 16)) {
        return Short();
      }
    }
    e->bytes = in_.substr(at, d_.pos() - at);
    return true;
  }

 private:
  const char* Name() const { return kind_ == KeyedState::kBucket ? "bucket" : "rolling_window"; }
  Status Short() const { return Status::Corruption(std::string(Name()) + " chunk is short"); }

  KeyedState kind_;
  std::string_view in_;
  Decoder d_;
  uint64_t left_ = 0;
  uint64_t late_ = 0;
};

// A buffer's full chunk: I64 when the oldest held message arrived, U64
// messages; per message Str payload, I64 time, Str key, U64 headers, per
// header Str name, Str value. Calls `each` with every message's key and
// bytes, in order.
Status EachHeld(std::string_view chunk, int64_t* first_ms,
                const std::function<void(std::string_view key, std::string_view bytes)>& each) {
  Decoder d(chunk);
  uint64_t n = 0;
  const auto shorter = [] { return Status::Corruption("buffer chunk is short"); };
  if (!d.I64(first_ms) || !d.U64(&n) || n > chunk.size() / 32) return shorter();
  for (uint64_t i = 0; i < n; ++i) {
    const size_t at = d.pos();
    std::string_view payload, key;
    int64_t ts = 0;
    uint64_t headers = 0;
    if (!d.View(&payload) || !d.I64(&ts) || !d.View(&key) || !d.U64(&headers) ||
        headers > chunk.size() / 16) {
      return shorter();
    }
    for (uint64_t h = 0; h < headers; ++h) {
      std::string_view name, value;
      if (!d.View(&name) || !d.View(&value)) return shorter();
    }
    each(key, chunk.substr(at, d.pos() - at));
  }
  if (!d.done()) return Status::Corruption("buffer chunk has trailing bytes");
  return Status::Ok();
}

Status SplitBuffer(std::string_view full, Partitioner partitioner, int32_t partitions,
                   std::vector<std::string>* shards) {
  std::vector<Encoder> out(static_cast<size_t>(partitions));
  std::vector<uint64_t> counts(out.size(), 0);
  int64_t first_ms = 0;
  std::vector<std::pair<size_t, std::string_view>> routed;
  KAYAK_RETURN_IF_ERROR(EachHeld(full, &first_ms, [&](std::string_view key, std::string_view b) {
    routed.emplace_back(static_cast<size_t>(PartitionOf(partitioner, key, partitions)), b);
  }));
  for (auto& e : out) {
    e.I64(first_ms);
    e.U64(0);
  }
  for (const auto& [p, bytes] : routed) {
    out[p].out().append(bytes);
    ++counts[p];
  }
  shards->assign(out.size(), std::string());
  for (size_t p = 0; p < out.size(); ++p) {
    out[p].PatchU64(8, counts[p]);
    out[p].AppendTo(&(*shards)[p]);
  }
  return Status::Ok();
}

Status MergeBuffers(const std::vector<std::string_view>& shards, std::string* out) {
  Encoder e;
  e.I64(0);
  e.U64(0);
  uint64_t total = 0;
  int64_t first = 0;
  for (std::string_view s : shards) {
    int64_t first_ms = 0;
    uint64_t n = 0;
    KAYAK_RETURN_IF_ERROR(EachHeld(s, &first_ms, [&](std::string_view, std::string_view b) {
      e.out().append(b);
      ++n;
    }));
    if (n > 0 && (total == 0 || first_ms < first)) first = first_ms;
    total += n;
  }
  e.PatchU64(0, static_cast<uint64_t>(first));
  e.PatchU64(8, total);
  e.AppendTo(out);
  return Status::Ok();
}

// A chunk's header: its count (patched once known) and a window's late.
void Header(KeyedState kind, uint64_t late, Encoder* e) {
  e->U64(0);
  if (kind == KeyedState::kRollingWindow) e->U64(late);
}

}  // namespace

Status SplitStateChunk(KeyedState kind, std::string_view full, Partitioner partitioner,
                       int32_t partitions, std::vector<std::string>* shards) {
  if (partitions < 1) return Status::Invalid("a topic has at least one partition");
  if (kind == KeyedState::kBuffer) return SplitBuffer(full, partitioner, partitions, shards);
  EntryReader reader(kind, full);
  KAYAK_RETURN_IF_ERROR(reader.Start());
  std::vector<Encoder> out(static_cast<size_t>(partitions));
  std::vector<uint64_t> counts(out.size(), 0);
  for (size_t p = 0; p < out.size(); ++p) Header(kind, p == 0 ? reader.late() : 0, &out[p]);
  EntryView e;
  for (;;) {
    auto more = reader.Next(&e);
    if (!more.ok()) return more.status();
    if (!*more) break;
    const auto p = static_cast<size_t>(PartitionOf(partitioner, e.key, partitions));
    out[p].out().append(e.bytes);
    ++counts[p];
  }
  shards->assign(out.size(), std::string());
  for (size_t p = 0; p < out.size(); ++p) {
    out[p].PatchU64(0, counts[p]);
    out[p].AppendTo(&(*shards)[p]);
  }
  return Status::Ok();
}

Status MergeStateChunks(KeyedState kind, const std::vector<std::string_view>& shards,
                        std::string* out) {
  if (kind == KeyedState::kBuffer) return MergeBuffers(shards, out);
  std::vector<EntryReader> readers;
  readers.reserve(shards.size());
  uint64_t total = 0;
  uint64_t late = 0;
  for (std::string_view s : shards) {
    readers.emplace_back(kind, s);
    KAYAK_RETURN_IF_ERROR(readers.back().Start());
    total += readers.back().count();
    late += readers.back().late();
  }
  // The head entry of each shard not yet written.
  std::vector<EntryView> heads(shards.size());
  std::vector<bool> live(shards.size(), false);
  for (size_t i = 0; i < shards.size(); ++i) {
    auto more = readers[i].Next(&heads[i]);
    if (!more.ok()) return more.status();
    live[i] = *more;
  }
  absl::flat_hash_set<std::string_view> seen;
  seen.reserve(total);
  Encoder e;
  Header(kind, late, &e);
  e.PatchU64(0, total);
  for (uint64_t written = 0; written < total; ++written) {
    size_t pick = shards.size();
    for (size_t i = 0; i < shards.size(); ++i) {
      if (live[i] && (pick == shards.size() || heads[i].last_write_ms < heads[pick].last_write_ms)) {
        pick = i;
      }
    }
    if (!seen.insert(heads[pick].key).second) {
      return Status::Corruption("key '" + std::string(heads[pick].key) +
                                "' is in two shards' chunks");
    }
    e.out().append(heads[pick].bytes);
    auto more = readers[pick].Next(&heads[pick]);
    if (!more.ok()) return more.status();
    live[pick] = *more;
  }
  e.AppendTo(out);
  return Status::Ok();
}

}  // namespace kayak::cluster
