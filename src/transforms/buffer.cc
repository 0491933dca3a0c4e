// buffer: holds messages until max_messages, max_bytes or max_secs, then
// releases them as one batch.
#include "common/format.h"
#include "common/clock.h"
#include "components.h"
#include "transforms/field_access.h"

namespace kayak {

namespace {

// When a limit is not given the buffer still releases at these, so it never
// grows without bound.
constexpr int64_t kDefaultMaxMessages = 100000;
constexpr int64_t kDefaultMaxBytes = 64 << 20;

// One held message of a saved state: the fields SaveState writes.
bool DecodeHeld(checkpoint::Decoder* d, Message* out) {
  std::string payload, key;
  int64_t ts = 0;
  uint64_t headers = 0;
  if (!d->Str(&payload) || !d->I64(&ts) || !d->Str(&key) || !d->U64(&headers)) return false;
  Message m(std::move(payload), ts);
  m.set_key(std::move(key));
  for (uint64_t h = 0; h < headers; ++h) {
    std::string k, v;
    if (!d->Str(&k) || !d->Str(&v)) return false;
    m.headers().emplace_back(std::move(k), std::move(v));
  }
  *out = std::move(m);
  return true;
}

class BufferTransform final : public Transform {
 public:
  BufferTransform(size_t max_messages, size_t max_bytes, int64_t max_ms,
                  const PartitionOwner* owner, const Clock* clock)
      : max_messages_(max_messages),
        max_bytes_(max_bytes),
        max_ms_(max_ms),
        owner_(owner),
        clock_(clock) {}

  Status Process(Batch* batch) override {
    if (owner_ != nullptr) {
      // Held messages move with the partition of their Kafka key: one
      // without a key names none.
      for (size_t i = 0; i < batch->messages.size(); ++i) {
        if (batch->messages[i].key().empty()) {
          return Status::Invalid(AtMessage(
              i, "in a cluster a buffer holds messages by the partition of their Kafka key, "
                 "and this one has no key"));
        }
      }
    }
    if (held_.empty() && !batch->empty()) first_ms_ = clock_->NowMs();
    if (!batch->empty()) changed_ = true;
    for (auto& m : batch->messages) {
      held_bytes_ += m.ByteSize();
      held_.push_back(std::move(m));
    }
    batch->messages.clear();
    if (Full()) Release(batch);
    return Status::Ok();
  }

  void Tick(int64_t now_ms, Batch* out) override {
    // While partitions are handed over, what it holds of them is in the
    // checkpoint their next owner restores and releases.
    if (owner_ != nullptr && owner_->StateHeld()) return;
    if (!held_.empty() && max_ms_ > 0 && now_ms - first_ms_ >= max_ms_) Release(out);
  }

  void Drain(Batch* out) override { Release(out); }

  bool Stateful() const override { return true; }
  size_t MemoryBytes() const override {
    return held_bytes_ + held_.capacity() * sizeof(Message);
  }
  bool StateChanged() const override { return changed_; }

  void SaveState(std::string* out) override {
    checkpoint::Encoder e;
    e.I64(first_ms_);
    e.U64(held_.size());
    for (auto& m : held_) {
      e.Str(m.payload());
      e.I64(m.ts_ms());
      e.Str(m.key());
      e.U64(m.headers().size());
      for (const auto& [k, v] : m.headers()) {
        e.Str(k);
        e.Str(v);
      }
    }
    e.AppendTo(out);
    changed_ = false;
  }

  Status RestoreState(std::string_view data) override {
    checkpoint::Decoder d(data);
    uint64_t n = 0;
    held_.clear();
    held_bytes_ = 0;
    if (!d.I64(&first_ms_) || !d.U64(&n)) return Status::Corruption("buffer state is short");
    if (n > data.size() / 24) return Status::Corruption("buffer state is short");
    for (uint64_t i = 0; i < n; ++i) {
      Message m;
      if (!DecodeHeld(&d, &m)) return Status::Corruption("buffer state is short");
      held_bytes_ += m.ByteSize();
      held_.push_back(std::move(m));
    }
    if (!d.done()) return Status::Corruption("buffer state has trailing bytes");
    changed_ = false;
    return Status::Ok();
  }

  Sharding ShardedAs() const override { return Sharding::kMessages; }

  Status ReplaceKeys(const std::function<bool(const std::string& key)>& belongs,
                     const std::vector<std::string_view>& fulls) override {
    // Read before anything changes: a bad slice leaves the buffer as it was.
    std::vector<Message> taken;
    int64_t first_ms = 0;
    for (std::string_view full : fulls) {
      checkpoint::Decoder d(full);
      int64_t slice_first = 0;
      uint64_t n = 0;
      if (!d.I64(&slice_first) || !d.U64(&n) || n > full.size() / 24) {
        return Status::Corruption("buffer slice is short");
      }
      for (uint64_t i = 0; i < n; ++i) {
        Message m;
        if (!DecodeHeld(&d, &m)) return Status::Corruption("buffer slice is short");
        taken.push_back(std::move(m));
      }
      if (!d.done()) return Status::Corruption("buffer slice has trailing bytes");
      if (n > 0 && (first_ms == 0 || slice_first < first_ms)) first_ms = slice_first;
    }
    const size_t before = held_.size();
    std::erase_if(held_, [&](const Message& m) { return belongs(m.key()); });
    if (held_.empty()) first_ms_ = first_ms;
    if (!taken.empty() && first_ms < first_ms_) first_ms_ = first_ms;
    for (auto& m : taken) held_.push_back(std::move(m));
    if (held_.size() != before || !taken.empty()) changed_ = true;
    held_bytes_ = 0;
    for (const auto& m : held_) held_bytes_ += m.ByteSize();
    return Status::Ok();
  }

 private:
  bool Full() const {
    return (max_messages_ > 0 && held_.size() >= max_messages_) ||
           (max_bytes_ > 0 && held_bytes_ >= max_bytes_);
  }

  void Release(Batch* out) {
    if (!held_.empty()) changed_ = true;
    if (out->messages.empty()) {
      out->messages.swap(held_);
    } else {
      for (auto& m : held_) out->messages.push_back(std::move(m));
      held_.clear();
    }
    held_bytes_ = 0;
  }

  const size_t max_messages_;
  const size_t max_bytes_;
  const int64_t max_ms_;
  const PartitionOwner* owner_;  // in a cluster (docs/cluster.md); null on one server
  const Clock* clock_;
  std::vector<Message> held_;
  size_t held_bytes_ = 0;
  int64_t first_ms_ = 0;  // when the oldest held message arrived
  bool changed_ = false;  // since the last SaveState
};

}  // namespace

ComponentDef BufferDef() {
  ComponentDef d;
  d.kind = "transform";
  d.type = "buffer";
  d.help = "Holds messages and releases everything held as one batch once `max_messages` or "
           "`max_bytes` is reached, or `max_secs` after the oldest held message arrived. Give "
           "at least one; a limit not given is 100000 messages or 64 MiB, so a buffer never "
           "grows without bound. On a graceful stop without a state dir it releases what it "
           "holds.";
  d.checkpoint = "the held messages (in a cluster each moves with its Kafka key's partition)";
  d.bad_input =
      "none: it holds any payload; in a cluster a message without a Kafka key is a transform "
      "error";
  d.props = {
      PropDef{"max_messages", PropType::kInt, false, "100000", "release at this many messages",
       PropRole::kTuning}.Range(1, 1000000),
      PropDef{"max_bytes", PropType::kInt, false, "67108864", "release at this many payload bytes",
       PropRole::kTuning}.Range(1, 1073741824).Unit("bytes"),
      PropDef{"max_secs", PropType::kNumber, false, "", "release this long after the oldest arrived",
       PropRole::kTuning}.Above(0).Unit("s"),
  };
  d.make_transform = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Transform> {
    if (!o.Has("max_messages") && !o.Has("max_bytes") && !o.Has("max_secs")) {
      o.Error("max_messages", "give at least one of max_messages, max_bytes, max_secs");
      return nullptr;
    }
    return std::make_unique<BufferTransform>(
        static_cast<size_t>(o.Has("max_messages") ? o.Int("max_messages") : kDefaultMaxMessages),
        static_cast<size_t>(o.Has("max_bytes") ? o.Int("max_bytes") : kDefaultMaxBytes),
        o.Has("max_secs") ? static_cast<int64_t>(o.Number("max_secs") * 1000) : 0,
        ctx.partitions, ctx.clock);
  };
  return d;
}

}  // namespace kayak
