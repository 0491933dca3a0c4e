// http_poll: requests a URL every interval and turns the JSON answer into
// messages: the whole body, or each element of the array at `split`. Not
// rewindable (SPEC 5.1): what a restart asks for next is whatever the
// endpoint answers then.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/clock.h"
#include "common/json_util.h"
#include "connectors/shared/http_client.h"
#include "connectors/shared/tls.h"
#include "kayak/component.h"

namespace kayak {

namespace {

class HttpPollInput final : public Input {
 public:
  HttpPollInput(HttpUrl url, std::string method, HttpHeaders headers, std::string body,
                FieldPath split, int64_t interval_ms, int64_t timeout_ms, TlsOptions tls,
                const ComponentContext& ctx)
      : client_(std::move(url), timeout_ms, std::move(tls)),
        method_(std::move(method)),
        headers_(std::move(headers)),
        body_(std::move(body)),
        split_(std::move(split)),
        interval_ms_(interval_ms),
        clock_(ctx.clock) {}

  Status Read(Batch* out, int64_t wait_ms, bool* finished) override {
    (void)finished;
    const int64_t now = MonotonicMs();
    if (now < next_poll_ms_) {
      const int64_t wait = std::min(wait_ms, next_poll_ms_ - now);
      std::this_thread::sleep_for(std::chrono::milliseconds(wait));
      if (MonotonicMs() < next_poll_ms_) return Status::Ok();
    }
    next_poll_ms_ = MonotonicMs() + interval_ms_;
    auto res = client_.Request(method_, headers_, body_);
    if (!res.ok()) return res.status();  // Unavailable: retried with backoff, on the card
    ++polls_;
    if (res->status < 200 || res->status >= 300) {
      return Status::Unavailable("HTTP " + std::to_string(res->status) + " from the endpoint: " +
                                 res->body.substr(0, 200));
    }
    auto j = Json::parse(res->body, nullptr, false);
    if (j.is_discarded()) return Status::Unavailable("the answer is not JSON");
    const Json* items = split_.empty() ? &j : LookupPath(j, split_);
    const int64_t ts = clock_->NowMs();
    if (!split_.empty()) {
      if (items == nullptr || !items->is_array()) {
        return Status::Unavailable("the answer has no array at `split` (" +
                                   FieldPathToString(split_) + ")");
      }
      for (const auto& item : *items) out->messages.emplace_back(DumpJson(item), ts);
    } else {
      out->messages.emplace_back(DumpJson(j), ts);
    }
    return Status::Ok();
  }

  std::string Position() const override { return std::to_string(polls_) + " polls"; }

 private:
  HttpClient client_;
  const std::string method_;
  const HttpHeaders headers_;
  const std::string body_;
  const FieldPath split_;
  const int64_t interval_ms_;
  const Clock* clock_;
  int64_t next_poll_ms_ = 0;
  uint64_t polls_ = 0;
};

}  // namespace

ComponentDef HttpPollInputDef() {
  ComponentDef d;
  d.kind = "input";
  d.type = "http_poll";
  d.help = "Requests `url` every `interval_ms` and emits the JSON answer as one message, or each "
           "element of the array at `split` as a message, over http or https (the `tls` block). Not "
           "rewindable: a restart polls again, it does not replay earlier answers.";
  d.checkpoint = "nothing (not rewindable): state stays consistent, in-flight answers are lost "
                 "at a crash";
  d.bad_input = "a connection error, a timeout, a non-2xx status, an answer that is not JSON or "
                "lacks the `split` array is an error on the card and retried with backoff";
  d.props = {
      PropDef{"url", PropType::kString, true, "", "http://host[:port]/path?query or https://..."}
          .Address(),
      PropDef{"method", PropType::kString, false, "GET", "GET or POST"}.OneOf({"GET", "POST"}),
      PropDef{"headers", PropType::kStringMap, false, "", "request headers", PropRole::kTuning}
          .Secret(),
      {"body", PropType::kString, false, "", "the request body (for POST)"},
      {"split", PropType::kString, false, "",
       "a field path (such as data.items) to an array: one message per element"},
      PropDef{"interval_ms", PropType::kInt, false, "5000", "time between polls", PropRole::kTuning}.Range(10, 86400000).Unit("ms"),
      PropDef{"timeout_ms", PropType::kInt, false, "10000", "connect, send and answer within this",
       PropRole::kTuning}.Range(1, 600000).Unit("ms"),
      TlsPropDef(),
  };
  d.make_input = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Input> {
    auto url = ParseHttpUrl(o.String("url"));
    if (!url.ok()) o.Error("url", url.status().message());
    const std::string method = o.String("method");
    FieldPath split;
    if (!o.String("split").empty() && !ParseFieldPath(o.String("split"), &split)) {
      o.Error("split", "is not a field path (such as data.items)");
    }
    TlsOptions tls = ReadTlsOptions(o);
    if (o.failed()) return nullptr;
    return std::make_unique<HttpPollInput>(url.value(), method, o.StringMap("headers"),
                                           o.String("body"), split, o.Int("interval_ms"),
                                           o.Int("timeout_ms"), std::move(tls), ctx);
  };
  return d;
}

}  // namespace kayak
