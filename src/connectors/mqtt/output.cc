// The mqtt output: publishes each message to `topic` ({{field}} replaced)
// at `qos`, driving the connection on the output thread. QoS 1: at most
// `max_inflight` unacknowledged, and a batch counts as written once every
// PUBACK is in, so the barrier passes only after the broker has it all.
// docs/components.md, "mqtt".
#include <unordered_set>

#include "connectors/shared/broker.h"
#include "common/clock.h"
#include "common/log.h"
#include "connectors/mqtt/client.h"
#include "kayak/component.h"

namespace kayak {

namespace {

class MqttOutput final : public Output {
 public:
  MqttOutput(mqtt::Address address, FieldTemplate topic, int qos, bool retain,
             int64_t max_inflight, ComponentStats* stats)
      : client_(std::move(address), "mqtt output",
                mqtt::Callbacks{this, &MqttOutput::OnConnected, nullptr, &MqttOutput::OnPublished}),
        topic_(std::move(topic)),
        qos_(qos),
        retain_(retain),
        max_inflight_(static_cast<size_t>(max_inflight)),
        stats_(stats) {
    if (client_.handle() != nullptr) {
      mosquitto_max_inflight_messages_set(client_.handle(), static_cast<unsigned>(max_inflight));
    }
  }

  Status Write(const Batch& batch) override {
    KAYAK_RETURN_IF_ERROR(client_.Ensure());
    mosquitto* m = client_.handle();
    Dropped dropped;
    std::string why;
    for (const auto& msg : batch.messages) {
      const std::string* topic = &topic_.text();
      if (!topic_.fixed()) {
        if (!topic_.Render(msg, &rendered_, &why)) {
          dropped.Add(this, msg, why);
          continue;
        }
        topic = &rendered_;
      }
      // The window: at most max_inflight unacknowledged (and unsent).
      while (inflight_.size() >= max_inflight_) KAYAK_RETURN_IF_ERROR(Serve(100));
      int mid = 0;
      const int rc = mosquitto_publish(m, &mid, topic->c_str(),
                                       static_cast<int>(msg.payload().size()),
                                       msg.payload().data(), qos_, retain_);
      if (rc == MOSQ_ERR_INVAL || rc == MOSQ_ERR_MALFORMED_UTF8 ||
          rc == MOSQ_ERR_PAYLOAD_SIZE || rc == MOSQ_ERR_OVERSIZE_PACKET) {
        dropped.Add(this, msg, std::string("refused: ") + mosquitto_strerror(rc));
        continue;
      }
      KAYAK_RETURN_IF_ERROR(client_.Check(rc, "publishing"));
      inflight_.insert(mid);
    }
    dropped.Report(stats_, "mqtt output", batch.size());
    // Every publish of the batch sent (QoS 0) or acknowledged (QoS 1, 2).
    const int64_t deadline = MonotonicMs() + 30000;
    while (!inflight_.empty()) {
      if (MonotonicMs() > deadline) {
        return Status::Unavailable("mqtt output: " + std::to_string(inflight_.size()) +
                                   " publishes not acknowledged in 30 s");
      }
      KAYAK_RETURN_IF_ERROR(Serve(100));
    }
    return Status::Ok();
  }

  // Keeps the connection alive between batches.
  void Tick(int64_t now_ms) override {
    (void)now_ms;
    if (client_.connected()) (void)Serve(0);
  }

 private:
  Status Serve(int timeout_ms) {
    return client_.Check(mosquitto_loop(client_.handle(), timeout_ms, 1), "writing");
  }

  static void OnConnected(void* self) {
    // A clean session forgets what was in flight: the batch is written again.
    static_cast<MqttOutput*>(self)->inflight_.clear();
  }

  static void OnPublished(void* self, int mid) { static_cast<MqttOutput*>(self)->inflight_.erase(mid); }

  mqtt::Client client_;
  const FieldTemplate topic_;
  const int qos_;
  const bool retain_;
  const size_t max_inflight_;
  ComponentStats* const stats_;
  std::unordered_set<int> inflight_;  // message ids published, not yet done
  std::string rendered_;              // reused
};

}  // namespace

ComponentDef MqttOutputDef() {
  ComponentDef d;
  d.kind = "output";
  d.type = "mqtt";
  d.help =
      "Publishes each message's payload to `topic` at `qos` (MQTT 3.1.1, libmosquitto, clean "
      "session); `{{field}}` in the topic is replaced by that field of the message. A batch "
      "counts as written once every publish is sent (QoS 0) or acknowledged (QoS 1 and 2), "
      "with at most `max_inflight` outstanding.";
  d.checkpoint = "nothing kept: a barrier passes only after every publish before it was "
                 "acknowledged (QoS 1, 2) or sent (QoS 0)";
  d.bad_input = "a message whose topic cannot be made (a missing field, not JSON, an invalid "
                "topic) goes to the pipeline's dead letters (`dead_letter`), or is dropped, and is "
                "counted on the card, never retried; an unreachable "
                "broker, or publishes not acknowledged in 30 s, fail the batch, retried holding "
                "the pipeline (at least once: a retried batch may repeat messages)";
  d.props = mqtt::ConnectionProps();
  d.props.push_back(PropDef{"topic", PropType::kString, true, "",
                            "the topic; `{{field}}` is replaced by that field of the message"}
                        .NonEmpty());
  d.props.push_back(PropDef{"qos", PropType::kInt, false, "1", "0, 1 or 2"}.Range(0, 2));
  d.props.push_back({"retain", PropType::kBool, false, "false", "publish as retained messages"});
  d.props.push_back(PropDef{"max_inflight", PropType::kInt, false, "1000",
                            "most publishes awaiting acknowledgement at once", PropRole::kTuning}
                        .Range(1, 65535));
  d.make_output = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Output> {
    std::string index = ctx.stats != nullptr ? ctx.stats->name() : "outputs[0]";
    std::string id = "kayak-" + ctx.pipeline_id + "-out";
    for (char c : index) {
      if (c >= '0' && c <= '9') id += c;
    }
    mqtt::Address a = mqtt::ReadAddress(o, id);
    FieldTemplate topic;
    std::string error;
    if (!FieldTemplate::Parse(o.String("topic"), &topic, &error)) o.Error("topic", error);
    if (topic.text().find_first_of("+#") != std::string::npos) {
      o.Error("topic", "a topic to publish to has no wildcards (+ or #)");
    }
    if (o.failed()) return nullptr;
    return std::make_unique<MqttOutput>(std::move(a), std::move(topic),
                                        static_cast<int>(o.Int("qos")), o.Bool("retain"),
                                        o.Int("max_inflight"), ctx.stats);
  };
  return d;
}

}  // namespace kayak
