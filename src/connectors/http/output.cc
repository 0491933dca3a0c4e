// http: POSTs each batch to a URL, as one JSON array or as NDJSON. A batch
// counts as written only on a 2xx; 429, 5xx and connection errors are
// retried (holding the pipeline under checkpointing); another 4xx is a
// permanent failure. Every request carries an Idempotency-Key derived from
// the batch's place in the output's stream, so a batch replayed after a
// restart carries the key it had before.
#include <cinttypes>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "common/format.h"
#include "common/json_util.h"
#include "connectors/shared/http_client.h"
#include "connectors/shared/tls.h"
#include "kayak/component.h"

namespace kayak {

namespace {

class HttpOutput final : public Output {
 public:
  HttpOutput(HttpUrl url, std::string method, HttpHeaders headers, bool ndjson, int64_t timeout_ms,
             std::string stream_id, TlsOptions tls)
      : client_(std::move(url), timeout_ms, std::move(tls)),
        method_(std::move(method)),
        headers_(std::move(headers)),
        ndjson_(ndjson),
        stream_id_(std::move(stream_id)) {}

  Status Write(const Batch& batch) override {
    body_.clear();
    uint32_t crc = 0;
    if (!ndjson_) body_.push_back('[');
    for (size_t i = 0; i < batch.messages.size(); ++i) {
      const std::string& p = batch.messages[i].payload();
      if (i > 0) body_.push_back(ndjson_ ? '\n' : ',');
      body_.append(p);
      crc = checkpoint::Crc32c(p.data(), p.size(), crc);
    }
    if (!ndjson_) body_.push_back(']');
    if (ndjson_) body_.push_back('\n');
    // The key: this output, the number of messages before the batch, and the
    // batch's content. A replay from a checkpoint starts from the same count.
    char key[96];
    std::snprintf(key, sizeof(key), "%s-%" PRIu64 "-%zu-%08x", stream_id_.c_str(), sent_,
                  batch.messages.size(), crc);
    HttpHeaders h = headers_;
    h.emplace_back("Content-Type", ndjson_ ? "application/x-ndjson" : "application/json");
    h.emplace_back("Idempotency-Key", key);
    auto res = client_.Request(method_, h, body_);
    if (!res.ok()) return res.status();
    const unsigned code = res->status;
    if (code >= 200 && code < 300) {
      sent_ += batch.messages.size();
      return Status::Ok();
    }
    std::string detail = res->body.substr(0, 200);
    if (code == 429 || code >= 500) {
      return Status::Unavailable("HTTP " + std::to_string(code) + " from the endpoint: " + detail);
    }
    return Status::Invalid("HTTP " + std::to_string(code) +
                           " from the endpoint (a permanent failure; fix the request or the "
                           "endpoint): " + detail);
  }

  // Writes are synchronous: the state is only the count that keys batches.
  Status Checkpoint(uint64_t id, std::string* state) override {
    (void)id;
    *state = DumpJson(nlohmann::json{{"sent", sent_}});
    return Status::Ok();
  }
  Status RestoreState(std::string_view state) override {
    auto j = nlohmann::json::parse(state, nullptr, false);
    if (!j.is_object() || !j["sent"].is_number_unsigned()) {
      return Status::Corruption("http output: unreadable checkpointed state");
    }
    sent_ = j["sent"].get<uint64_t>();
    return Status::Ok();
  }

 private:
  HttpClient client_;
  const std::string method_;
  const HttpHeaders headers_;
  const bool ndjson_;
  const std::string stream_id_;
  uint64_t sent_ = 0;  // messages the endpoint took, since the start of the stream
  std::string body_;   // reused for every batch
};

}  // namespace

ComponentDef HttpOutputDef() {
  ComponentDef d;
  d.kind = "output";
  d.type = "http";
  d.help = "Sends each batch in one request to `url`, as a JSON array or as NDJSON, with an "
           "`Idempotency-Key` header made of the output's identity, the count of messages sent "
           "before the batch and a checksum of the batch; a batch replayed after a restart from "
           "a checkpoint carries the same key when its content is the same. http or https "
           "(the `tls` block).";
  d.checkpoint = "the count of messages the endpoint took (it keys the batches)";
  d.bad_input = "connection errors, timeouts, 429 and 5xx are retried with backoff (under "
                "checkpointing until the endpoint takes the batch, holding the pipeline); any "
                "other 4xx is a permanent failure shown on the card (without a state directory "
                "the batch is dropped and counted)";
  d.props = {
      PropDef{"url", PropType::kString, true, "", "http://host[:port]/path or https://..."}
          .Address(),
      PropDef{"method", PropType::kString, false, "POST", "POST or PUT"}.OneOf({"POST", "PUT"}),
      PropDef{"headers", PropType::kStringMap, false, "", "extra request headers",
              PropRole::kTuning}
          .Secret(),
      PropDef{"format", PropType::kString, false, "array", "array (one JSON array) or ndjson"}.OneOf({"array", "ndjson"}),
      PropDef{"timeout_ms", PropType::kInt, false, "10000", "connect, send and answer within this",
       PropRole::kTuning}.Range(1, 600000).Unit("ms"),
      TlsPropDef(),
  };
  d.make_output = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Output> {
    auto url = ParseHttpUrl(o.String("url"));
    if (!url.ok()) o.Error("url", url.status().message());
    const std::string method = o.String("method");
    const std::string format = o.String("format");
    TlsOptions tls = ReadTlsOptions(o);
    if (o.failed()) return nullptr;
    const std::string id = ctx.pipeline_id + "-" +
                           [&] {
                             char h[16];
                             const std::string u = o.String("url");
                             std::snprintf(h, sizeof(h), "%08x",
                                           checkpoint::Crc32c(u.data(), u.size()));
                             return std::string(h);
                           }();
    return std::make_unique<HttpOutput>(url.value(), method, o.StringMap("headers"),
                                        format == "ndjson", o.Int("timeout_ms"), id,
                                        std::move(tls));
  };
  return d;
}

}  // namespace kayak
