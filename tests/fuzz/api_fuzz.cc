// libFuzzer target over the admin API's router (src/server/api.cc) on a
// running graph: a request (method, target, headers, body) from the bytes,
// checked on its header (RefusedOnHeader), then taken by HandleAsync or
// answered by Handle, as the listener does. Nothing may crash or hang, every
// request is answered exactly once, with a status the API uses, and a JSON
// answer parses, whatever bytes the id, key, query or body held.
//
// The graph is built from components that touch nothing outside the process
// (dummy and pipeline inputs, the stateless and bucket transforms, an output
// that drops what it gets), so the changes a fuzzed PUT makes open no file
// and no connection.
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/graph_manager.h"
#include "sdk/component_list.h"
#include "server/api.h"

namespace kayak {

ComponentDef DummyInputDef();
ComponentDef FilterDef();
ComponentDef MapDef();
ComponentDef RemoveDef();
ComponentDef RenameDef();
ComponentDef BucketTransformDef();
ComponentDef LookupDef();

namespace {

class DiscardOutput final : public Output {
 public:
  Status Write(const Batch&) override { return Status::Ok(); }
};

ComponentList FuzzComponents() {
  ComponentList list;
  for (auto make : {DummyInputDef, FilterDef, MapDef, RemoveDef, RenameDef, BucketTransformDef,
                    LookupDef}) {
    list.Add(make());
  }
  ComponentDef pipeline;
  pipeline.kind = "input";
  pipeline.type = "pipeline";
  pipeline.shape = Shape::kStringOrList;
  pipeline.reads_pipelines = true;
  list.Add(std::move(pipeline));
  ComponentDef discard;
  discard.kind = "output";
  discard.type = "discard";
  discard.make_output = [](const Options&, const ComponentContext&) -> std::unique_ptr<Output> {
    return std::make_unique<DiscardOutput>();
  };
  list.Add(std::move(discard));
  return list;
}

constexpr const char* kGraph = R"(
buckets:
  kept: {max_keys: 1000}
pipelines:
  src:
    input: {dummy: {count: 20}}
    transforms:
      - bucket: {name: kept, key: id, op: set, field: id}
    outputs: [{discard: {}}]
  down:
    input: {pipeline: src}
    transforms:
      - filter: 'id > 3'
    outputs: [{discard: {}}]
)";

struct World {
  ComponentList registry = FuzzComponents();
  std::unique_ptr<GraphManager> graph;
  std::unique_ptr<http::Api> api;

  World() {
    GraphManager::Options o;
    o.registry = &registry;
    graph = std::make_unique<GraphManager>(o);
    ErrorList errors;
    if (!graph->Init(kGraph, "fuzz.yaml", &errors).ok()) {
      std::fprintf(stderr, "api_fuzz: the seed graph does not start: %s\n",
                   errors.ToString().c_str());
      std::abort();
    }
    graph->Start();
    api = std::make_unique<http::Api>(graph.get(), "");
  }
};

World& TheWorld() {
  static World* w = new World();  // lives as long as the process
  return *w;
}

// "METHOD TARGET\nName: value\n...\n\nbody": what a listener would hand over.
bool ParseRequest(std::string_view in, http::Request* req) {
  const size_t eol = in.find('\n');
  std::string_view line = in.substr(0, eol);
  const size_t sp = line.find(' ');
  if (sp == std::string_view::npos) return false;
  const std::string method(line.substr(0, sp));
  const std::string target(line.substr(sp + 1));
  if (target.empty() || target[0] != '/') return false;
  const auto verb = boost::beast::http::string_to_verb(method);
  if (verb == boost::beast::http::verb::unknown) return false;
  req->method(verb);
  req->target(target);
  req->version(11);
  in = eol == std::string_view::npos ? std::string_view() : in.substr(eol + 1);
  while (!in.empty() && in[0] != '\n') {
    const size_t end = in.find('\n');
    const std::string_view field = in.substr(0, end);
    const size_t colon = field.find(':');
    if (colon != std::string_view::npos && colon > 0) {
      std::string_view value = field.substr(colon + 1);
      while (!value.empty() && value[0] == ' ') value.remove_prefix(1);
      req->set(std::string(field.substr(0, colon)), std::string(value));
    }
    in = end == std::string_view::npos ? std::string_view() : in.substr(end + 1);
  }
  if (!in.empty()) in.remove_prefix(1);
  req->body() = std::string(in);
  return true;
}

void CheckAnswer(unsigned status, std::string_view content_type, const std::string& body) {
  if (status < 200 || status > 599) {
    std::fprintf(stderr, "api_fuzz: status %u\n", status);
    std::abort();
  }
  if (content_type.find("json") != std::string_view::npos &&
      !nlohmann::json::accept(body.begin(), body.end())) {
    std::fprintf(stderr, "api_fuzz: an answer that is not JSON: %s\n", body.c_str());
    std::abort();
  }
}

}  // namespace
}  // namespace kayak

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kayak;
  World& w = TheWorld();
  http::Request req;
  if (!ParseRequest(std::string_view(reinterpret_cast<const char*>(data), size), &req)) return 0;
  {
    http::Response res;
    const auto auth = req[boost::beast::http::field::authorization];
    const auto target = req.target();
    if (w.api->RefusedOnHeader(std::string_view(target.data(), target.size()),
                               std::string_view(auth.data(), auth.size()), &res)) {
      std::abort();  // no token set: nothing is refused on its header
    }
  }
  std::mutex mu;
  std::condition_variable cv;
  int answers = 0;
  IngestReply reply;
  const bool taken = w.api->HandleAsync(req, [&](IngestReply r) {
    std::lock_guard lock(mu);
    reply = std::move(r);
    ++answers;
    cv.notify_all();
  });
  if (taken) {
    std::unique_lock lock(mu);
    // A change stops and starts engines; well within libFuzzer's -timeout.
    if (!cv.wait_for(lock, std::chrono::seconds(4), [&] { return answers > 0; })) {
      std::fprintf(stderr, "api_fuzz: no answer to %s\n", std::string(req.target()).c_str());
      std::abort();
    }
    CheckAnswer(reply.status, reply.content_type.empty() ? "json" : reply.content_type,
                reply.body);
    return 0;
  }
  http::Response res;
  w.api->Handle(req, &res);
  const auto type = res[boost::beast::http::field::content_type];
  CheckAnswer(res.result_int(), std::string_view(type.data(), type.size()), res.body());
  return 0;
}
