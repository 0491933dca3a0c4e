#include "core/bucket.h"

#include <algorithm>

#include "checkpoint/format.h"

namespace kayak {

Status Bucket::Update(const std::string& key, int64_t now_ms,
                      const std::function<Status(Json& value, bool existed)>& update,
                      Json* result) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  if (it != entries_.end() && ExpiredLocked(it->second.entry, now_ms)) {
    EraseLocked(it);
    it = entries_.end();
  }
  if (it == entries_.end()) {
    Json value;  // null
    KAYAK_RETURN_IF_ERROR(update(value, false));
    auto [ins, ok] = entries_.emplace(key, Slot{});
    (void)ok;
    ins->second.entry.value = std::move(value);
    ins->second.entry.last_write_ms = now_ms;
    write_order_.push_back(&ins->first);
    ins->second.order = std::prev(write_order_.end());
    if (result != nullptr) *result = ins->second.entry.value;
    changed_ = true;
    return Status::Ok();
  }
  Json value = it->second.entry.value;
  KAYAK_RETURN_IF_ERROR(update(value, true));
  it->second.entry.value = std::move(value);
  it->second.entry.last_write_ms = now_ms;
  write_order_.splice(write_order_.end(), write_order_, it->second.order);
  if (result != nullptr) *result = it->second.entry.value;
  changed_ = true;
  return Status::Ok();
}

std::optional<Bucket::Entry> Bucket::Get(const std::string& key, int64_t now_ms) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  if (ExpiredLocked(it->second.entry, now_ms)) {
    EraseLocked(it);
    return std::nullopt;
  }
  return it->second.entry;
}

void Bucket::EraseLocked(std::unordered_map<std::string, Slot>::iterator it) {
  write_order_.erase(it->second.order);
  entries_.erase(it);
  changed_ = true;
}

bool Bucket::StateChanged() const {
  std::lock_guard lock(mu_);
  return changed_;
}

void Bucket::SaveState(std::string* out) {
  std::lock_guard lock(mu_);
  checkpoint::Encoder e;
  e.U64(entries_.size());
  for (const std::string* key : write_order_) {
    const Entry& entry = entries_.at(*key).entry;
    e.Str(*key);
    e.I64(entry.last_write_ms);
    e.Str(entry.value.dump());
  }
  out->append(e.out());
  changed_ = false;
}

Status Bucket::RestoreState(std::string_view data) {
  std::lock_guard lock(mu_);
  entries_.clear();
  write_order_.clear();
  checkpoint::Decoder d(data);
  uint64_t n = 0;
  if (!d.U64(&n)) return Status::Corruption("bucket '" + name_ + "' state is short");
  for (uint64_t i = 0; i < n; ++i) {
    std::string key, value;
    int64_t last_write = 0;
    if (!d.Str(&key) || !d.I64(&last_write) || !d.Str(&value)) {
      return Status::Corruption("bucket '" + name_ + "' state is short");
    }
    Json v = Json::parse(value, nullptr, false);
    if (v.is_discarded()) return Status::Corruption("bucket '" + name_ + "' holds bad JSON");
    auto [it, fresh] = entries_.emplace(std::move(key), Slot{});
    if (!fresh) return Status::Corruption("bucket '" + name_ + "' state repeats a key");
    it->second.entry.value = std::move(v);
    it->second.entry.last_write_ms = last_write;
    write_order_.push_back(&it->first);
    it->second.order = std::prev(write_order_.end());
  }
  if (!d.done()) return Status::Corruption("bucket '" + name_ + "' state has trailing bytes");
  changed_ = false;
  return Status::Ok();
}

void Bucket::Expire(int64_t now_ms) {
  if (idle_timeout_ms_ <= 0) return;
  std::lock_guard lock(mu_);
  // Writes are stamped with a clock that may step back; stop at the first
  // entry that is still live rather than scanning everything.
  while (!write_order_.empty()) {
    auto it = entries_.find(*write_order_.front());
    if (!ExpiredLocked(it->second.entry, now_ms)) break;
    EraseLocked(it);
  }
}

size_t Bucket::Size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

std::vector<std::pair<std::string, Bucket::Entry>> Bucket::Page(const std::string& after,
                                                                size_t limit, int64_t now_ms) {
  std::lock_guard lock(mu_);
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
