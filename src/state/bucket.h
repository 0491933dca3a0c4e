// Buckets: named keyed state shared by pipelines (SPEC section 2).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kayak/memory.h"

#include <absl/container/flat_hash_set.h>

#include "common/json_util.h"
#include "state/arena.h"
#include "kayak/status.h"
#include "kayak/thread_annotations.h"

namespace kayak {

namespace checkpoint {
class Decoder;
}

// One bucket: key -> (JSON value, last write time). Entries not written for
// idle_timeout_ms are dropped. Thread-safe: every method takes the bucket's
// mutex, so pipelines bound to the same bucket may call it concurrently.
class Bucket {
 public:
  struct Entry {
    Json value;
    int64_t last_write_ms = 0;
  };

  Bucket(std::string name, int64_t idle_timeout_ms)
      : name_(std::move(name)), idle_timeout_ms_(idle_timeout_ms) {}

  const std::string& name() const { return name_; }
  int64_t idle_timeout_ms() const { return idle_timeout_ms_; }

  // At most `max_keys` live keys (0: no limit). A write of a new key past it
  // evicts the oldest write (`evict_oldest`) or is refused: not applied,
  // counted, and the message goes on. Before the first write.
  void SetKeyLimit(size_t max_keys, bool evict_oldest) {
    max_keys_ = max_keys;
    evict_oldest_ = evict_oldest;
  }
  size_t max_keys() const { return max_keys_; }
  // Before the first write: what the bucket holds (its table, entries, keys
  // and values, roughly) is kept in `account` from now on.
  void ChargeTo(MemoryAccount* account) { account_ = account; }
  // What the bucket holds now, as charged.
  size_t MemoryBytes() const;
  bool evicts_oldest() const { return evict_oldest_; }
  uint64_t refused_keys() const { return refused_keys_.load(std::memory_order_relaxed); }
  uint64_t evicted_keys() const { return evicted_keys_.load(std::memory_order_relaxed); }

  // Applies `update` to the entry for `key` (a null value when the key is new
  // or expired) and stamps it with `now_ms`. If `update` fails the entry is
  // left as it was. On success `*result` (if given) receives the new value.
  Status Update(const std::string& key, int64_t now_ms,
                const std::function<Status(Json& value, bool existed)>& update,
                Json* result = nullptr);
  // The live entry for `key`, if any.
  std::optional<Entry> Get(const std::string& key, int64_t now_ms);
  // Drops entries idle past the timeout. Cheap when nothing is due.
  void Expire(int64_t now_ms);
  size_t Size() const;

  // ---- checkpointing ----
  // True if an entry was written or dropped since the last SaveState or
  // TakeChanges.
  bool StateChanged() const;
  // Appends a copy of every entry (oldest write first) and clears the flag.
  void SaveState(std::string* out);

  // ---- incremental snapshots (with checkpointing) ----
  // What changed since the last TakeChanges: written entries with their
  // value encoded, and dropped keys. Costs what changed, not the bucket.
  struct Change {
    std::string key;
    bool dropped = false;
    int64_t last_write_ms = 0;
    uint64_t write_seq = 0;  // orders entries by last write
    std::string value;       // JSON
  };
  // From now on, remember which keys are written or dropped.
  void TrackChanges();
  // Moves the changes since the last call (every entry with `all`) into
  // `out` and clears StateChanged(). (Seal, then CollectSealed.)
  void TakeChanges(bool all, std::vector<Change>* out);
  // The bucket as it is now is committed already (it was just restored
  // from the store's chain): changes are counted from here, and nothing is
  // copied.
  void MarkSaved();
  // The barrier's snapshot, in constant time: the changes since the last
  // seal (or TakeChanges) are sealed as they are now, and StateChanged()
  // clears. Writers go on at once; one that changes a sealed entry before it
  // is collected keeps its old value aside first (copy on write). A seal
  // not yet collected (its checkpoint was abandoned) is collected first.
  void Seal();
  bool HasSeal() const;
  // Off the pipelines' threads: moves the sealed changes, as they were at
  // the seal, into `out`, holding the lock for a bounded run of keys at a
  // time. What it appends names each key once (as TakeChanges' does).
  void CollectSealed(std::vector<Change>* out);
  // Replaces every entry with what SaveState wrote.
  Status RestoreState(std::string_view data);
  // After RestoreState: applies a delta EncodeDelta wrote (the entries it
  // writes become the most recently written, in its order; the keys it
  // drops go).
  Status ApplyDelta(std::string_view data);
  // A delta chunk: the changes of `lists` (oldest list first; a later
  // change of a key replaces an earlier one), written entries in write
  // order, then dropped keys. docs/state_format.md, "bucket delta". A single
  // list must name each key once (as a collection's or a take's does).
  static void EncodeDelta(const std::vector<std::vector<Change>>& lists, std::string* out);
  // Compaction, off the pipelines' threads: the full chunk of the bucket
  // that a committed chain (`base`, a full chunk, and its `deltas`, oldest
  // first; an empty `base`: no chain, the changes hold every entry) and the
  // changes taken since (`lists`, oldest first) make: what SaveState would
  // write of it. Streams through the chunks without parsing their values;
  // remembers only the keys of the deltas and changes. Corruption if a
  // chunk is malformed.
  static Status Compact(std::string_view base, const std::vector<std::string_view>& deltas,
                        const std::vector<std::vector<Change>>& lists, std::string* out);
  // While the bucket is live (in a cluster, a partition changing owner):
  // drops every entry whose key `belongs`, then writes the entries of
  // `fulls` (full chunks, docs/state_format.md "bucket"; each oldest write
  // first) as the newest writes, keeping their last-write times. Both count
  // as changes for the next checkpoint, as writes and drops do. A malformed
  // chunk is Corruption and changes nothing.
  Status ReplaceKeys(const std::function<bool(const std::string& key)>& belongs,
                     const std::vector<std::string_view>& fulls);
  // A page of entries in key order, starting after `after` (exclusive).
  std::vector<std::pair<std::string, Entry>> Page(const std::string& after, size_t limit,
                                                  int64_t now_ms);

 private:
  // An entry with its place in the write order (a list through the
  // entries: no node of its own). docs/benchmarks.md gives the bytes a key
  // costs.
  struct Slot;
  using Node = std::pair<const std::string, Slot>;
  struct Slot {
    Entry entry;
    uint64_t write_seq = 0;
    // When last written (0: not since it was collected or saved): in
    // touched_ at `place` when it is epoch_, in sealed_nodes_ at `place`
    // when it is sealed_epoch_.
    uint32_t epoch = 0;
    uint32_t place = 0;
    Node* older = nullptr;  // written just before this one
    Node* newer = nullptr;
  };
  // Stable nodes, in the bucket's arena (huge pages once it is big).
  using Map = ArenaNodeMap<std::string, Slot>;
  bool ExpiredLocked(const Entry& e, int64_t now_ms) const {
    return idle_timeout_ms_ > 0 && now_ms - e.last_write_ms >= idle_timeout_ms_;
  }
  // The heap an entry holds beyond its node: a long key's, its value's.
  static size_t EntryHeap(const std::string& key, const Json& value) {
    return (key.capacity() > 15 ? key.capacity() + 1 : 0) + JsonHeapBytes(value);
  }
  void PublishLocked() KAYAK_REQUIRES(mu_) {
    if (account_ != nullptr) account_->Set(static_cast<int64_t>(arena_.in_use() + heap_));
  }
  MemoryAccount* account_ = nullptr;
  size_t max_keys_ = 0;
  bool evict_oldest_ = false;
  std::atomic<uint64_t> refused_keys_{0};
  std::atomic<uint64_t> evicted_keys_{0};
  void EraseLocked(Map::iterator it) KAYAK_REQUIRES(mu_);
  void ExpireLocked(int64_t now_ms) KAYAK_REQUIRES(mu_);
  // Reads `n` entries (key, last write, value) from `d` and makes each the
  // newest write; `full`: a full chunk, where a key may not repeat (else a
  // delta, whose keys replace what is there).
  Status InsertRunsLocked(checkpoint::Decoder* d, uint64_t n, bool full) KAYAK_REQUIRES(mu_);
  // Every change so far counts as saved: nothing sealed, nothing touched.
  void ForgetChangesLocked() KAYAK_REQUIRES(mu_);
  void TouchLocked(Node* node) KAYAK_REQUIRES(mu_);
  // Before a slot changes or goes: its sealed value is kept aside if it is
  // not collected yet (waiting, if the collector is copying it, for that).
  void BeforeChangeLocked(Node* node) KAYAK_REQUIRES(mu_);
  // The seal is gone (collected, forgotten or replaced): its lists emptied,
  // its places' states back to kSealPending.
  void DropSealLocked() KAYAK_REQUIRES(mu_);
  static Change ChangeOf(const std::string& key, const Slot& slot) {
    return Change{key, false, slot.entry.last_write_ms, slot.write_seq, DumpJson(slot.entry.value)};
  }

  const std::string name_;
  const int64_t idle_timeout_ms_;
  mutable Mutex mu_;
  Arena arena_ KAYAK_GUARDED_BY(mu_);  // outlives entries_
  Map entries_ KAYAK_GUARDED_BY(mu_){ArenaAllocator<Node>(&arena_)};
  size_t heap_ KAYAK_GUARDED_BY(mu_) = 0;  // the entries' EntryHeap
  // The write order; the oldest expires first.
  WriteOrder<Node> order_ KAYAK_GUARDED_BY(mu_);
  bool changed_ KAYAK_GUARDED_BY(mu_) = false;
  uint64_t next_seq_ KAYAK_GUARDED_BY(mu_) = 0;
  bool tracking_ KAYAK_GUARDED_BY(mu_) = false;
  uint32_t epoch_ KAYAK_GUARDED_BY(mu_) = 1;  // the epoch being written
  // This epoch's written entries, in the order first written (null: dropped
  // since), and its dropped keys not written again: no key is copied and
  // none looked up again to collect them.
  std::vector<Node*> touched_ KAYAK_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> dropped_ KAYAK_GUARDED_BY(mu_);
  // The seal not yet collected: its entries and dropped keys, its epoch,
  // and the sealed values of the entries changed or dropped since (copy on
  // write); `earlier_`: a seal collected when another came before its
  // checkpoint did.
  bool sealed_ KAYAK_GUARDED_BY(mu_) = false;
  uint32_t sealed_epoch_ KAYAK_GUARDED_BY(mu_) = 0;
  std::vector<Node*> sealed_nodes_ KAYAK_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> sealed_dropped_ KAYAK_GUARDED_BY(mu_);
  // One a place a writer claimed, in the order claimed (emptied, not
  // freed, with the seal: the next one reuses the memory).
  std::vector<Change> preimages_ KAYAK_GUARDED_BY(mu_);
  std::vector<Change> earlier_ KAYAK_GUARDED_BY(mu_);
  // Who has each sealed place, read and changed through std::atomic_ref
  // (the collector copies entries without the lock; docs/architecture.md,
  // "How a barrier travels", step 4). Every byte is kSealPending while there is no seal. The
  // array and its size change under mu_ only while nothing is sealed.
  enum SealState : uint8_t {
    kSealPending = 0,     // sealed, not collected
    kSealCollecting = 1,  // the collector is copying the entry
    kSealCollected = 2,   // copied: a writer may change the entry
    kSealKeptAside = 3,   // a writer kept the sealed value in preimages_
  };
  struct FreeDelete {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t[], FreeDelete> seal_states_;  // guarded as above
  size_t seal_states_size_ = 0;
};

// The buckets of a graph, by name. Built once at start; lookups are lock-free.
class BucketRegistry {
 public:
  Bucket* Add(const std::string& name, int64_t idle_timeout_ms);
  Bucket* Find(const std::string& name) const;
  std::vector<Bucket*> All() const;

 private:
  std::map<std::string, std::unique_ptr<Bucket>> buckets_;
};

}  // namespace kayak
