#include "state/bucket.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <new>
#include <thread>

#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>

#include "common/format.h"
#include "common/json_util.h"

namespace kayak {

namespace {

// The values of add/min/max/count entries are numbers: read those without
// the general JSON parser (a restore of 1M keys is mostly this). The result
// is what nlohmann's parser gives: unsigned for a non-negative integer,
// signed for a negative one, double otherwise. False: not a plain number.
bool ParseNumber(std::string_view s, Json* out) {
  if (s.empty() || s.size() > 64) return false;
  const char* b = s.data();
  const char* e = b + s.size();
  const bool neg = *b == '-';
  const char* digits = neg ? b + 1 : b;
  if (digits == e || *digits < '0' || *digits > '9') return false;
  if (*digits == '0' && digits + 1 < e && digits[1] >= '0' && digits[1] <= '9') return false;
  bool integral = true;
  for (const char* p = digits; p < e; ++p) {
    const char c = *p;
    if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
      integral = false;
    } else if (c < '0' || c > '9') {
      return false;
    }
  }
  if (integral) {
    if (neg) {
      int64_t v = 0;
      auto r = std::from_chars(b, e, v);
      if (r.ec != std::errc() || r.ptr != e) return false;
      *out = v;
    } else {
      uint64_t v = 0;
      auto r = std::from_chars(b, e, v);
      if (r.ec != std::errc() || r.ptr != e) return false;
      *out = v;
    }
    return true;
  }
  // JSON's number grammar is stricter than from_chars': leave the odd cases
  // ("1.", ".5", "1e") to the parser.
  const char* dot = std::find(digits, e, '.');
  if (dot != e && (dot + 1 == e || dot[1] < '0' || dot[1] > '9')) return false;
  if (e[-1] < '0' || e[-1] > '9') return false;
  double v = 0;
  auto r = std::from_chars(b, e, v);
  if (r.ec != std::errc() || r.ptr != e) return false;
  *out = v;
  return true;
}

// A key read from a chunk, as the map looks it up without a copy (Debian's
// Abseil has a string_view of its own).
absl::string_view MapKey(std::string_view s) { return {s.data(), s.size()}; }

// A value as a chunk holds it (JSON text), numbers without the parser.
bool ParseStored(std::string_view text, Json* out) {
  if (ParseNumber(text, out)) return true;
  *out = Json::parse(text, nullptr, false);
  return !out->is_discarded();
}

// Leaves in `list` (from `first` on) only the last change of each key, in
// the order of those (the rare collection that starts with an abandoned
// seal's changes; every other list names a key once already).
void KeepLastChanges(std::vector<Bucket::Change>* list, size_t first) {
  absl::flat_hash_map<std::string, size_t> last;
  for (size_t i = first; i < list->size(); ++i) last[(*list)[i].key] = i;
  size_t to = first;
  for (size_t i = first; i < list->size(); ++i) {
    if (last[(*list)[i].key] != i) continue;
    if (to != i) (*list)[to] = std::move((*list)[i]);
    ++to;
  }
  list->resize(to);
}

}  // namespace

Status Bucket::Update(const std::string& key, int64_t now_ms,
                      const std::function<Status(Json& value, bool existed)>& update,
                      Json* result) {
  MutexLock lock(mu_);
  auto it = entries_.find(key);
  if (it != entries_.end() && ExpiredLocked(it->second.entry, now_ms)) {
    EraseLocked(it);
    it = entries_.end();
  }
  if (it == entries_.end()) {
    const bool full = max_keys_ > 0 && entries_.size() >= max_keys_;
    if (full && !evict_oldest_) {
      refused_keys_.fetch_add(1, std::memory_order_relaxed);
      if (result != nullptr) *result = nullptr;
      return Status::Ok();
    }
    Json value;  // null
    KAYAK_RETURN_IF_ERROR(update(value, false));
    if (full) {
      // Only for a write that goes in: expired entries first, then the
      // oldest writes, as an expiry would (more than one when a restore
      // brought more keys than a lowered limit).
      ExpireLocked(now_ms);
      while (entries_.size() >= max_keys_ && order_.oldest != nullptr) {
        EraseLocked(entries_.find(order_.oldest->first));
        evicted_keys_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    auto [ins, ok] = entries_.try_emplace(key);
    (void)ok;
    heap_ += EntryHeap(ins->first, value);
    ins->second.entry.value = std::move(value);
    ins->second.entry.last_write_ms = now_ms;
    ins->second.write_seq = ++next_seq_;
    order_.LinkNewest(&*ins);
    if (result != nullptr) *result = ins->second.entry.value;
    changed_ = true;
    // Dropped earlier in this epoch and written again: written, not dropped.
    if (!dropped_.empty()) dropped_.erase(key);
    TouchLocked(&*ins);
    PublishLocked();
    return Status::Ok();
  }
  Json value = it->second.entry.value;
  KAYAK_RETURN_IF_ERROR(update(value, true));
  BeforeChangeLocked(&*it);
  heap_ += JsonHeapBytes(value);
  heap_ -= JsonHeapBytes(it->second.entry.value);
  it->second.entry.value = std::move(value);
  it->second.entry.last_write_ms = now_ms;
  it->second.write_seq = ++next_seq_;
  order_.Unlink(&*it);
  order_.LinkNewest(&*it);
  if (result != nullptr) *result = it->second.entry.value;
  changed_ = true;
  TouchLocked(&*it);
  PublishLocked();
  return Status::Ok();
}

void Bucket::TouchLocked(Node* node) {
  Slot& slot = node->second;
  if (!tracking_ || slot.epoch == epoch_) return;
  slot.epoch = epoch_;
  slot.place = static_cast<uint32_t>(touched_.size());
  touched_.push_back(node);
}

void Bucket::BeforeChangeLocked(Node* node) {
  // Sealed and not collected: the slot was last written in the sealed
  // epoch (a later write moves it to epoch_, past the seal). Its sealed
  // place keeps the change aside, unless the collector has it already.
  const Slot& slot = node->second;
  if (!sealed_ || slot.epoch != sealed_epoch_) return;
  std::atomic_ref<uint8_t> state(seal_states_[slot.place]);
  uint8_t s = state.load(std::memory_order_acquire);
  for (int spins = 0;;) {
    if (s == kSealCollected || s == kSealKeptAside) return;
    if (s == kSealPending) {
      if (state.compare_exchange_weak(s, kSealKeptAside, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        preimages_.push_back(ChangeOf(node->first, slot));
        return;
      }
      continue;  // s holds the state now
    }
    // kSealCollecting: the collector is copying this one entry (a value's
    // JSON text); it finishes without waiting for anything.
    if (++spins > 64) std::this_thread::yield();
    s = state.load(std::memory_order_acquire);
  }
}

void Bucket::DropSealLocked() {
  if (!sealed_nodes_.empty()) std::memset(seal_states_.get(), kSealPending, sealed_nodes_.size());
  sealed_ = false;
  sealed_nodes_.clear();
  sealed_dropped_.clear();
  preimages_.clear();
}

void Bucket::TrackChanges() {
  MutexLock lock(mu_);
  tracking_ = true;
}

void Bucket::TakeChanges(bool all, std::vector<Change>* out) {
  if (!all) {
    Seal();
    CollectSealed(out);
    return;
  }
  MutexLock lock(mu_);
  out->reserve(out->size() + entries_.size());
  for (const auto& [key, slot] : entries_) out->push_back(ChangeOf(key, slot));
  // Everything is taken: what was sealed or touched before is in it.
  ForgetChangesLocked();
}

void Bucket::MarkSaved() {
  MutexLock lock(mu_);
  ForgetChangesLocked();
}

void Bucket::ForgetChangesLocked() {
  DropSealLocked();
  earlier_.clear();
  touched_.clear();
  dropped_.clear();
  ++epoch_;
  changed_ = false;
}

void Bucket::Seal() {
  std::vector<Change> earlier;
  // Rare: a seal whose checkpoint was abandoned. Its changes are older than
  // this seal's and go first at the next collection.
  if (HasSeal()) CollectSealed(&earlier);
  MutexLock lock(mu_);
  for (auto& c : earlier) earlier_.push_back(std::move(c));
  if (touched_.size() > seal_states_size_) {
    // Before anything is sealed, so a failure leaves no seal behind.
    // Zeroed (kSealPending) by calloc; a big one is fresh pages from the
    // kernel, touched only as the places are.
    const size_t size = std::max(touched_.size(), 2 * seal_states_size_);
    std::unique_ptr<uint8_t[], FreeDelete> states(static_cast<uint8_t*>(std::calloc(size, 1)));
    if (states == nullptr) throw std::bad_alloc();
    seal_states_ = std::move(states);
    seal_states_size_ = size;
  }
  sealed_ = true;
  sealed_epoch_ = epoch_++;
  sealed_nodes_.swap(touched_);
  touched_.clear();
  // Sized like the last epoch's: a bulk load does not grow it by doubling
  // (the pages are not touched until used).
  touched_.reserve(sealed_nodes_.size());
  sealed_dropped_.swap(dropped_);
  dropped_.clear();
  changed_ = false;
}

bool Bucket::HasSeal() const {
  MutexLock lock(mu_);
  return sealed_;
}

void Bucket::CollectSealed(std::vector<Change>* out) {
  MutexLock lock(mu_);
  const size_t first = out->size();
  const bool had_earlier = !earlier_.empty();
  for (auto& c : earlier_) out->push_back(std::move(c));
  earlier_.clear();
  if (!sealed_) return;
  // Neither the sealed list nor the states array is resized or written
  // until the seal is dropped below (writers change a place's state only),
  // so both are read without the lock. Each place is the collector's or a
  // writer's, whichever claims it first: the collector copies an entry it
  // claimed while the writers go on (one that wants that very entry waits
  // for the copy); a writer that claimed one first kept its sealed value
  // aside. The writers never wait for the collector's lock.
  const size_t n = sealed_nodes_.size();
  Node* const* nodes = sealed_nodes_.data();
  uint8_t* states = seal_states_.get();
  lock.Unlock();
  out->reserve(out->size() + n);
  constexpr size_t kAhead = 8;  // entries asked for ahead: their cache misses overlap
  for (size_t i = 0; i < std::min(n, kAhead); ++i) {
    if (const Node* node = nodes[i]; node != nullptr) __builtin_prefetch(node);
  }
  for (size_t i = 0; i < n; ++i) {
    // (A node a writer has dropped may be prefetched: harmless.)
    if (i + kAhead < n) {
      if (const Node* node = nodes[i + kAhead]; node != nullptr) __builtin_prefetch(node);
    }
    std::atomic_ref<uint8_t> state(states[i]);
    uint8_t s = kSealPending;
    if (!state.compare_exchange_strong(s, kSealCollecting, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
      continue;  // kSealKeptAside: a writer's, in preimages_
    }
    // The place is the collector's until it says it is done, even if the
    // copy throws.
    struct Release {
      std::atomic_ref<uint8_t>& state;
      ~Release() { state.store(kSealCollected, std::memory_order_release); }
    } release{state};
    // (A null: written and dropped before the seal, among the dropped keys.)
    if (const Node* node = nodes[i]; node != nullptr) {
      const Slot& slot = node->second;
      out->push_back(Change{node->first, false, slot.entry.last_write_ms, slot.write_seq,
                            DumpJson(slot.entry.value)});
    }
  }
  lock.Lock();
  // The places writers claimed: changed or dropped after the seal.
  for (auto& pre : preimages_) out->push_back(std::move(pre));
  for (auto& key : sealed_dropped_) out->push_back(Change{std::move(key), true, 0, 0, {}});
  DropSealLocked();
  lock.Unlock();
  // Rare (an abandoned seal's changes came first): a key in both keeps its
  // later change only, so the list names each key once.
  if (had_earlier) KeepLastChanges(out, first);
}

std::optional<Bucket::Entry> Bucket::Get(const std::string& key, int64_t now_ms) {
  MutexLock lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  if (ExpiredLocked(it->second.entry, now_ms)) {
    EraseLocked(it);
    return std::nullopt;
  }
  return it->second.entry;
}

void Bucket::EraseLocked(Map::iterator it) {
  BeforeChangeLocked(&*it);
  if (tracking_) {
    if (it->second.epoch == epoch_) touched_[it->second.place] = nullptr;  // the node goes
    dropped_.insert(it->first);
  }
  order_.Unlink(&*it);
  heap_ -= EntryHeap(it->first, it->second.entry.value);
  entries_.erase(it);
  changed_ = true;
}

bool Bucket::StateChanged() const {
  MutexLock lock(mu_);
  return changed_;
}

void Bucket::SaveState(std::string* out) {
  MutexLock lock(mu_);
  checkpoint::Encoder e;
  e.U64(entries_.size());
  for (const Node* n = order_.oldest; n != nullptr; n = n->second.newer) {
    const Entry& entry = n->second.entry;
    e.Str(n->first);
    e.I64(entry.last_write_ms);
    e.Str(DumpJson(entry.value));
  }
  e.AppendTo(out);
  changed_ = false;
}

Status Bucket::InsertRunsLocked(checkpoint::Decoder* d, uint64_t n, bool full) {
  const auto corrupt = [&](const char* what) {
    return Status::Corruption("bucket '" + name_ + (full ? "' state " : "' delta ") + what);
  };
  // In runs: the run's keys are read and their places in the table asked
  // for (prefetched) before the first is inserted, so that the cache misses
  // of a big table overlap instead of following one another.
  constexpr size_t kRun = 16;
  struct Read {
    std::string_view key, value;
    int64_t last_write = 0;
  } run[kRun];
  for (uint64_t done = 0; done < n;) {
    const size_t m = static_cast<size_t>(std::min<uint64_t>(kRun, n - done));
    for (size_t i = 0; i < m; ++i) {
      if (!d->View(&run[i].key) || !d->I64(&run[i].last_write) || !d->View(&run[i].value)) {
        return corrupt("is short");
      }
      entries_.prefetch(MapKey(run[i].key));
    }
    for (size_t i = 0; i < m; ++i) {
      Json v;
      if (!ParseStored(run[i].value, &v)) return corrupt("holds bad JSON");
      auto [it, fresh] = entries_.try_emplace(MapKey(run[i].key));
      if (!fresh) {
        if (full) return corrupt("repeats a key");
        order_.Unlink(&*it);
        heap_ -= JsonHeapBytes(it->second.entry.value);
        heap_ += JsonHeapBytes(v);
      } else {
        heap_ += EntryHeap(it->first, v);
      }
      it->second.entry.value = std::move(v);
      it->second.entry.last_write_ms = run[i].last_write;
      it->second.write_seq = ++next_seq_;
      order_.LinkNewest(&*it);
    }
    done += m;
  }
  return Status::Ok();
}

Status Bucket::RestoreState(std::string_view data) {
  MutexLock lock(mu_);
  entries_.clear();
  heap_ = 0;
  order_.oldest = order_.newest = nullptr;
  touched_.clear();
  dropped_.clear();
  DropSealLocked();
  earlier_.clear();
  checkpoint::Decoder d(data);
  uint64_t n = 0;
  if (!d.U64(&n)) return Status::Corruption("bucket '" + name_ + "' state is short");
  // An entry takes at least 24 bytes (two lengths and a time).
  if (n > data.size() / 24) return Status::Corruption("bucket '" + name_ + "' state is short");
  entries_.reserve(n);
  Arena::Prefault prefault(&arena_, sizeof(Node), static_cast<size_t>(n));
  const Status read = InsertRunsLocked(&d, n, /*full=*/true);
  PublishLocked();
  KAYAK_RETURN_IF_ERROR(read);
  if (!d.done()) return Status::Corruption("bucket '" + name_ + "' state has trailing bytes");
  changed_ = false;
  return Status::Ok();
}

namespace {

// The last change of each key in `lists` (a later list, or a later change
// in one, replaces an earlier one): the written ones, oldest write first,
// and the dropped ones. One list names each key once (as a collection's or
// a take's does): it is sorted by its write numbers, with no table of its
// keys.
void LastOf(const std::vector<std::vector<Bucket::Change>>& lists,
            std::vector<const Bucket::Change*>* written,
            std::vector<const Bucket::Change*>* dropped) {
  if (lists.size() == 1 && lists[0].size() < UINT32_MAX) {
    const auto& list = lists[0];
    std::vector<std::pair<uint64_t, uint32_t>> order;  // (write_seq, index)
    order.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i].dropped) {
        dropped->push_back(&list[i]);
      } else {
        order.emplace_back(list[i].write_seq, static_cast<uint32_t>(i));
      }
    }
    std::sort(order.begin(), order.end());
    written->reserve(order.size());
    for (const auto& [seq, i] : order) written->push_back(&list[i]);
    return;
  }
  size_t n = 0;
  for (const auto& list : lists) n += list.size();
  absl::flat_hash_map<absl::string_view, const Bucket::Change*> last;
  last.reserve(n);
  for (const auto& list : lists) {
    for (const Bucket::Change& c : list) last[MapKey(c.key)] = &c;
  }
  for (const auto& [key, c] : last) (c->dropped ? dropped : written)->push_back(c);
  std::sort(written->begin(), written->end(),
            [](const Bucket::Change* a, const Bucket::Change* b) {
              return a->write_seq < b->write_seq;
            });
}

}  // namespace

void Bucket::EncodeDelta(const std::vector<std::vector<Change>>& lists, std::string* out) {
  std::vector<const Change*> written;
  std::vector<const Change*> dropped;
  LastOf(lists, &written, &dropped);
  std::sort(dropped.begin(), dropped.end(),
            [](const Change* a, const Change* b) { return a->key < b->key; });  // stable bytes
  checkpoint::Encoder e;
  size_t bytes = 20;  // sized once: no copy as it grows
  for (const Change* c : written) bytes += c->key.size() + c->value.size() + 30;
  for (const Change* c : dropped) bytes += c->key.size() + 10;
  e.out().reserve(bytes);
  e.U64(written.size());
  for (const Change* c : written) {
    e.Str(c->key);
    e.I64(c->last_write_ms);
    e.Str(c->value);
  }
  e.U64(dropped.size());
  for (const Change* c : dropped) e.Str(c->key);
  e.AppendTo(out);
}

Status Bucket::Compact(std::string_view base, const std::vector<std::string_view>& deltas,
                       const std::vector<std::vector<Change>>& lists, std::string* out) {
  const auto corrupt = [](const std::string& what) {
    return Status::Corruption("bucket chunk to compact " + what);
  };
  if (base.empty() && !deltas.empty()) return corrupt("has deltas but no full chunk");
  // The newest chunk that writes or drops each key of the deltas and the
  // changes (1..deltas.size() for a delta, `top` for the changes). An entry
  // is copied only from that chunk; the base's entries without one stay.
  const size_t top = deltas.size() + 1;
  std::vector<const Change*> written, dropped;
  LastOf(lists, &written, &dropped);
  absl::flat_hash_map<absl::string_view, size_t> newest;
  // A chain with no entry (no chain, or the full chunk of an empty bucket
  // and no delta: the first checkpoint after a start, say) has nothing for
  // the changes to leave out, and no table of their keys is built.
  uint64_t base_entries = 0;
  if (!base.empty()) {
    checkpoint::Decoder d(base);
    if (!d.U64(&base_entries) || base_entries > base.size()) return corrupt("is short");
  }
  if (base_entries > 0 || !deltas.empty()) {
    // Sized once for every key the deltas and changes write: growing a table
    // of a million keys rehashes every key it holds, each a cache miss.
    uint64_t keys = written.size() + dropped.size();
    for (std::string_view delta : deltas) {
      checkpoint::Decoder d(delta);
      uint64_t count = 0;
      if (!d.U64(&count) || count > delta.size()) return corrupt("delta is short");
      keys += count;
    }
    newest.reserve(keys);
    for (const Change* c : written) newest.emplace(MapKey(c->key), top);
    for (const Change* c : dropped) newest.emplace(MapKey(c->key), top);
  }
  std::string_view key, value;
  int64_t last_write = 0;
  uint64_t n = 0;
  constexpr size_t kRun = 16;
  struct Read {
    std::string_view key, value;
    int64_t last_write = 0;
  } run[kRun];
  for (size_t i = deltas.size(); i-- > 0;) {
    checkpoint::Decoder d(deltas[i]);
    if (!d.U64(&n) || n > deltas[i].size()) return corrupt("delta is short");
    // In runs, each key's place asked for before the first is looked up (the
    // cache misses of a big table overlap), as a restore does.
    for (uint64_t k = 0; k < n;) {
      const size_t m = static_cast<size_t>(std::min<uint64_t>(kRun, n - k));
      for (size_t r = 0; r < m; ++r) {
        if (!d.View(&run[r].key) || !d.I64(&last_write) || !d.View(&value)) {
          return corrupt("delta is short");
        }
        newest.prefetch(MapKey(run[r].key));
      }
      for (size_t r = 0; r < m; ++r) newest.try_emplace(MapKey(run[r].key), i + 1);
      k += m;
    }
    if (!d.U64(&n) || n > deltas[i].size()) return corrupt("delta is short");
    for (uint64_t k = 0; k < n; ++k) {
      if (!d.View(&key)) return corrupt("delta is short");
      newest.try_emplace(MapKey(key), i + 1);
    }
    if (!d.done()) return corrupt("delta has trailing bytes");
  }
  checkpoint::Encoder e;
  size_t changed_bytes = 0;
  for (const Change* c : written) changed_bytes += 24 + c->key.size() + c->value.size();
  e.out().reserve(base.size() + changed_bytes + 8);
  e.U64(0);  // the count, patched at the end
  uint64_t count = 0;
  const auto copy = [&](std::string_view chunk, size_t level, bool is_delta) {
    checkpoint::Decoder d(chunk);
    if (!d.U64(&n) || n > chunk.size()) return corrupt("is short");
    for (uint64_t k = 0; k < n;) {
      const size_t m = static_cast<size_t>(std::min<uint64_t>(kRun, n - k));
      for (size_t r = 0; r < m; ++r) {
        if (!d.View(&run[r].key) || !d.I64(&run[r].last_write) || !d.View(&run[r].value)) {
          return corrupt("is short");
        }
        newest.prefetch(MapKey(run[r].key));
      }
      for (size_t r = 0; r < m; ++r) {
        auto it = newest.find(MapKey(run[r].key));
        if (it == newest.end() ? level != 0 : it->second != level) continue;
        e.Str(run[r].key);
        e.I64(run[r].last_write);
        e.Str(run[r].value);
        ++count;
      }
      k += m;
    }
    if (is_delta) {  // its dropped keys were counted above
      if (!d.U64(&n)) return corrupt("is short");
      for (uint64_t k = 0; k < n; ++k) {
        if (!d.View(&key)) return corrupt("is short");
      }
    }
    if (!d.done()) return corrupt("has trailing bytes");
    return Status::Ok();
  };
  if (!base.empty()) KAYAK_RETURN_IF_ERROR(copy(base, 0, false));
  for (size_t i = 0; i < deltas.size(); ++i) KAYAK_RETURN_IF_ERROR(copy(deltas[i], i + 1, true));
  for (const Change* c : written) {
    e.Str(c->key);
    e.I64(c->last_write_ms);
    e.Str(c->value);
    ++count;
  }
  e.PatchU64(0, count);
  e.AppendTo(out);
  return Status::Ok();
}

Status Bucket::ReplaceKeys(const std::function<bool(const std::string& key)>& belongs,
                           const std::vector<std::string_view>& fulls) {
  // Read and parsed before anything changes: a bad chunk leaves the bucket
  // as it was.
  struct Read {
    std::string_view key;
    int64_t last_write = 0;
    Json value;
  };
  std::vector<Read> reads;
  for (std::string_view full : fulls) {
    const auto corrupt = [&](const char* what) {
      return Status::Corruption("bucket '" + name_ + "' slice " + what);
    };
    checkpoint::Decoder d(full);
    uint64_t n = 0;
    if (!d.U64(&n) || n > full.size() / 24) return corrupt("is short");
    for (uint64_t i = 0; i < n; ++i) {
      Read r;
      std::string_view value;
      if (!d.View(&r.key) || !d.I64(&r.last_write) || !d.View(&value)) return corrupt("is short");
      if (!ParseStored(value, &r.value)) return corrupt("holds bad JSON");
      reads.push_back(std::move(r));
    }
    if (!d.done()) return corrupt("has trailing bytes");
  }
  MutexLock lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto here = it++;
    if (belongs(here->first)) EraseLocked(here);
  }
  for (Read& r : reads) {
    auto [it, fresh] = entries_.try_emplace(MapKey(r.key));
    if (fresh) {
      heap_ += EntryHeap(it->first, r.value);
    } else {
      BeforeChangeLocked(&*it);
      order_.Unlink(&*it);
      heap_ -= JsonHeapBytes(it->second.entry.value);
      heap_ += JsonHeapBytes(r.value);
    }
    it->second.entry.value = std::move(r.value);
    it->second.entry.last_write_ms = r.last_write;
    it->second.write_seq = ++next_seq_;
    order_.LinkNewest(&*it);
    if (!dropped_.empty()) dropped_.erase(it->first);
    TouchLocked(&*it);
    changed_ = true;
  }
  PublishLocked();
  return Status::Ok();
}

Status Bucket::ApplyDelta(std::string_view data) {
  MutexLock lock(mu_);
  const auto corrupt = [&](const char* what) {
    return Status::Corruption("bucket '" + name_ + "' delta " + what);
  };
  checkpoint::Decoder d(data);
  uint64_t n = 0;
  if (!d.U64(&n) || n > data.size()) return corrupt("is short");
  if (Status st = InsertRunsLocked(&d, n, /*full=*/false); !st.ok()) {
    PublishLocked();
    return st;
  }
  std::string_view key;
  if (!d.U64(&n) || n > data.size()) return corrupt("is short");
  for (uint64_t i = 0; i < n; ++i) {
    if (!d.View(&key)) return corrupt("is short");
    auto it = entries_.find(MapKey(key));
    if (it == entries_.end()) continue;  // written and dropped between two checkpoints
    order_.Unlink(&*it);
    heap_ -= EntryHeap(it->first, it->second.entry.value);
    entries_.erase(it);
  }
  PublishLocked();
  if (!d.done()) return corrupt("has trailing bytes");
  changed_ = false;
  return Status::Ok();
}

void Bucket::Expire(int64_t now_ms) {
  if (idle_timeout_ms_ <= 0) return;
  MutexLock lock(mu_);
  ExpireLocked(now_ms);
  PublishLocked();
}

size_t Bucket::MemoryBytes() const {
  MutexLock lock(mu_);
  return arena_.in_use() + heap_;
}

void Bucket::ExpireLocked(int64_t now_ms) {
  if (idle_timeout_ms_ <= 0) return;
  // Writes are stamped with a clock that may step back; stop at the first
  // entry that is still live rather than scanning everything.
  while (order_.oldest != nullptr) {
    auto it = entries_.find(order_.oldest->first);
    if (!ExpiredLocked(it->second.entry, now_ms)) break;
    EraseLocked(it);
  }
}

size_t Bucket::Size() const {
  MutexLock lock(mu_);
  return entries_.size();
}

std::vector<std::pair<std::string, Bucket::Entry>> Bucket::Page(const std::string& after,
                                                                size_t limit, int64_t now_ms) {
  MutexLock lock(mu_);
  std::vector<const std::string*> keys;
  keys.reserve(entries_.size());
  for (const auto& [k, slot] : entries_) {
    if (k > after && !ExpiredLocked(slot.entry, now_ms)) keys.push_back(&k);
  }
  const size_t n = std::min(limit, keys.size());
  std::partial_sort(keys.begin(), keys.begin() + static_cast<ptrdiff_t>(n), keys.end(),
                    [](const std::string* a, const std::string* b) { return *a < *b; });
  std::vector<std::pair<std::string, Entry>> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.emplace_back(*keys[i], entries_.at(*keys[i]).entry);
  return out;
}

Bucket* BucketRegistry::Add(const std::string& name, int64_t idle_timeout_ms) {
  auto& slot = buckets_[name];
  slot = std::make_unique<Bucket>(name, idle_timeout_ms);
  return slot.get();
}

Bucket* BucketRegistry::Find(const std::string& name) const {
  auto it = buckets_.find(name);
  return it == buckets_.end() ? nullptr : it->second.get();
}

std::vector<Bucket*> BucketRegistry::All() const {
  std::vector<Bucket*> out;
  for (const auto& [n, b] : buckets_) out.push_back(b.get());
  return out;
}

}  // namespace kayak
