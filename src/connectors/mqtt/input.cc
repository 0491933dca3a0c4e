// The mqtt input: subscribes to `topics` with a clean session (MQTT 3.1.1,
// libmosquitto). The library's thread reads the socket into a bounded
// buffer the pipeline takes batches from; with the buffer full it stops
// reading, so a pipeline that is behind holds the broker back and nothing
// piles up in kayak. Not rewindable: what is in flight at a crash is lost.
// docs/components.md, "mqtt"; docs/durability.md, "Brokers".
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "connectors/shared/broker.h"
#include "common/clock.h"
#include "common/json_text.h"
#include "common/log.h"
#include "connectors/mqtt/client.h"
#include "kayak/component.h"
#include "kayak/thread_annotations.h"

namespace kayak {

namespace {

class MqttInput final : public Input {
 public:
  MqttInput(mqtt::Address address, std::vector<std::string> topics, int qos, int64_t batch_size,
            int64_t batch_wait_ms, int64_t buffer, BrokerPayload payload,
            const ComponentContext& ctx)
      : topics_(std::move(topics)),
        qos_(qos),
        batch_size_(static_cast<size_t>(batch_size)),
        batch_wait_ms_(batch_wait_ms),
        buffer_(static_cast<size_t>(buffer)),
        payload_(std::move(payload)),
        ctx_(ctx),
        client_(std::move(address), "mqtt input",
                mqtt::Callbacks{this, &MqttInput::OnConnected, &MqttInput::OnMessage, nullptr}) {
    for (const auto& t : topics_) topic_ptrs_.push_back(const_cast<char*>(t.c_str()));
  }

  ~MqttInput() override {
    {
      MutexLock lock(mu_);
      closing_ = true;
    }
    room_.notify_all();  // a callback waiting for room gives up
  }

  // Up to wait_ms for the first message, then up to batch_wait_ms for a
  // fuller batch, from the buffer the library's thread fills.
  Status Read(Batch* out, int64_t wait_ms, bool* finished) override {
    (void)finished;
    KAYAK_RETURN_IF_ERROR(client_.StartThread());
    MutexLock lock(mu_);
    if (!lock.WaitFor(arrived_, std::chrono::milliseconds(wait_ms), [&]() KAYAK_REQUIRES(mu_) {
          return !queue_.empty() || !refused_.empty();
        })) {
      lock.Unlock();
      if (!client_.up()) return Status::Unavailable("mqtt input: " + client_.down_reason());
      return Status::Ok();
    }
    if (queue_.size() < batch_size_ && batch_wait_ms_ > 0) {
      lock.WaitFor(arrived_, std::chrono::milliseconds(batch_wait_ms_),
                        [&]() KAYAK_REQUIRES(mu_) { return queue_.size() >= batch_size_; });
    }
    const size_t n = std::min(batch_size_, queue_.size());
    for (size_t i = 0; i < n; ++i) {
      out->messages.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    for (auto& r : refused_) Refuse(r.message, std::move(r.reason));
    refused_.clear();
    lock.Unlock();
    room_.notify_one();
    return Status::Ok();
  }

  std::string Position() const override {
    std::string s = client_.up() ? "subscribed to " : "not connected; topics ";
    for (size_t i = 0; i < topics_.size(); ++i) s += (i > 0 ? ", " : "") + topics_[i];
    MutexLock lock(mu_);
    return s + "; " + std::to_string(queue_.size()) + " messages buffered";
  }

 private:
  // After every (re)connection, on the library's thread: a clean session has
  // no subscriptions.
  static void OnConnected(void* self) {
    auto* in = static_cast<MqttInput*>(self);
    const int rc = mosquitto_subscribe_multiple(in->client_.handle(), nullptr,
                                                static_cast<int>(in->topic_ptrs_.size()),
                                                in->topic_ptrs_.data(), in->qos_, 0, nullptr);
    if (rc != MOSQ_ERR_SUCCESS) {
      KLOG_ERROR("mqtt input: subscribing: {}", mosquitto_strerror(rc));
    } else {
      KLOG_INFO("mqtt input: subscribed to {} topic filters at QoS {}", in->topics_.size(),
                in->qos_);
    }
  }

  // On the library's thread. With the buffer full it waits for room: the
  // socket is not read, and the broker holds what it has for this session
  // (up to its own queue limit; past it, it drops).
  static void OnMessage(void* self, const mosquitto_message* msg) {
    auto* in = static_cast<MqttInput*>(self);
    std::string meta;
    if (!in->payload_.meta_field.empty()) {
      meta = "{\"topic\":";
      jtext::AppendString(&meta, msg->topic != nullptr ? msg->topic : "");
      meta += ",\"qos\":" + std::to_string(msg->qos) +
              ",\"retain\":" + (msg->retain ? "true" : "false") + "}";
    }
    const std::string_view data(static_cast<const char*>(msg->payload),
                                static_cast<size_t>(std::max(msg->payloadlen, 0)));
    std::string payload, why;
    const bool refused = !MakeBrokerPayload(data, in->payload_, meta, &payload, &why);
    if (refused && in->ctx_.stats != nullptr) in->ctx_.stats->RecordError("mqtt input: " + why);
    Message m(refused ? std::string(data) : std::move(payload), in->ctx_.clock->NowMs());
    if (!refused) m.MarkJson();
    MutexLock lock(in->mu_);
    while (in->queue_.size() + in->refused_.size() >= in->buffer_ && !in->closing_) {
      lock.Wait(in->room_);
    }
    if (in->closing_) return;
    if (refused) {
      // For the pipeline's dead letters, handed over by Read (the pipeline's
      // thread); dropped there when it has none.
      in->refused_.push_back(Rejected{std::move(m), std::move(why)});
      lock.Unlock();
      in->arrived_.notify_one();
      return;
    }
    in->queue_.push_back(std::move(m));
    const bool wake = in->queue_.size() == 1 || in->queue_.size() >= in->batch_size_;
    lock.Unlock();
    if (wake) in->arrived_.notify_one();
  }

  const std::vector<std::string> topics_;
  std::vector<char*> topic_ptrs_;
  const int qos_;
  const size_t batch_size_;
  const int64_t batch_wait_ms_;
  const size_t buffer_;
  const BrokerPayload payload_;
  ComponentContext ctx_;
  mutable Mutex mu_;
  std::condition_variable arrived_, room_;
  std::deque<Message> queue_ KAYAK_GUARDED_BY(mu_);  // received, not yet read
  std::vector<Rejected> refused_ KAYAK_GUARDED_BY(mu_);  // not JSON with non_json: error
  bool closing_ KAYAK_GUARDED_BY(mu_) = false;
  mqtt::Client client_;        // last: its thread stops before the rest goes
};

}  // namespace

ComponentDef MqttInputDef() {
  ComponentDef d;
  d.kind = "input";
  d.type = "mqtt";
  d.help =
      "Subscribes to `topics` (wildcards + and #) at `qos` with a clean session (MQTT 3.1.1, "
      "libmosquitto). The library's thread reads into a bounded buffer (`buffer`) the "
      "pipeline takes batches from; when it is full the socket is not read, so a slow "
      "pipeline holds the broker back instead of filling kayak's memory. Not rewindable: "
      "messages in flight at a crash are lost, and so is what the broker queued for a session "
      "it dropped. A payload that is JSON is the message; another is wrapped or refused "
      "(`non_json`).";
  d.checkpoint = "nothing: state stays consistent; messages in flight at a crash are lost";
  d.bad_input = "a payload that is not JSON is wrapped, or counted as an error and sent to the "
                "pipeline's dead letters when it has them (`non_json`); an "
                "unreachable broker is retried with backoff (the card says retrying) and the "
                "subscriptions are made again on every connection; a refused login is an error "
                "on the card";
  d.props = mqtt::ConnectionProps();
  d.props.push_back(PropDef{"topics", PropType::kStringList, true, "",
                            "topic filters to subscribe to"}
                        .NonEmpty());
  d.props.push_back(PropDef{"qos", PropType::kInt, false, "1",
                            "the subscription's quality of service: 0, 1 or 2"}
                        .Range(0, 2));
  d.props.push_back(PropDef{"batch_size", PropType::kInt, false, "1000",
                            "most messages per batch", PropRole::kTuning}
                        .Range(1, 100000));
  d.props.push_back(PropDef{"buffer", PropType::kInt, false, "50000",
                            "messages received and not yet read by the pipeline; when full, "
                            "the socket is not read until there is room",
                            PropRole::kTuning}
                        .Range(1, 10000000));
  d.props.push_back(PropDef{"batch_wait_ms", PropType::kInt, false, "10",
                            "how long to wait to fill a batch once it has a message",
                            PropRole::kTuning}
                        .Range(0, 60000)
                        .Unit("ms"));
  for (auto& p : BrokerPayloadProps("topic, qos and retain flag")) d.props.push_back(std::move(p));
  d.make_input = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Input> {
    mqtt::Address a = mqtt::ReadAddress(o, "kayak-" + ctx.pipeline_id);
    if (o.failed()) return nullptr;
    return std::make_unique<MqttInput>(std::move(a), o.Strings("topics"),
                                       static_cast<int>(o.Int("qos")), o.Int("batch_size"),
                                       o.Int("batch_wait_ms"), o.Int("buffer"), ReadBrokerPayload(o), ctx);
  };
  return d;
}

}  // namespace kayak
