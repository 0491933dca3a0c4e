#include "cluster/shard_split.h"

#include <absl/container/flat_hash_set.h>

#include "common/format.h"
#include "cluster/partitioner.h"

namespace kayak::cluster {
namespace {

using checkpoint::Decoder;
using checkpoint::Encoder;

// One entry of a bucket's full chunk, in place.
struct EntryView {
  std::string_view key;
  int64_t last_write_ms = 0;
  std::string_view value;
};

// Reads a full chunk's entry count, then its entries one at a time.
class EntryReader {
 public:
  explicit EntryReader(std::string_view chunk) : d_(chunk), size_(chunk.size()) {}
  Status Start() {
    // An entry takes at least 24 bytes: two lengths and a time.
    if (!d_.U64(&left_) || left_ > size_ / 24) return Status::Corruption("bucket chunk is short");
    return Status::Ok();
  }
  uint64_t count() const { return left_; }
  // False at the end; Corruption on a malformed entry.
  Result<bool> Next(EntryView* e) {
    if (left_ == 0) {
      if (!d_.done()) return Status::Corruption("bucket chunk has trailing bytes");
      return false;
    }
    --left_;
    if (!d_.View(&e->key) || !d_.I64(&e->last_write_ms) || !d_.View(&e->value)) {
      return Status::Corruption("bucket chunk is short");
    }
    return true;
  }

 private:
  Decoder d_;
  size_t size_;
  uint64_t left_ = 0;
};

void Put(const EntryView& e, Encoder* out) {
  out->Str(e.key);
  out->I64(e.last_write_ms);
  out->Str(e.value);
}

}  // namespace

Status SplitBucketChunk(std::string_view full, Partitioner partitioner, int32_t partitions,
                        std::vector<std::string>* shards) {
  if (partitions < 1) return Status::Invalid("a topic has at least one partition");
  EntryReader reader(full);
  KAYAK_RETURN_IF_ERROR(reader.Start());
  std::vector<Encoder> out(static_cast<size_t>(partitions));
  std::vector<uint64_t> counts(out.size(), 0);
  for (Encoder& e : out) e.U64(0);  // the count, patched at the end
  EntryView e;
  for (;;) {
    auto more = reader.Next(&e);
    if (!more.ok()) return more.status();
    if (!*more) break;
    const auto p = static_cast<size_t>(PartitionOf(partitioner, e.key, partitions));
    Put(e, &out[p]);
    ++counts[p];
  }
  shards->assign(out.size(), std::string());
  for (size_t p = 0; p < out.size(); ++p) {
    out[p].PatchU64(0, counts[p]);
    out[p].AppendTo(&(*shards)[p]);
  }
  return Status::Ok();
}

Status MergeBucketChunks(const std::vector<std::string_view>& shards, std::string* out) {
  std::vector<EntryReader> readers;
  readers.reserve(shards.size());
  uint64_t total = 0;
  for (std::string_view s : shards) {
    readers.emplace_back(s);
    KAYAK_RETURN_IF_ERROR(readers.back().Start());
    total += readers.back().count();
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
  e.U64(total);
  for (uint64_t written = 0; written < total; ++written) {
    size_t pick = shards.size();
    for (size_t i = 0; i < shards.size(); ++i) {
      if (live[i] && (pick == shards.size() || heads[i].last_write_ms < heads[pick].last_write_ms)) {
        pick = i;
      }
    }
    if (pick == shards.size()) return Status::Corruption("bucket chunk is short");
    if (!seen.insert(heads[pick].key).second) {
      return Status::Corruption("key '" + std::string(heads[pick].key) +
                                "' is in two shards' chunks");
    }
    Put(heads[pick], &e);
    auto more = readers[pick].Next(&heads[pick]);
    if (!more.ok()) return more.status();
    live[pick] = *more;
  }
  e.AppendTo(out);
  return Status::Ok();
}

}  // namespace kayak::cluster
