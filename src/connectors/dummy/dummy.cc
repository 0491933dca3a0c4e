// dummy: a generator of messages from a template with a sequence number.
#include <algorithm>
#include <charconv>
#include <thread>

#include "common/clock.h"
#include "kayak/component.h"

namespace kayak {

namespace {

class DummyInput final : public Input {
 public:
  DummyInput(double rate_per_sec, int64_t count, std::string tmpl, int64_t batch_size,
             const Clock* clock)
      : rate_(rate_per_sec), count_(count), batch_size_(batch_size), clock_(clock) {
    // Split the template once so each message is built by appends only.
    size_t pos = 0;
    while (true) {
      const size_t seq = tmpl.find("{{seq}}", pos);
      const size_t now = tmpl.find("{{now_ms}}", pos);
      const size_t next = std::min(seq, now);
      if (next == std::string::npos) break;
      parts_.push_back({tmpl.substr(pos, next - pos), next == seq ? kSeq : kNow});
      pos = next + (next == seq ? 7 : 10);
    }
    parts_.push_back({tmpl.substr(pos), kNone});
  }

  Status Open() override {
    start_mono_ms_ = MonotonicMs();
    produced_at_open_ = produced_;  // the rate counts from here (after a restore too)
    return Status::Ok();
  }

  Status Read(Batch* out, int64_t wait_ms, bool* finished) override {
    int64_t n = batch_size_;
    if (count_ > 0) n = std::min(n, count_ - produced_);
    if (rate_ > 0) {
      const int64_t elapsed = MonotonicMs() - start_mono_ms_;
      const int64_t allowed = static_cast<int64_t>(static_cast<double>(elapsed) * rate_ / 1000.0) + 1;
      const int64_t since_open = produced_ - produced_at_open_;
      if (allowed <= since_open) {
        const int64_t due_ms =
            static_cast<int64_t>(static_cast<double>(since_open) * 1000.0 / rate_) - elapsed;
        std::this_thread::sleep_for(
            std::chrono::milliseconds(std::clamp<int64_t>(due_ms, 1, wait_ms)));
        return Status::Ok();
      }
      n = std::min(n, allowed - since_open);
    }
    const int64_t now = clock_->NowMs();
    out->messages.reserve(out->messages.size() + static_cast<size_t>(std::max<int64_t>(n, 0)));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t seq = ++produced_;
      std::string payload;
      payload.reserve(parts_[0].text.size() + 32);
      for (const auto& p : parts_) {
        payload += p.text;
        if (p.after == kSeq) payload += std::to_string(seq);
        if (p.after == kNow) payload += std::to_string(now);
      }
      out->messages.emplace_back(std::move(payload), now);
    }
    if (count_ > 0 && produced_ >= count_) *finished = true;
    return Status::Ok();
  }

  std::string Position() const override { return "generated " + std::to_string(produced_); }

  // The sequence number generated last: a restart continues after it, so a
  // finished `count` stays finished and the numbers after the checkpoint
  // come again (with a new {{now_ms}}).
  bool Rewindable() const override { return true; }
  std::string SavePosition() const override {
    return "{\"seq\":" + std::to_string(produced_) + "}";
  }
  Status RestorePosition(std::string_view position) override {
    int64_t seq = -1;
    const std::string_view head = "{\"seq\":";
    if (position.size() > head.size() + 1 && position.substr(0, head.size()) == head &&
        position.back() == '}') {
      const std::string_view digits =
          position.substr(head.size(), position.size() - head.size() - 1);
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), seq);
      if (ec != std::errc() || end != digits.data() + digits.size()) seq = -1;
    }
    if (seq < 0) return Status::Corruption("dummy input: unreadable checkpointed position");
    produced_ = seq;
    return Status::Ok();
  }

 private:
  enum Placeholder { kNone, kSeq, kNow };
  struct Part {
    std::string text;
    Placeholder after;
  };
  const double rate_;
  const int64_t count_;
  int64_t produced_at_open_ = 0;
  const int64_t batch_size_;
  const Clock* clock_;
  std::vector<Part> parts_;
  int64_t produced_ = 0;
  int64_t start_mono_ms_ = 0;
};

}  // namespace

ComponentDef DummyInputDef() {
  ComponentDef d;
  d.kind = "input";
  d.type = "dummy";
  d.help = "Generates messages from a template; `{{seq}}` is the sequence number (1, 2, ...) "
           "and `{{now_ms}}` the generation time.";
  d.checkpoint = "the last sequence number generated: a restart continues after it (a finished "
                 "`count` stays finished); what was generated after the checkpoint is "
                 "generated again with the same numbers";
  d.bad_input =
      "nothing to read; it cannot get bad input";
  d.props = {
      PropDef{"rate_per_sec", PropType::kNumber, false, "0", "messages per second; 0 = as fast as it can",
       PropRole::kTuning}.AtLeast(0).Unit("messages/s"),
      PropDef{"count", PropType::kInt, false, "0", "messages to generate, then finish; 0 = no end"}.AtLeast(0),
      {"template", PropType::kString, false, R"({"seq":{{seq}}})", "the payload of each message"},
      PropDef{"batch_size", PropType::kInt, false, "100", "most messages per batch", PropRole::kTuning}.Range(1, 100000),
  };
  d.make_input = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Input> {
    if (o.failed()) return nullptr;
    return std::make_unique<DummyInput>(o.Number("rate_per_sec"), o.Int("count"),
                                        o.String("template"), o.Int("batch_size"), ctx.clock);
  };
  return d;
}

}  // namespace kayak
