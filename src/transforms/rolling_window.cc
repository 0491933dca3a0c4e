// rolling_window: per key, count/sum/avg/min/max of a numeric field over the
// last window_secs of event time or the last window_messages messages.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <limits>
#include <memory>
#include <mutex>

#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>

#include "common/format.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "components.h"
#include "state/arena.h"
#include "transforms/field_access.h"

namespace kayak {

namespace {

enum Agg : unsigned { kCount = 1, kSum = 2, kAvg = 4, kMin = 8, kMax = 16 };

class RollingWindow final : public Transform {
 public:
  struct Config {
    FieldPath key;  // empty: one window for every message
    FieldPath field;
    std::string out_prefix;
    int64_t window_ms = 0;       // event-time window, or
    int64_t window_messages = 0; // count window
    FieldPath time_field;        // empty: the message timestamp (arrival time)
    unsigned aggs = 0;
    int64_t idle_timeout_ms = 0;
    size_t max_keys = 0;
    size_t max_points_per_key = 0;
    bool follow_partition = false;  // in a cluster: the key is the message's Kafka key
  };

  RollingWindow(Config c, const Clock* clock, metrics::Counter* evicted)
      : c_(std::move(c)), clock_(clock), evicted_(evicted) {
    static const std::pair<unsigned, const char*> kNames[] = {
        {kCount, "_count"}, {kSum, "_sum"}, {kAvg, "_avg"}, {kMin, "_min"}, {kMax, "_max"}};
    for (const auto& [agg, suffix] : kNames) {
      if (c_.aggs & agg) names_.push_back(c_.out_prefix + suffix);
    }
  }

  Status Process(Batch* batch) override {
    const int64_t now = clock_->NowMs();
    return ForEachMessage(batch, [&](Message& m) { return One(batch, m, now); });
  }

  void Tick(int64_t now_ms, Batch*) override { ExpireIdle(now_ms); }

  bool Stateful() const override { return true; }
  bool StateChanged() const override { return changed_; }
  size_t MemoryBytes() const override { return arena_.in_use() + heap_; }

  // Keys from least to most recently written, each with its points.
  void SaveState(std::string* out) override {
    checkpoint::Encoder e;
    size_t bytes = 16;
    for (const Node* n = order_.oldest; n != nullptr; n = n->second.newer) bytes += KeyBytes(*n);
    e.out().reserve(bytes);  // sized once: no copy of what was encoded as it grows
    e.U64(keys_.size());
    e.U64(late_);
    for (const Node* n = order_.oldest; n != nullptr; n = n->second.newer) EncodeKey(&e, n->first, n->second);
    e.AppendTo(out);
    ForgetChanges();
  }

  // The keys written since the last save, least recently written first,
  // each with its whole window, then the keys dropped since (expired or
  // evicted). docs/state_format.md, "rolling_window delta".
  // (A seal collected at once: one encoding for both.)
  bool SaveDelta(std::string* out) override {
    // A seal not collected (its checkpoint was abandoned) is in no delta:
    // SealDelta refuses, and a full save follows.
    return SealDelta() && CollectDelta(out).ok();
  }

  // The barrier's snapshot, in constant time: this epoch's writes (written_)
  // and drops are set aside as the seal's, and a new epoch starts.
  // CollectDelta encodes the sealed keys on the coordinator's thread, a run
  // at a time, without the lock; before the pipeline changes or drops a
  // sealed key it has not reached, BeforeChange encodes the key as it was,
  // or waits while the key's run is being encoded.
  bool SealDelta() override {
    if (!tracking_ || delta_lost_ || SealPending()) return false;  // a full save instead
    std::lock_guard lock(mu_);
    ++seal_.generation;
    seal_.active = true;
    seal_.late = late_;
    seal_.written.swap(written_);
    written_.clear();
    seal_.dropped.swap(dropped_);
    dropped_.clear();
    seal_.next = seal_.done = 0;
    seal_.pre.clear();
    seal_.pre_at.clear();
    sealed_epoch_ = epoch_;
    seal_open_ = true;
    seal_collected_.store(false, std::memory_order_relaxed);
    NewEpoch();
    changed_ = false;
    return true;
  }

  Status CollectDelta(std::string* out) override {
    const auto abandoned = [] {
      return Status::Internal("rolling_window: the sealed snapshot was abandoned before it was "
                              "written");
    };
    checkpoint::Encoder e;
    std::vector<size_t> ends;  // of each key encoded in e, with its write number in `numbers`
    std::vector<uint32_t> numbers;
    std::vector<std::string> dropped;
    uint64_t generation = 0;
    size_t total = 0;
    {
      std::lock_guard lock(mu_);
      if (!seal_.active) return abandoned();
      generation = seal_.generation;
      total = seal_.written.size();
      e.U64(seal_.late);
      dropped.assign(seal_.dropped.begin(), seal_.dropped.end());
      seal_.dropped.clear();
    }
    e.U64(0);  // the count, patched
    const size_t head = e.out().size();
    // Sized from the last delta's bytes a key: no copy of a growing buffer
    // of tens of MB (most of what is sealed is still there).
    e.out().reserve(head + total * collected_bytes_per_key_ + total / 8 * collected_bytes_per_key_);
    ends.reserve(total);
    numbers.reserve(total);
    for (size_t from = 0; from < total;) {
      // Claim a run: the pipeline keeps its hands off these keys (it waits
      // in BeforeChange if it needs one) until they are encoded.
      size_t to = 0;
      {
        std::lock_guard lock(mu_);
        if (!seal_.active || seal_.generation != generation) return abandoned();
        to = std::min(total, from + kCollectRun);
        seal_.next = to;
      }
      for (size_t i = from; i < to; ++i) {
        const Node* n = seal_.written[i];
        if (n == nullptr) continue;  // written again before the seal, or kept aside
        EncodeKey(&e, n->first, n->second);
        ends.push_back(e.out().size());
        numbers.push_back(static_cast<uint32_t>(i));
      }
      {
        std::lock_guard lock(mu_);
        seal_.done = to;
      }
      cv_.notify_all();
      from = to;
    }
    std::string pre;
    std::vector<Preimage> pre_at;
    {
      std::lock_guard lock(mu_);
      if (!seal_.active || seal_.generation != generation) return abandoned();
      pre.swap(seal_.pre);
      pre_at.swap(seal_.pre_at);
      seal_.active = false;
    }
    seal_collected_.store(true, std::memory_order_release);
    std::sort(dropped.begin(), dropped.end());
    if (!ends.empty()) collected_bytes_per_key_ = (e.out().size() - head) / ends.size() + 1;
    const uint64_t count = ends.size() + pre_at.size();
    if (pre_at.empty()) {
      e.PatchU64(8, count);
    } else {
      // The keys kept aside, in their places in the write order again.
      std::sort(pre_at.begin(), pre_at.end(),
                [](const Preimage& a, const Preimage& b) { return a.number < b.number; });
      checkpoint::Encoder m;
      m.out().reserve(e.out().size() + pre.size());
      m.out().append(e.out(), 0, 8);
      m.U64(count);
      size_t from = head, p = 0;
      const auto kept = [&] {
        m.out().append(pre, pre_at[p].begin, pre_at[p].end - pre_at[p].begin);
        ++p;
      };
      for (size_t k = 0; k < ends.size(); ++k) {
        while (p < pre_at.size() && pre_at[p].number < numbers[k]) kept();
        m.out().append(e.out(), from, ends[k] - from);
        from = ends[k];
      }
      while (p < pre_at.size()) kept();
      e = std::move(m);
    }
    {
      // The kept keys' memory back to the seal for the next one (the
      // pipeline fills it without growing it again, nor faulting its pages
      // in).
      std::lock_guard lock(mu_);
      if (seal_.pre.empty() && seal_.pre.capacity() < pre.capacity()) {
        pre.clear();
        seal_.pre.swap(pre);
      }
      if (seal_.pre_at.empty() && seal_.pre_at.capacity() < pre_at.capacity()) {
        pre_at.clear();
        seal_.pre_at.swap(pre_at);
      }
    }
    e.U64(dropped.size());
    for (const std::string& key : dropped) e.Str(key);
    e.AppendTo(out);
    return Status::Ok();
  }

  Status ApplyDelta(std::string_view data) override {
    checkpoint::Decoder d(data);
    uint64_t n = 0;
    if (!d.U64(&late_) || !d.U64(&n)) return Status::Corruption("rolling_window delta is short");
    for (uint64_t i = 0; i < n; ++i) {
      std::string key;
      KeyState ks;
      if (!DecodeKey(&d, &key, &ks)) return Status::Corruption("rolling_window delta is short");
      auto [it, fresh] = keys_.try_emplace(std::move(key));
      if (!fresh) {
        order_.Unlink(&*it);
        heap_ -= KeyHeap(*it);
      }
      it->second = std::move(ks);
      heap_ += KeyHeap(*it);
      order_.LinkNewest(&*it);
    }
    if (!d.U64(&n)) return Status::Corruption("rolling_window delta is short");
    for (uint64_t i = 0; i < n; ++i) {
      std::string key;
      if (!d.Str(&key)) return Status::Corruption("rolling_window delta is short");
      if (auto it = keys_.find(key); it != keys_.end()) {
        order_.Unlink(&*it);
        heap_ -= KeyHeap(*it);
        keys_.erase(it);
      }
    }
    if (!d.done()) return Status::Corruption("rolling_window delta has trailing bytes");
    ForgetChanges();
    return Status::Ok();
  }

  Status RestoreState(std::string_view data) override {
    checkpoint::Decoder d(data);
    uint64_t n = 0;
    AbandonSeal();
    written_.clear();
    keys_.clear();
    heap_ = 0;
    order_.oldest = order_.newest = nullptr;
    if (!d.U64(&n) || !d.U64(&late_)) return Status::Corruption("rolling_window state is short");
    // A key takes at least 32 bytes (its length, end, last write, points).
    if (n > data.size() / 32) return Status::Corruption("rolling_window state is short");
    keys_.reserve(n);
    Arena::Prefault prefault(&arena_, sizeof(Node), static_cast<size_t>(n));
    for (uint64_t i = 0; i < n; ++i) {
      std::string key;
      KeyState ks;
      if (!DecodeKey(&d, &key, &ks)) return Status::Corruption("rolling_window state is short");
      auto [it, fresh] = keys_.try_emplace(std::move(key));
      if (!fresh) return Status::Corruption("rolling_window state repeats a key");
      it->second = std::move(ks);
      heap_ += KeyHeap(*it);
      order_.LinkNewest(&*it);
    }
    if (!d.done()) return Status::Corruption("rolling_window state has trailing bytes");
    ForgetChanges();
    return Status::Ok();
  }

  Sharding ShardedAs() const override { return Sharding::kKeyed; }

  Status ReplaceKeys(const std::function<bool(const std::string& key)>& belongs,
                     const std::vector<std::string_view>& fulls) override {
    // Read before anything changes: a bad slice leaves the window as it was.
    // A slice's count of late points stays with the server that counted it.
    std::vector<std::pair<std::string, KeyState>> reads;
    for (std::string_view full : fulls) {
      checkpoint::Decoder d(full);
      uint64_t n = 0, late = 0;
      if (!d.U64(&n) || !d.U64(&late) || n > full.size() / 32) {
        return Status::Corruption("rolling_window slice is short");
      }
      for (uint64_t i = 0; i < n; ++i) {
        std::string key;
        KeyState ks;
        if (!DecodeKey(&d, &key, &ks)) return Status::Corruption("rolling_window slice is short");
        reads.emplace_back(std::move(key), std::move(ks));
      }
      if (!d.done()) return Status::Corruption("rolling_window slice has trailing bytes");
    }
    for (auto it = keys_.begin(); it != keys_.end();) {
      auto here = it++;
      if (belongs(here->first)) Erase(here);
    }
    for (auto& [key, ks] : reads) {
      auto [it, fresh] = keys_.try_emplace(std::move(key));
      // Its place among this epoch's writes, which Touched moves.
      const uint32_t epoch = it->second.epoch, number = it->second.number;
      if (!fresh) {
        BeforeChange(&*it);
        order_.Unlink(&*it);
        heap_ -= KeyHeap(*it);
      }
      it->second = std::move(ks);
      it->second.epoch = epoch;
      it->second.number = number;
      heap_ += KeyHeap(*it);
      order_.LinkNewest(&*it);
      if (!dropped_.empty()) dropped_.erase(it->first);  // written again: not dropped
      Touched(&*it);
    }
    changed_ = true;
    return Status::Ok();
  }

  bool Compacts() const override { return true; }

  // A streaming merge of the chunks' bytes: the full state's keys that no
  // delta writes or drops, in its order, then each delta's written keys
  // that no later delta writes or drops again, in theirs (a delta's keys
  // were written after every key before it). Holds only the deltas' keys.
  Status CompactState(std::string_view base, const std::vector<std::string_view>& deltas,
                      std::string* out) const override {
    const auto corrupt = [] { return Status::Corruption("rolling_window state to compact is short"); };
    // key -> the last delta naming it (1-based)
    absl::flat_hash_map<absl::string_view, size_t> newest;
    uint64_t late = 0, n = 0;
    std::string_view key;
    // One delta over a full chunk of no key (the first checkpoint after a
    // start, say): every key it writes is kept (a delta names a key once),
    // and no table of them is built.
    uint64_t base_keys = 0;
    if (!base.empty()) {
      checkpoint::Decoder d(base);
      if (!d.U64(&base_keys)) return corrupt();
    }
    const bool keep_all = base_keys == 0 && deltas.size() == 1;
    if (keep_all) {
      checkpoint::Decoder d(deltas[0]);
      if (!d.U64(&late)) return corrupt();
    }
    // Sized once for the deltas' written keys: growing a table of a million
    // keys rehashes every key it holds, each a cache miss.
    uint64_t written = 0;
    for (size_t i = 0; !keep_all && i < deltas.size(); ++i) {
      checkpoint::Decoder d(deltas[i]);
      if (!d.U64(&n) || !d.U64(&n) || n > deltas[i].size()) return corrupt();
      written += n;
    }
    newest.reserve(written);
    // Keys are looked up in runs, each one's place in the table asked for
    // before the first lookup (the cache misses overlap), as a restore does.
    constexpr size_t kRun = 16;
    struct Read {
      absl::string_view key;
      size_t from = 0, to = 0;  // the key's bytes in its chunk
    } run[kRun];
    for (size_t i = keep_all ? 0 : deltas.size(); i-- > 0;) {
      checkpoint::Decoder d(deltas[i]);
      uint64_t delta_late = 0;
      if (!d.U64(&delta_late) || !d.U64(&n)) return corrupt();
      if (i + 1 == deltas.size()) late = delta_late;  // the newest count
      for (uint64_t k = 0; k < n;) {
        const size_t m = static_cast<size_t>(std::min<uint64_t>(kRun, n - k));
        for (size_t r = 0; r < m; ++r) {
          if (!d.View(&key) || !SkipKeyRest(&d)) return corrupt();
          run[r].key = absl::string_view(key.data(), key.size());
          newest.prefetch(run[r].key);
        }
        for (size_t r = 0; r < m; ++r) newest.try_emplace(run[r].key, i + 1);
        k += m;
      }
      if (!d.U64(&n)) return corrupt();
      for (uint64_t k = 0; k < n; ++k) {
        if (!d.View(&key)) return corrupt();
        newest.try_emplace(absl::string_view(key.data(), key.size()), i + 1);
      }
      if (!d.done()) return corrupt();
    }
    checkpoint::Encoder e;
    e.out().reserve(base.size());
    e.U64(0);  // the count, patched at the end
    e.U64(0);  // late, patched too
    uint64_t count = 0;
    const auto copy = [&](checkpoint::Decoder* d, std::string_view chunk, uint64_t keys,
                          size_t level) {
      for (uint64_t k = 0; k < keys;) {
        const size_t m = static_cast<size_t>(std::min<uint64_t>(kRun, keys - k));
        for (size_t r = 0; r < m; ++r) {
          run[r].from = d->pos();
          if (!d->View(&key) || !SkipKeyRest(d)) return false;
          run[r].to = d->pos();
          run[r].key = absl::string_view(key.data(), key.size());
          if (!keep_all) newest.prefetch(run[r].key);
        }
        for (size_t r = 0; r < m; ++r) {
          if (!keep_all) {
            auto it = newest.find(run[r].key);
            if (it == newest.end() ? level != 0 : it->second != level) continue;
          }
          e.out().append(chunk.substr(run[r].from, run[r].to - run[r].from));
          ++count;
        }
        k += m;
      }
      return true;
    };
    if (!base.empty()) {
      checkpoint::Decoder d(base);
      uint64_t base_late = 0;
      if (!d.U64(&n) || !d.U64(&base_late) || !copy(&d, base, n, 0) || !d.done()) {
        return corrupt();
      }
      if (deltas.empty()) late = base_late;
    }
    for (size_t i = 0; i < deltas.size(); ++i) {
      checkpoint::Decoder d(deltas[i]);
      uint64_t skip = 0;
      if (!d.U64(&skip) || !d.U64(&n) || !copy(&d, deltas[i], n, i + 1)) return corrupt();
    }
    e.PatchU64(0, count);
    e.PatchU64(8, late);
    e.AppendTo(out);
    return Status::Ok();
  }

  size_t keys() const { return keys_.size(); }
  uint64_t late() const { return late_; }

 private:
  struct Point {
    int64_t t;
    double v;
  };
  // A key's points, oldest first, in a ring of a power of two that grows
  // and shrinks with them: a window of one point costs 16 bytes (a
  // std::deque allocates 576 for it).
  class Points {
   public:
    size_t size() const { return n_; }
    size_t capacity() const { return cap_; }
    bool empty() const { return n_ == 0; }
    const Point& operator[](size_t i) const { return buf_[(head_ + i) & (cap_ - 1)]; }
    const Point& front() const { return (*this)[0]; }
    void push_back(Point p) {
      if (n_ == cap_) Resize(cap_ == 0 ? 1 : 2 * cap_);
      At(n_++) = p;
    }
    void pop_front() {
      head_ = (head_ + 1) & (cap_ - 1);
      --n_;
      if (cap_ >= 8 && n_ * 4 <= cap_) Resize(cap_ / 2);
    }
    // After every point with t <= p.t (out-of-order event time).
    void insert_sorted(Point p) {
      size_t lo = 0, hi = n_;
      while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if ((*this)[mid].t <= p.t) {
          lo = mid + 1;
        } else {
          hi = mid;
        }
      }
      push_back(p);
      for (size_t i = n_ - 1; i > lo; --i) At(i) = At(i - 1);
      At(lo) = p;
    }

   private:
    Point& At(size_t i) { return buf_[(head_ + i) & (cap_ - 1)]; }
    void Resize(size_t cap) {
      auto next = std::make_unique<Point[]>(cap);
      for (size_t i = 0; i < n_; ++i) next[i] = (*this)[i];
      buf_ = std::move(next);
      cap_ = static_cast<uint32_t>(cap);
      head_ = 0;
    }
    std::unique_ptr<Point[]> buf_;
    uint32_t cap_ = 0;  // a power of two, or 0
    uint32_t head_ = 0;
    uint32_t n_ = 0;
  };
  struct KeyState;
  using Node = std::pair<const std::string, KeyState>;
  struct KeyState {
    Points points;  // ordered by t
    double sum = 0;
    int64_t end_ms = std::numeric_limits<int64_t>::min();  // newest event time seen
    int64_t last_write_ms = 0;                              // wall clock
    Node* older = nullptr;  // written just before this key (the write order)
    Node* newer = nullptr;
    uint32_t epoch = 0;  // written since the last save when it is epoch_
    uint32_t number = 0; // then its place in written_
  };
  // Stable nodes (the write order links them), in the window's arena.
  using Map = ArenaNodeMap<std::string, KeyState>;

  static void EncodeKey(checkpoint::Encoder* e, const std::string& key, const KeyState& ks) {
    e->Str(key);
    e->I64(ks.end_ms);
    e->I64(ks.last_write_ms);
    e->U64(ks.points.size());
    for (size_t i = 0; i < ks.points.size(); ++i) {
      e->I64(ks.points[i].t);
      e->F64(ks.points[i].v);
    }
  }
  // The heap a key holds beyond its node: a long key's, its points'.
  static size_t KeyHeap(const Node& n) {
    return (n.first.capacity() > 15 ? n.first.capacity() + 1 : 0) +
           n.second.points.capacity() * sizeof(Point);
  }
  // What EncodeKey writes for a key.
  static size_t KeyBytes(const Node& n) { return 32 + n.first.size() + 16 * n.second.points.size(); }
  // Past a key's record after its key (EncodeKey): end, last write, points.
  static bool SkipKeyRest(checkpoint::Decoder* d) {
    int64_t i64 = 0;
    uint64_t points = 0;
    if (!d->I64(&i64) || !d->I64(&i64) || !d->U64(&points)) return false;
    // A point is two 8-byte fields.
    return points <= UINT64_MAX / 16 && d->Skip(points * 16);
  }
  static bool DecodeKey(checkpoint::Decoder* d, std::string* key, KeyState* ks) {
    uint64_t points = 0;
    if (!d->Str(key) || !d->I64(&ks->end_ms) || !d->I64(&ks->last_write_ms) || !d->U64(&points)) {
      return false;
    }
    for (uint64_t k = 0; k < points; ++k) {
      Point p;
      if (!d->I64(&p.t) || !d->F64(&p.v)) return false;
      ks->sum += p.v;
      ks->points.push_back(p);
    }
    return true;
  }

  // A save took every change: the next delta starts empty. A seal not yet
  // collected is abandoned (its checkpoint was).
  void ForgetChanges() {
    tracking_ = true;
    dropped_.clear();
    written_.clear();
    AbandonSeal();
    NewEpoch();
    changed_ = false;
    delta_lost_ = false;
  }
  void NewEpoch() {
    ++epoch_;
    written_.clear();
  }
  // A key written or dropped now is in the next delta. Only once a
  // checkpoint saved or restored the state: before, the next save is whole
  // anyway, and without a state dir nothing is kept per message.
  void Touched(Node* n) {
    if (!tracking_) return;
    KeyState& ks = n->second;
    if (ks.epoch == epoch_) written_[ks.number] = nullptr;  // its earlier write this epoch
    ks.epoch = epoch_;
    ks.number = static_cast<uint32_t>(written_.size());
    written_.push_back(n);
    if (written_.size() > 2 * keys_.size() + 1024) PackWritten();
  }
  // written_ without the writes written again since: it stays within twice
  // the keys (and the write numbers within 32 bits).
  void PackWritten() {
    size_t k = 0;
    for (Node* n : written_) {
      if (n == nullptr) continue;
      n->second.number = static_cast<uint32_t>(k);
      written_[k++] = n;
    }
    written_.resize(k);
  }
  bool SealPending() {
    if (seal_open_ && seal_collected_.load(std::memory_order_acquire)) seal_open_ = false;
    return seal_open_;
  }
  // Before a sealed key that CollectDelta has not encoded changes or goes:
  // the key as it was, encoded, for the delta; or, while its run is being
  // encoded, a wait for the run.
  void BeforeChange(Node* n) {
    if (!seal_open_ || n->second.epoch != sealed_epoch_ || !SealPending()) return;
    const size_t i = n->second.number;
    std::unique_lock lock(mu_);
    if (!seal_.active || i < seal_.done) return;  // encoded already
    if (i < seal_.next) {
      cv_.wait(lock, [&] { return !seal_.active || i < seal_.done; });
      return;
    }
    checkpoint::Encoder e;
    e.out().swap(seal_.pre);
    const size_t begin = e.out().size();
    EncodeKey(&e, n->first, n->second);
    seal_.pre_at.push_back({n->second.number, begin, e.out().size()});
    e.out().swap(seal_.pre);
    seal_.written[i] = nullptr;
  }
  // The pipeline's: a seal not collected is given up (its checkpoint was
  // abandoned), after any run being encoded.
  void AbandonSeal() {
    if (!seal_open_) return;
    seal_open_ = false;
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !seal_.active || seal_.done >= seal_.next; });
    ++seal_.generation;
    seal_.active = false;
  }
  void Erase(Map::iterator it) {
    BeforeChange(&*it);
    if (tracking_) {
      if (it->second.epoch == epoch_) written_[it->second.number] = nullptr;
      dropped_.insert(it->first);
      Bound();
    }
    order_.Unlink(&*it);
    heap_ -= KeyHeap(*it);
    keys_.erase(it);
  }
  // While checkpoints fail nothing is taken: the set of dropped keys stays
  // within twice the keys (a delta that large would be written whole anyway).
  void Bound() {
    if (dropped_.size() <= 2 * keys_.size() + 1024) return;
    dropped_.clear();
    NewEpoch();
    delta_lost_ = true;
  }

  Status One(Batch* batch, Message& m, int64_t now) {
    KAYAK_RETURN_IF_ERROR(OpenFields(batch, m, &doc_, true));
    scratch_.Reset();
    key_.clear();
    if (!c_.key.empty()) KAYAK_RETURN_IF_ERROR(KeyOf(doc_, c_.key, &scratch_, &key_));
    if (c_.follow_partition) KAYAK_RETURN_IF_ERROR(FollowsPartition(key_, m, c_.key));
    const expr::Value v = doc_.Get(c_.field, &scratch_);
    if (v.missing()) return Status::Invalid("field '" + FieldPathToString(c_.field) + "' is missing");
    if (!v.is_number()) {
      return Status::Invalid("field '" + FieldPathToString(c_.field) + "' is " +
                             expr::TypeName(v) + ", not a number");
    }
    const double value = v.as_double();
    int64_t t = m.ts_ms();
    if (!c_.time_field.empty()) {
      const expr::Value tv = doc_.Get(c_.time_field, &scratch_);
      if (tv.missing()) {
        return Status::Invalid("time field '" + FieldPathToString(c_.time_field) + "' is missing");
      }
      const bool ok =
          tv.type == expr::Value::Type::kString ? EventTimeOfText(tv.str, &t)
          : tv.is_number() ? EventTimeOfNumber(tv.as_double(),
                                               tv.type == expr::Value::Type::kInt ? &tv.i : nullptr, &t)
                           : false;
      if (!ok) {
        return Status::Invalid("time field '" + FieldPathToString(c_.time_field) +
                               "' is not epoch seconds, epoch milliseconds or RFC 3339");
      }
    }
    changed_ = true;
    KeyState& ks = Touch(key_, now);
    const size_t had = ks.points.capacity();
    if (c_.window_ms > 0) {
      const bool late = !ks.points.empty() && t <= ks.end_ms - c_.window_ms;
      if (late) {
        ++late_;  // older than the window: reported with the window, not added to it
      } else {
        ks.end_ms = std::max(ks.end_ms, t);
        ks.points.insert_sorted(Point{t, value});
        ks.sum += value;
        const int64_t cutoff = ks.end_ms - c_.window_ms;
        while (!ks.points.empty() && ks.points.front().t <= cutoff) PopFront(ks);
      }
    } else {
      ks.points.push_back(Point{t, value});
      ks.sum += value;
      while (static_cast<int64_t>(ks.points.size()) > c_.window_messages) PopFront(ks);
    }
    while (ks.points.size() > c_.max_points_per_key) PopFront(ks);
    heap_ += (ks.points.capacity() - had) * sizeof(Point);  // wraps as it should when it shrank
    Emit(ks, batch, m);
    return Status::Ok();
  }

  void PopFront(KeyState& ks) {
    ks.sum -= ks.points.front().v;
    ks.points.pop_front();
    if (ks.points.empty()) ks.sum = 0;  // no drift carried into the next series
  }

  // Adds (or replaces) the aggregate fields, in one pass over the payload.
  void Emit(const KeyState& ks, Batch* batch, Message& m) {
    const size_t n = ks.points.size();
    values_.clear();
    fields_.clear();
    size_t ends[5];
    size_t k = 0;
    auto add = [&](unsigned agg, auto write) {
      if (!(c_.aggs & agg)) return;
      write();
      ends[k++] = values_.size();
    };
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    if (c_.aggs & (kMin | kMax)) {
      for (size_t i = 0; i < n; ++i) {
        lo = std::min(lo, ks.points[i].v);
        hi = std::max(hi, ks.points[i].v);
      }
    }
    add(kCount, [&] { jtext::AppendInt(&values_, static_cast<int64_t>(n)); });
    add(kSum, [&] { jtext::AppendDouble(&values_, ks.sum); });
    add(kAvg, [&] { jtext::AppendDouble(&values_, n ? ks.sum / static_cast<double>(n) : 0.0); });
    add(kMin, [&] { n ? jtext::AppendDouble(&values_, lo) : void(values_.append("null")); });
    add(kMax, [&] { n ? jtext::AppendDouble(&values_, hi) : void(values_.append("null")); });
    size_t from = 0;
    for (size_t i = 0; i < k; ++i) {
      fields_.emplace_back(names_[i], std::string_view(values_).substr(from, ends[i] - from));
      from = ends[i];
    }
    if (doc_.SetMembers(fields_, &buf_, &members_)) {
      SwapPayloadKeepFields(batch, m, doc_, &buf_, members_);  // doc_ is m's payload
    }
  }

  KeyState& Touch(const std::string& key, int64_t now) {
    auto it = keys_.find(key);
    if (it != keys_.end() && c_.idle_timeout_ms > 0 &&
        now - it->second.last_write_ms >= c_.idle_timeout_ms) {
      Erase(it);
      it = keys_.end();
    }
    if (it == keys_.end()) {
      if (keys_.size() >= c_.max_keys) {
        Erase(keys_.find(order_.oldest->first));  // the least recently written key makes room
        evicted_->Add();
      }
      it = keys_.try_emplace(key).first;
      heap_ += KeyHeap(*it);
      if (!dropped_.empty()) dropped_.erase(key);  // written again: not dropped
      order_.LinkNewest(&*it);
    } else {
      BeforeChange(&*it);
      if (&*it != order_.newest) {
        order_.Unlink(&*it);
        order_.LinkNewest(&*it);
      }
    }
    it->second.last_write_ms = now;
    Touched(&*it);
    return it->second;
  }

  void ExpireIdle(int64_t now) {
    if (c_.idle_timeout_ms <= 0) return;
    while (order_.oldest != nullptr) {
      if (now - order_.oldest->second.last_write_ms < c_.idle_timeout_ms) break;
      Erase(keys_.find(order_.oldest->first));
      changed_ = true;
    }
  }

  const Config c_;
  const Clock* clock_;
  metrics::Counter* evicted_;  // keys evicted at max_keys
  std::vector<std::string> names_;  // the added fields, in order
  // Reused from message to message.
  expr::Document doc_;
  expr::Scratch scratch_;
  std::string key_;
  std::string values_;
  std::vector<std::pair<std::string_view, std::string_view>> fields_;
  std::string buf_;
  std::vector<jtext::Member> members_;  // the patched payload's
  Arena arena_;  // outlives keys_
  Map keys_{ArenaAllocator<Node>(&arena_)};
  size_t heap_ = 0;  // the keys' KeyHeap
  WriteOrder<Node> order_;  // through the keys
  uint64_t late_ = 0;
  bool changed_ = false;  // since the last SaveState
  // Since the last save: the keys written are those of epoch_, and the
  // keys dropped are in dropped_ (the next delta's, SealDelta).
  uint32_t epoch_ = 1;
  // This epoch's writes in order, as the keys written; a key written again
  // leaves null where it was (KeyState::number is its place).
  std::vector<Node*> written_;
  absl::flat_hash_set<std::string> dropped_;  // since the last save, and not written again
  bool delta_lost_ = false;  // dropped_ was cut: the next save is whole
  bool tracking_ = false;    // from the first save or restore on
  // A seal (SealDelta) that CollectDelta has not finished: the pipeline's
  // view of it. Keys of sealed_epoch_ may be sealed ones.
  bool seal_open_ = false;
  uint32_t sealed_epoch_ = 0;
  std::atomic<bool> seal_collected_{false};  // set by CollectDelta when done
  struct Preimage {
    uint32_t number;
    size_t begin, end;  // in Seal::pre
  };
  // Guarded by mu_, shared by the pipeline and CollectDelta. `written` does
  // not change size while sealed; the pipeline nulls only entries at or past
  // `next` (not claimed yet) and CollectDelta reads only those in
  // [done, next), without the lock, the keys they point to included.
  struct Seal {
    bool active = false;
    uint64_t generation = 0;
    uint64_t late = 0;
    std::vector<Node*> written;
    absl::flat_hash_set<std::string> dropped;
    size_t next = 0;  // claimed up to here
    size_t done = 0;  // encoded up to here
    std::string pre;  // keys kept aside before they changed, as EncodeKey writes them
    std::vector<Preimage> pre_at;
  } seal_;
  static constexpr size_t kCollectRun = 4096;
  size_t collected_bytes_per_key_ = 64;  // CollectDelta's (the coordinator's) alone
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace

ComponentDef RollingWindowDef() {
  ComponentDef d;
  d.kind = "transform";
  d.type = "rolling_window";
  d.help =
      "Per key, aggregates a numeric field over the last `window_secs` of event time (from "
      "`time_field`, else the message's arrival time) or over the last `window_messages` "
      "messages, and adds `<field>_<aggregate>` to each message. Event time: the window of a key "
      "ends at the newest time seen for it; a message older than the window's start is late: it "
      "is emitted with the window's aggregates but not added to them.";
  d.checkpoint = "the keys written or dropped since its last checkpoint, each written key's points "
                 "in the window, newest event time and last write time (a delta); every key's, "
                 "once the deltas reach half of the whole";
  d.bad_input =
      "a missing key, value or time field, a value that is not a number, or a time it cannot read is a transform error: the batch is dropped and counted. In a cluster, so is a key that is not the message's Kafka key (docs/cluster.md)";
  d.props = {
      {"key", PropType::kString, false, "", "field path of the key; absent = one window for all"},
      {"field", PropType::kString, true, "", "field path of the numeric value"},
      PropDef{"window_secs", PropType::kNumber, false, "", "window length in seconds of event time"}.Above(0).Unit("s"),
      PropDef{"window_messages", PropType::kInt, false, "", "window length in messages"}.AtLeast(1),
      {"time_field", PropType::kString, false, "",
       "field holding the event time (epoch s, epoch ms, or RFC 3339); default arrival time"},
      {"aggregates", PropType::kStringList, false, "[count, sum, avg, min, max]",
       "which aggregates to add"},
      PropDef{"idle_timeout_secs", PropType::kNumber, false, "0",
       "drop a key not written for this long (wall clock); 0 = never"}.AtLeast(0).Unit("s"),
      PropDef{"max_keys", PropType::kInt, false, "2000000",
       "most keys held; a new key past it evicts the least recently written"}.AtLeast(1),
      PropDef{"max_points_per_key", PropType::kInt, false, "100000",
       "most points in one key's window; the oldest go first"}.AtLeast(1),
  };
  d.make_transform = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Transform> {
    RollingWindow::Config c;
    if (o.Has("key")) PathOption(o, "key", &c.key);
    PathOption(o, "field", &c.field);
    c.out_prefix = o.String("field");
    std::replace(c.out_prefix.begin(), c.out_prefix.end(), '.', '_');
    const bool by_time = o.Has("window_secs"), by_count = o.Has("window_messages");
    if (by_time == by_count) {
      o.Error(by_time ? "window_messages" : "field",
              "give exactly one of window_secs and window_messages");
    }
    if (by_time) {
      c.window_ms = static_cast<int64_t>(o.Number("window_secs") * 1000);
      if (c.window_ms <= 0) o.Error("window_secs", "must be > 0");
    }
    if (by_count) {
      c.window_messages = o.Int("window_messages");
    }
    if (o.Has("time_field")) {
      PathOption(o, "time_field", &c.time_field);
      if (by_count) o.Error("time_field", "only applies with window_secs");
    }
    if (o.Has("aggregates")) {
      for (const auto& a : o.Strings("aggregates")) {
        if (a == "count") c.aggs |= kCount;
        else if (a == "sum") c.aggs |= kSum;
        else if (a == "avg") c.aggs |= kAvg;
        else if (a == "min") c.aggs |= kMin;
        else if (a == "max") c.aggs |= kMax;
        else o.Error("aggregates", "unknown aggregate '" + a + "' (known: count, sum, avg, min, max)");
      }
    } else {
      c.aggs = kCount | kSum | kAvg | kMin | kMax;
    }
    c.idle_timeout_ms = static_cast<int64_t>(o.Number("idle_timeout_secs") * 1000);
    c.max_keys = static_cast<size_t>(o.Int("max_keys"));
    c.max_points_per_key = static_cast<size_t>(o.Int("max_points_per_key"));
    c.follow_partition = ctx.partitions != nullptr;
    if (c.follow_partition && c.key.empty()) {
      o.Error("field", "in a cluster a window needs a `key`: its state moves with the key's "
                       "partition (docs/cluster.md)");
    }
    if (o.failed()) return nullptr;
    // Keys evicted at max_keys, in /metrics (the series outlives a rebuild).
    metrics::Counter* evicted = metrics::Registry::Global().GetCounter(
        "kayak_window_evicted_keys_total",
        "Keys a rolling_window evicted at its max_keys (the least recently written).",
        {{"pipeline", ctx.pipeline_id}, {"component", ctx.stats ? ctx.stats->name() : ""}});
    return std::make_unique<RollingWindow>(std::move(c), ctx.clock, evicted);
  };
  return d;
}

}  // namespace kayak
