#include "server/api.h"

#include <nlohmann/json.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <pthread.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/bearer.h"
#include "common/clock.h"
#include "common/json_util.h"
#include "common/log.h"
#include "common/metrics.h"
#include "server/ui_assets.h"

namespace kayak::http {

namespace bhttp = boost::beast::http;
using Json = nlohmann::ordered_json;

std::string UrlDecode(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
               std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::strtol(s.substr(i + 1, 2).c_str(), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

bool QueryParam(const std::string& query, const std::string& key, std::string* value) {
  size_t pos = 0;
  while (pos <= query.size()) {
    size_t amp = query.find('&', pos);
    if (amp == std::string::npos) amp = query.size();
    const std::string part = query.substr(pos, amp - pos);
    const size_t eq = part.find('=');
    if (UrlDecode(part.substr(0, eq)) == key) {
      *value = eq == std::string::npos ? "" : UrlDecode(part.substr(eq + 1));
      return true;
    }
    pos = amp + 1;
  }
  return false;
}

namespace {

// A yes/no query parameter: absent or 0/false/no is no; present alone or
// 1/true/yes is yes; anything else is false with `error` set.
bool FlagParam(const std::string& query, const std::string& key, bool* value,
               std::string* error) {
  std::string v;
  *value = false;
  if (!QueryParam(query, key, &v)) return true;
  if (v.empty() || v == "1" || v == "true" || v == "yes") {
    *value = true;
  } else if (v != "0" && v != "false" && v != "no") {
    *error = key + " must be 1 or 0, not '" + v + "'";
    return false;
  }
  return true;
}

// The graph the request being answered on this thread holds: the listener's
// thread and the reader thread each answer one request at a time.
thread_local const RunningGraph* t_graph = nullptr;

// Holds `view` (a change on the change thread may replace the graph
// meanwhile) as this thread's graph while it lives.
class HeldGraph {
 public:
  explicit HeldGraph(std::shared_ptr<const RunningGraph> view) : view_(std::move(view)) {
    t_graph = view_.get();
  }
  ~HeldGraph() { t_graph = nullptr; }
  HeldGraph(const HeldGraph&) = delete;
  HeldGraph& operator=(const HeldGraph&) = delete;

 private:
  std::shared_ptr<const RunningGraph> view_;
};

void SendJson(Response* res, unsigned status, const Json& body) {
  res->result(status);
  res->set(bhttp::field::content_type, "application/json");
  res->body() = body.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// `s` as a URL's path segment or query value: unreserved bytes as they are,
// every other byte as %XX (RFC 3986).
std::string PercentEncode(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

void MethodNotAllowed(Response* res, const char* allow) {
  res->set(bhttp::field::allow, allow);
  JsonError(res, 405, std::string("method not allowed; allowed: ") + allow);
}

// YAML -> JSON for showing a pipeline's config; scalars that read as
// numbers or bools become those.
Json YamlToJson(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Scalar: {
      const std::string& s = n.Scalar();
      if (n.Tag() == "?") {
        if (s == "true") return true;
        if (s == "false") return false;
        char* end = nullptr;
        const long long i = std::strtoll(s.c_str(), &end, 10);
        if (!s.empty() && *end == '\0') return static_cast<int64_t>(i);
        const double d = std::strtod(s.c_str(), &end);
        if (!s.empty() && *end == '\0') return d;
      }
      return s;
    }
    case YAML::NodeType::Sequence: {
      Json a = Json::array();
      for (const auto& e : n) a.push_back(YamlToJson(e));
      return a;
    }
    case YAML::NodeType::Map: {
      Json o = Json::object();
      for (const auto& kv : n) o[kv.first.Scalar()] = YamlToJson(kv.second);
      return o;
    }
    default:
      return nullptr;
  }
}

// A component's options as configured; secret ones (PropDef::secret) as "***".
Json ComponentConfig(const ComponentSpec& c) {
  Json value = YamlToJson(c.value);
  if (value.is_object()) {
    for (const auto& p : c.def->props) {
      if (p.secret && value.contains(p.name)) value[p.name] = "***";
    }
  }
  return Json{{c.def->type, std::move(value)}};
}

Json PipelineJson(const PipelineRunner& p, bool with_config, int version) {
  Json j;
  j["id"] = p.id();
  j["status"] = PipelineStatusName(p.status());
  j["version"] = version;
  j["upstreams"] = p.spec().upstreams;
  // The buckets its components name, each once; `writes` when one writes it.
  Json buckets = Json::array();
  auto add_uses = [&buckets](const ComponentSpec& c) {
    for (const auto& u : c.buckets) {
      auto it = std::find_if(buckets.begin(), buckets.end(),
                             [&u](const Json& b) { return b["bucket"] == u.bucket; });
      if (it == buckets.end()) {
        buckets.push_back(Json{{"bucket", u.bucket}, {"writes", u.writes}});
      } else if (u.writes) {
        (*it)["writes"] = true;
      }
    }
  };
  add_uses(p.spec().input);
  for (const auto& t : p.spec().transforms) add_uses(t);
  for (const auto& o : p.spec().outputs) add_uses(o);
  j["buckets"] = std::move(buckets);
  Json cards = Json::array();
  const std::map<std::string, int64_t> memory = p.MemoryUse();
  for (const auto* c : p.cards()) {
    Json card{{"name", c->name()},
              {"kind", c->kind()},
              {"type", c->type()},
              {"state", ComponentStateName(c->state())},
              {"messages_in", c->in()},
              {"messages_out", c->out()},
              {"errors", c->errors()},
              {"last_error", c->last_error()},
              {"last_error_ms", c->last_error_ms()},
              {"state_since_ms", c->state_since_ms()}};
    if (c->kind() == "input") {
      card["position"] = c->position();
      if (c->lag() >= 0) card["lag"] = Json{{"value", c->lag()}, {"unit", c->lag_unit()}};
    }
    if (c->kind() == "output") card["retries"] = c->retries();
    if (auto m = memory.find(c->name()); m != memory.end()) card["memory_bytes"] = m->second;
    if (c->kind() == "transform") card["set_aside"] = c->set_aside();
    card["dead_letters"] = c->dead_lettered();
    cards.push_back(std::move(card));
  }
  j["components"] = std::move(cards);
  if (p.is_source()) j["memory_paused"] = p.memory_paused();
  Json queues = Json::array();
  for (const auto& [name, depth] : p.QueueDepths()) {
    queues.push_back(Json{{"name", name}, {"depth", depth}});
  }
  j["queues"] = std::move(queues);
  if (with_config) {
    const PipelineSpec& s = p.spec();
    Json cfg;
    cfg["input"] = ComponentConfig(s.input);
    cfg["transforms"] = Json::array();
    for (const auto& t : s.transforms) cfg["transforms"].push_back(ComponentConfig(t));
    cfg["outputs"] = Json::array();
    for (size_t k = 0; k < s.outputs.size(); ++k) {
      if (s.IsDeadLetter(k)) {
        cfg["dead_letter"] = ComponentConfig(s.outputs[k]);
      } else {
        cfg["outputs"].push_back(ComponentConfig(s.outputs[k]));
      }
    }
    j["config"] = std::move(cfg);
  }
  return j;
}

}  // namespace

Api::Api(GraphManager* graph, std::string token)
    : graph_(graph), token_(std::move(token)), reader_([this] { ReadLoop(); }) {}

Api::~Api() { StopReads(); }

void Api::StopReads() {
  {
    MutexLock lock(reads_mu_);
    reads_closed_ = true;
  }
  reads_cv_.notify_all();
  if (reader_.joinable()) reader_.join();
}

const RunningGraph* Api::graph() { return t_graph; }

bool Api::SubmitRead(std::function<void()> read) {
  {
    MutexLock lock(reads_mu_);
    if (reads_closed_ || reads_.size() >= kMaxQueuedReads) return false;
    reads_.push_back(std::move(read));
  }
  reads_cv_.notify_one();
  return true;
}

void Api::ReadLoop() {
  pthread_setname_np(pthread_self(), "kayak-api-read");
  for (;;) {
    std::function<void()> read;
    {
      MutexLock lock(reads_mu_);
      while (!reads_closed_ && reads_.empty()) lock.Wait(reads_cv_);
      if (reads_closed_ && reads_.empty()) return;
      read = std::move(reads_.front());
      reads_.pop_front();
    }
    read();
  }
}

void Api::Handle(const Request& req, Response* res) {
  const std::string target(req.target());
  const size_t q = target.find('?');
  const std::string path = target.substr(0, q);
  const std::string query = q == std::string::npos ? "" : target.substr(q + 1);
  const bool get = req.method() == bhttp::verb::get || req.method() == bhttp::verb::head;

  if (!Authorized(req, path, res)) return;
  const HeldGraph held(graph_->view());
  if (path == "/health") {
    if (!get) return MethodNotAllowed(res, "GET");
    return Health(res);
  }
  if (path == "/ready") {
    if (!get) return MethodNotAllowed(res, "GET");
    return Ready(res);
  }
  if (path == "/" || path == "/index.html" || path.rfind("/ui/", 0) == 0) {
    if (!get) return MethodNotAllowed(res, "GET");
    return Dashboard(path, res);
  }
  if (graph() == nullptr) {
    res->set(bhttp::field::retry_after, "1");
    return JsonError(res, 503, "the graph has not started yet; try again");
  }
  if (path == "/metrics") {
    if (!get) return MethodNotAllowed(res, "GET");
    return Metrics(res);
  }
  static const std::string kPipelines = "/api/v1/pipelines";
  static const std::string kBuckets = "/api/v1/buckets/";
  if (path == kPipelines || path == kPipelines + "/") {
    if (!get) return MethodNotAllowed(res, "GET");
    return ListPipelines(res);
  }
  if (path.rfind(kPipelines + "/", 0) == 0) {
    const std::string rest = path.substr(kPipelines.size() + 1);
    const size_t slash = rest.find('/');
    const std::string id = UrlDecode(rest.substr(0, slash));
    const std::string action = slash == std::string::npos ? "" : rest.substr(slash + 1);
    // PUT, DELETE, revert and restart are taken by HandleAsync (the change
    // thread) before they come here.
    if (action.empty()) {
      if (get) return GetPipeline(id, res);
      return MethodNotAllowed(res, "GET, PUT, DELETE");
    }
    if (action == "versions") {
      if (!get) return MethodNotAllowed(res, "GET");
      return Send(graph_->Versions(id), res);
    }
    if (action == "revert" || action == "restart") return MethodNotAllowed(res, "POST");
  }
  if (path == "/api/v1/overview") {
    if (!get) return MethodNotAllowed(res, "GET");
    return Overview(res);
  }
  if (path == "/api/v1/checkpoints") {
    if (get) return Checkpoints(res);
    return MethodNotAllowed(res, "GET, POST");
  }
  if (path.rfind(kBuckets, 0) == 0 && path.size() > kBuckets.size()) {
    const std::string name = path.substr(kBuckets.size());
    if (name.find('/') == std::string::npos) {
      if (!get) return MethodNotAllowed(res, "GET, PUT");
      return GetBucket(UrlDecode(name), query, res);
    }
  }
  JsonError(res, 404, "no route for " + std::string(req.method_string()) + " " + path);
}

namespace {

using Outcome = GraphManager::Outcome;

unsigned HttpStatus(Outcome o) {
  switch (o) {
    case Outcome::kOk: return 200;
    case Outcome::kCreated: return 201;
    case Outcome::kInvalid: return 400;
    case Outcome::kNotFound: return 404;
    case Outcome::kConflict: return 409;
    case Outcome::kUnavailable: return 503;
    case Outcome::kFailed: return 500;
  }
  return 500;
}

}  // namespace

void Api::Send(const GraphManager::Answer& a, Response* res) {
  SendJson(res, HttpStatus(a.outcome), a.body);
}

bool Api::Authorized(const Request& req, const std::string& path, Response* res) {
  const auto auth = req[bhttp::field::authorization];
  return Authorized(path, std::string_view(auth.data(), auth.size()), res);
}

bool Api::RefusedOnHeader(std::string_view target, std::string_view authorization,
                          Response* res) {
  return !Authorized(target.substr(0, target.find('?')), authorization, res);
}

bool Api::Authorized(std::string_view path, std::string_view authorization, Response* res) {
  // The admin API's routes demand the bearer token when one is set; the
  // health and readiness checks, the metrics and the dashboard's page (whose
  // calls to the API carry the token) do not.
  if (token_.empty() || (path != "/api" && path.rfind("/api/", 0) != 0)) return true;
  switch (CheckBearer(authorization, token_)) {
    case BearerCheck::kOk:
      return true;
    case BearerCheck::kMissing:
      res->set(bhttp::field::www_authenticate, "Bearer realm=\"kayak\"");
      JsonError(res, 401, "the admin API needs \"Authorization: Bearer <token>\"");
      return false;
    case BearerCheck::kWrong:
      JsonError(res, 403, "the bearer token is not the admin API's");
      return false;
  }
  return false;
}

bool Api::HandleAsync(const Request& req, IngestDone done) {
  const std::string target(req.target());
  const std::string path = target.substr(0, target.find('?'));
  const auto method = req.method();
  static const std::string kPipelines = "/api/v1/pipelines/";
  static const std::string kBuckets = "/api/v1/buckets/";
  if (method == bhttp::verb::get &&
      (path == "/api/v1/overview" || path == "/api/v1/pipelines" || path == kPipelines ||
       path == "/metrics")) {
    Response refused;
    if (!Authorized(req, path, &refused)) return false;  // Handle answers 401 or 403
    std::shared_ptr<const RunningGraph> view = graph_->view();
    if (view == nullptr) return false;  // Handle answers 503
    auto read = [this, view, path, done] {
      const HeldGraph held(view);
      Response res;
      try {
        if (path == "/api/v1/overview") {
          Overview(&res);
        } else if (path == "/metrics") {
          Metrics(&res);
        } else {
          ListPipelines(&res);
        }
      } catch (const std::exception& e) {
        KLOG_ERROR("http: reading {} failed: {}", path, e.what());
        res = {};
        JsonError(&res, 500, "internal error");
      }
      const auto type = res[bhttp::field::content_type];
      done(IngestReply{res.result_int(), std::move(res.body()), 0,
                       std::string(type.data(), type.size())});
    };
    if (!SubmitRead(std::move(read))) {
      done(IngestReply{503, DumpJson(Json{{"error", "too many large reads are waiting; try again"}}),
                       1});
    }
    return true;
  }
  std::function<GraphManager::Answer()> change;
  GraphManager::PutOptions put;
  std::string bad_flag;
  if (method == bhttp::verb::put) {
    const size_t q = target.find('?');
    const std::string query = q == std::string::npos ? "" : target.substr(q + 1);
    if (!FlagParam(query, "dry_run", &put.dry_run, &bad_flag) ||
        !FlagParam(query, "accept_state_loss", &put.accept_state_loss, &bad_flag)) {
      put = {};
    }
  }
  if (path.rfind(kPipelines, 0) == 0 && path.size() > kPipelines.size()) {
    const std::string rest = path.substr(kPipelines.size());
    const size_t slash = rest.find('/');
    const std::string id = UrlDecode(rest.substr(0, slash));
    const std::string action = slash == std::string::npos ? "" : rest.substr(slash + 1);
    GraphManager* g = graph_;
    if (action.empty() && method == bhttp::verb::put) {
      change = [g, id, body = req.body(), put] { return g->Put("pipeline", id, body, put); };
    } else if (action.empty() && method == bhttp::verb::delete_) {
      change = [g, id] { return g->Delete(id); };
    } else if (action == "revert" && method == bhttp::verb::post) {
      change = [g, id] { return g->Revert(id); };
    } else if (action == "restart" && method == bhttp::verb::post) {
      change = [g, id] { return g->Restart(id); };
    }
  } else if (path.rfind(kBuckets, 0) == 0 && path.size() > kBuckets.size() &&
             path.find('/', kBuckets.size()) == std::string::npos &&
             method == bhttp::verb::put) {
    change = [g = graph_, name = UrlDecode(path.substr(kBuckets.size())), body = req.body(),
              put] { return g->Put("bucket", name, body, put); };
  } else if (path == "/api/v1/checkpoints" && method == bhttp::verb::post) {
    change = [this] { return TakeCheckpoint(); };
  }
  if (!change) return false;
  Response refused;
  if (!Authorized(req, path, &refused)) return false;  // Handle answers 401 or 403
  if (!bad_flag.empty()) {
    done(IngestReply{400, DumpJson(Json{{"error", bad_flag}}), 0});
    return true;
  }
  auto reply = [done](const GraphManager::Answer& a) {
    done(IngestReply{HttpStatus(a.outcome), DumpJson(a.body),
                     a.outcome == Outcome::kUnavailable ? 1u : 0u});
  };
  if (!graph_->Submit(std::move(change), reply)) {
    reply({Outcome::kUnavailable,
           Json{{"error", "too many changes are waiting, or the server is stopping; try again"}}});
  }
  return true;
}

void Api::NotFound(Response* res, const std::string& what) {
  if (graph()->changing()) {
    res->set(bhttp::field::retry_after, "1");
    return JsonError(res, 503, what + " running now: a change to the graph is being applied; "
                                      "try again");
  }
  JsonError(res, 404, what);
}

void Api::Health(Response* res) {
  // Until the graph is built the process serves only its probes: a liveness
  // check that waits for 200 waits for the start.
  if (!graph_->built()) {
    res->set(bhttp::field::retry_after, "1");
    return SendJson(res, 503, Json{{"status", "starting"}});
  }
  SendJson(res, 200, Json{{"status", "ok"}});
}

Json Api::NotReadyReasons() {
  Json reasons = Json::array();
  const RunningGraph* g = graph();
  if (g == nullptr) {
    reasons.push_back(Json{{"reason", graph_->built() ? "the graph is not running"
                                                      : "the graph is starting"}});
    return reasons;
  }
  if (g->changing()) reasons.push_back(Json{{"reason", "a change to the graph is being applied"}});
  if (MemoryBudget* m = graph_->memory(); m != nullptr && m->Exceeded()) {
    int64_t used = 0;
    const auto uses = m->Snapshot(&used);
    Json r{{"reason", "memory budget exceeded: inputs wait"},
           {"used_bytes", used},
           {"limit_bytes", m->limit()},
           {"high_water_bytes", m->high_water()}};
    if (!uses.empty()) {
      r["most_in"] = Json{{"pipeline", uses[0].pipeline},
                          {"component", uses[0].component},
                          {"kind", uses[0].kind},
                          {"bytes", uses[0].bytes}};
    }
    reasons.push_back(std::move(r));
  }
  for (const auto* p : g->pipelines()) {
    const PipelineStatus st = p->status();
    if (st != PipelineStatus::kRunning && st != PipelineStatus::kFinished) {
      reasons.push_back(Json{{"reason", std::string("pipeline ") + PipelineStatusName(st)},
                             {"pipeline", p->id()}});
    }
    for (const auto* c : p->cards()) {
      const ComponentState cs = c->state();
      if (cs != ComponentState::kRetrying && cs != ComponentState::kFailed) continue;
      Json r{{"reason", std::string(c->kind()) + " " + ComponentStateName(cs)},
             {"pipeline", p->id()},
             {"component", c->name()},
             {"type", c->type()},
             {"since_ms", c->state_since_ms()},
             {"last_error", c->last_error()}};
      reasons.push_back(std::move(r));
    }
  }
  if (g->checkpointing()) {
    const int64_t now = g->clock()->NowMs();
    const int64_t late = 3 * g->checkpoint_interval_ms();
    for (const auto& r : g->Regions()) {
      if (!r.held_back.empty()) {
        reasons.push_back(Json{{"reason", "region held back"}, {"region", r.name},
                               {"why", r.held_back}});
      } else if (r.last_committed_ms == 0 || now - r.last_committed_ms > late) {
        Json j{{"reason", "region not checkpointing"},
               {"region", r.name},
               {"last_committed_id", r.last_committed_id},
               {"last_committed_ms", r.last_committed_ms},
               {"last_error", r.last_error}};
        reasons.push_back(std::move(j));
      }
    }
  }
  return reasons;
}

Json Api::MemoryJson() {
  MemoryBudget* m = graph_->memory();
  if (m == nullptr) return nullptr;
  int64_t used = 0;
  const auto uses = m->Snapshot(&used);
  Json top = Json::array();
  for (const auto& u : uses) {
    if (u.bytes <= 0 || top.size() >= kMemoryTop) break;
    Json j{{"component", u.component}, {"kind", u.kind}, {"bytes", u.bytes}};
    if (!u.pipeline.empty()) j["pipeline"] = u.pipeline;
    top.push_back(std::move(j));
  }
  Json j{{"limit_bytes", m->limit()}, {"used_bytes", used}};
  if (m->limit() > 0) j["high_water_bytes"] = m->high_water();
  j["exceeded"] = m->Exceeded();
  j["inputs_waiting"] = m->paused_now();
  j["pauses"] = m->pauses();
  j["top"] = std::move(top);
  return j;
}

void Api::Ready(Response* res) {
  Json reasons = NotReadyReasons();
  const bool ready = reasons.empty();
  SendJson(res, ready ? 200 : 503,
           Json{{"status", ready ? "ready" : "not ready"}, {"reasons", std::move(reasons)}});
}

Json Api::PipelineList() {
  Json list = Json::array();
  for (const auto* p : graph()->pipelines()) {
    list.push_back(PipelineJson(*p, false, graph_->CurrentVersion(p->id())));
  }
  return list;
}

void Api::ListPipelines(Response* res) {
  SendJson(res, 200, Json{{"pipelines", PipelineList()}});
}

namespace {
Json CheckpointsJson(const RunningGraph& g);
}  // namespace

void Api::Overview(Response* res) {
  Json buckets = Json::array();
  for (const auto* b : graph()->Buckets()) {
    buckets.push_back(Json{{"name", b->name()}, {"size", b->Size()}});
  }
  Json reasons = NotReadyReasons();
  SendJson(res, 200,
           Json{{"now_ms", graph()->clock()->NowMs()},
                {"ready", reasons.empty()},
                {"reasons", std::move(reasons)},
                {"pipelines", PipelineList()},
                {"buckets", std::move(buckets)},
                {"memory", MemoryJson()},
                {"checkpoints", CheckpointsJson(*graph())},
                {"cluster", cluster_ != nullptr ? cluster_->Overview() : Json(nullptr)}});
}

void Api::GetPipeline(const std::string& id, Response* res) {
  PipelineRunner* p = graph()->Find(id);
  if (p == nullptr) return NotFound(res, "no pipeline '" + id + "'");
  SendJson(res, 200, PipelineJson(*p, true, graph_->CurrentVersion(id)));
}

void Api::GetBucket(const std::string& name, const std::string& query, Response* res) {
  Bucket* b = graph()->FindBucket(name);
  if (b == nullptr) return NotFound(res, "no bucket '" + name + "'");
  const int64_t now = graph()->clock()->NowMs();
  std::string key;
  if (QueryParam(query, "key", &key)) {
    auto e = b->Get(key, now);
    if (!e && cluster_ != nullptr) {
      // Another member of the cluster owns the key's partition: ask it.
      const std::string owner = cluster_->OwnerOf(name, key);
      if (!owner.empty()) {
        const std::string there =
            owner + "/api/v1/buckets/" + PercentEncode(name) + "?key=" + PercentEncode(key);
        res->set(bhttp::field::location, there);
        return SendJson(res, 307, Json{{"error", "key '" + key + "' of bucket '" + name +
                                                     "' is owned by another member"},
                                       {"location", there}});
      }
    }
    if (!e) return JsonError(res, 404, "bucket '" + name + "' has no entry for key '" + key + "'");
    return SendJson(res, 200, Json{{"key", key}, {"value", e->value}, {"last_write_ms", e->last_write_ms}});
  }
  std::string after, limit_text;
  QueryParam(query, "after", &after);
  size_t limit = 100;
  if (QueryParam(query, "limit", &limit_text)) {
    char* end = nullptr;
    const long v = std::strtol(limit_text.c_str(), &end, 10);
    if (limit_text.empty() || *end != '\0' || v < 1 || v > 1000) {
      return JsonError(res, 400, "limit must be a whole number from 1 to 1000");
    }
    limit = static_cast<size_t>(v);
  }
  Json entries = Json::array();
  auto page = b->Page(after, limit, now);
  for (auto& [k, e] : page) {
    entries.push_back(Json{{"key", k}, {"value", e.value}, {"last_write_ms", e.last_write_ms}});
  }
  Json body{{"bucket", name}, {"size", b->Size()}, {"entries", std::move(entries)}};
  if (b->max_keys() > 0) {
    body["max_keys"] = b->max_keys();
    body["on_full"] = b->evicts_oldest() ? "evict_oldest" : "refuse";
  }
  body["refused_keys"] = b->refused_keys();
  body["evicted_keys"] = b->evicted_keys();
  if (page.size() == limit) body["next_after"] = page.back().first;
  SendJson(res, 200, body);
}

namespace {

// The region's last checkpoints, the newest first.
Json HistoryJson(const std::deque<CheckpointRecord>& history) {
  Json out = Json::array();
  for (auto it = history.rbegin(); it != history.rend(); ++it) {
    Json j{{"id", it->id},
           {"status", it->committed ? "committed" : "abandoned"},
           {"at_ms", it->at_ms},
           {"duration_ms", it->duration_ms},
           {"bytes_written", it->bytes_written},
           {"bytes_reused", it->bytes_reused},
           {"barrier_pause_us", it->barrier_pause_us}};
    if (!it->committed) j["reason"] = it->reason;
    out.push_back(std::move(j));
  }
  return out;
}

// What a kill -9 now would cost the region, and why it is not committing
// when it is not.
Json ExposureJson(const RegionStatus& r, int64_t now_ms) {
  std::string why = r.held_back;
  if (why.empty() && r.inflight_id != 0 && r.inflight_ms > 10'000) {
    why = "checkpoint " + std::to_string(r.inflight_id) + " has waited " +
          std::to_string(r.inflight_ms / 1000) + " s for its barrier to pass every pipeline";
  }
  if (why.empty() && !r.history.empty() && !r.history.back().committed) {
    why = "the last checkpoint was abandoned: " + r.history.back().reason;
  }
  return Json{{"messages", r.messages_read > r.messages_at_commit
                               ? r.messages_read - r.messages_at_commit
                               : 0},
              {"since_commit_ms", r.last_committed_ms > 0 ? now_ms - r.last_committed_ms : -1},
              {"checkpoint_in_progress", r.inflight_id},
              {"in_progress_ms", r.inflight_ms},
              {"not_committing", why}};
}

// GET /api/v1/checkpoints's body.
Json CheckpointsJson(const RunningGraph& g) {
  if (!g.checkpointing()) return Json{{"checkpointing", false}, {"regions", Json::array()}};
  Json regions = Json::array();
  const int64_t now_ms = SystemClock::Get()->NowMs();
  for (const auto& r : g.Regions()) {
    regions.push_back(Json{{"region", r.name},
                           {"pipelines", r.pipelines},
                           {"last_committed_id", r.last_committed_id},
                           {"last_committed_ms", r.last_committed_ms},
                           {"duration_ms", r.last_duration_ms},
                           {"bytes_written", r.bytes_written},
                           {"bytes_reused", r.bytes_reused},
                           {"barrier_pause_us", r.barrier_pause_us},
                           {"longest_barrier_pause_us", r.longest_barrier_pause_us},
                           {"committed", r.committed},
                           {"abandoned", r.abandoned},
                           {"held_back", r.held_back},
                           {"last_error", r.last_error},
                           {"bytes_written_total", r.bytes_written_total},
                           {"bytes_reused_total", r.bytes_reused_total},
                           {"exposure", ExposureJson(r, now_ms)},
                           {"history", HistoryJson(r.history)}});
  }
  return Json{{"checkpointing", true}, {"regions", std::move(regions)}};
}

}  // namespace

void Api::Checkpoints(Response* res) {
  SendJson(res, 200, CheckpointsJson(*graph()));
}

GraphManager::Answer Api::TakeCheckpoint() {
  std::shared_ptr<const RunningGraph> g = graph_->view();
  if (g == nullptr) {
    return {Outcome::kUnavailable, Json{{"error", "a change to the graph is being applied"}}};
  }
  if (!g->checkpointing()) {
    return {Outcome::kConflict,
            Json{{"error", "checkpointing is off: start the server with --state-dir"}}};
  }
  bool ok = true;
  for (const auto& e : g->engines()) {
    if (Checkpointer* cp = e->checkpointer()) ok = cp->CheckpointNow(120000) && ok;
  }
  return {ok ? Outcome::kOk : Outcome::kUnavailable, CheckpointsJson(*g)};
}

namespace {

// The standard process metrics every Prometheus client library exports,
// from /proc/self (Linux).
void ProcessMetrics(std::string* out) {
  auto family = [out](const char* name, const char* type, const char* help) {
    *out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  // Fields after the command (which may hold spaces), from field 3 on.
  const size_t close = stat.rfind(')');
  std::vector<std::string> f;
  if (close != std::string::npos) {
    std::istringstream in(stat.substr(close + 2));
    for (std::string w; in >> w;) f.push_back(w);
  }
  auto field = [&f](size_t n) { return n - 3 < f.size() ? std::stod(f[n - 3]) : 0.0; };
  if (f.size() > 22) {
    family("process_cpu_seconds_total", "counter", "User and system CPU time spent in seconds.");
    *out += "process_cpu_seconds_total " + metrics::FormatValue((field(14) + field(15)) / tick) + "\n";
    family("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
    *out += "process_virtual_memory_bytes " + metrics::FormatValue(field(23)) + "\n";
    family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
    *out += "process_resident_memory_bytes " + metrics::FormatValue(field(24) * page) + "\n";
    std::ifstream proc_stat("/proc/stat");
    for (std::string line; std::getline(proc_stat, line);) {
      if (line.rfind("btime ", 0) == 0) {
        const double boot = std::stod(line.substr(6));
        family("process_start_time_seconds", "gauge",
               "Start time of the process since unix epoch in seconds.");
        *out += "process_start_time_seconds " + metrics::FormatValue(boot + field(22) / tick) + "\n";
      }
    }
  }
  size_t fds = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++fds;
  }
  family("process_open_fds", "gauge", "Number of open file descriptors.");
  *out += "process_open_fds " + std::to_string(fds) + "\n";
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0) {
    family("process_max_fds", "gauge", "Maximum number of open file descriptors.");
    *out += "process_max_fds " + std::to_string(lim.rlim_cur) + "\n";
  }
}

}  // namespace

void Api::Metrics(Response* res) {
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  auto sample = [&](const char* name, const std::string& labels, double v) {
    out += std::string(name) + "{" + labels + "} " + metrics::FormatValue(v) + "\n";
  };
  const auto& pipelines = graph()->pipelines();
  auto labels = [](const PipelineRunner& p, const ComponentStats& c) {
    return metrics::RenderLabels({{"pipeline", p.id()}, {"component", c.name()}, {"type", c.type()}});
  };
  // One family over every component's card (or the cards `kind` names).
  auto cards = [&](const char* name, const char* type, const char* help, const char* kind,
                   auto value) {
    family(name, type, help);
    for (const auto& p : pipelines) {
      for (const auto* c : p->cards()) {
        if (kind == nullptr || c->kind() == kind) sample(name, labels(*p, *c), value(*c));
      }
    }
  };
  family("kayak_ready", "gauge", "1 when /ready answers 200, else 0.");
  const Json reasons = NotReadyReasons();
  out += "kayak_ready " + std::string(reasons.empty() ? "1" : "0") + "\n";
  family("kayak_not_ready_reasons", "gauge", "How many reasons /ready lists.");
  out += "kayak_not_ready_reasons " + std::to_string(reasons.size()) + "\n";
  family("kayak_component_state_since_seconds", "gauge",
         "Unix time of a component's last change of state (retrying since, failed since).");
  for (const auto& p : pipelines) {
    for (const auto* c : p->cards()) {
      sample("kayak_component_state_since_seconds",
             labels(*p, *c) + ",state=\"" + ComponentStateName(c->state()) + "\"",
             static_cast<double>(c->state_since_ms()) / 1e3);
    }
  }
  cards("kayak_messages_in_total", "counter", "Messages a component received.", nullptr,
        [](const ComponentStats& c) { return static_cast<double>(c.in()); });
  cards("kayak_messages_out_total", "counter", "Messages a component passed on or wrote.", nullptr,
        [](const ComponentStats& c) { return static_cast<double>(c.out()); });
  cards("kayak_errors_total", "counter", "Errors a component had.", nullptr,
        [](const ComponentStats& c) { return static_cast<double>(c.errors()); });
  cards("kayak_output_retries_total", "counter",
        "Writes and commits an output tried again after a failure.", "output",
        [](const ComponentStats& c) { return static_cast<double>(c.retries()); });
  cards("kayak_messages_dead_lettered_total", "counter",
        "Messages a component could not handle (an input could not decode, a transform failed "
        "on or set aside, an output refused), sent to its pipeline's dead-letter output.",
        nullptr, [](const ComponentStats& c) { return static_cast<double>(c.dead_lettered()); });
  cards("kayak_messages_set_aside_total", "counter",
        "Messages a transform set aside: the process died with each inside it three times "
        "in a row.",
        "transform", [](const ComponentStats& c) { return static_cast<double>(c.set_aside()); });
  for (const char* unit : {"bytes", "messages"}) {
    const std::string name = std::string("kayak_input_lag_") + unit;
    family(name.c_str(), "gauge",
           (std::string("How far an input is behind the newest data it knows of, in ") + unit +
            " (file: bytes not read; http: bytes posted, not read; kafka: messages behind the "
            "high watermarks).")
               .c_str());
    for (const auto& p : pipelines) {
      for (const auto* c : p->cards()) {
        if (c->kind() == "input" && c->lag() >= 0 && std::string_view(c->lag_unit()) == unit) {
          sample(name.c_str(), labels(*p, *c), static_cast<double>(c->lag()));
        }
      }
    }
  }
  family("kayak_queue_depth", "gauge", "Batches waiting in a bounded queue.");
  for (const auto& p : pipelines) {
    for (const auto& [name, depth] : p->QueueDepths()) {
      sample("kayak_queue_depth", metrics::RenderLabels({{"pipeline", p->id()}, {"queue", name}}),
             static_cast<double>(depth));
    }
  }
  if (MemoryBudget* m = graph_->memory(); m != nullptr) {
    int64_t used = 0;
    const auto uses = m->Snapshot(&used);
    family("kayak_memory_limit_bytes", "gauge",
           "The server's memory budget (memory_limit_bytes; 0: none).");
    out += "kayak_memory_limit_bytes " + std::to_string(m->limit()) + "\n";
    family("kayak_memory_used_bytes", "gauge",
           "What the queues, buffers and state charged to the budget hold together.");
    out += "kayak_memory_used_bytes " + std::to_string(used) + "\n";
    family("kayak_memory_bytes", "gauge",
           "What one component holds, by kind: queue, state (a transform's or a bucket's), "
           "buffer.");
    for (const auto& u : uses) {
      sample("kayak_memory_bytes",
             metrics::RenderLabels(
                 {{"pipeline", u.pipeline}, {"component", u.component}, {"kind", u.kind}}),
             static_cast<double>(u.bytes));
    }
    family("kayak_memory_inputs_waiting", "gauge", "Inputs waiting for the memory budget now.");
    out += "kayak_memory_inputs_waiting " + std::to_string(m->paused_now()) + "\n";
    family("kayak_memory_input_pauses_total", "counter",
           "Times an input began to wait for the memory budget.");
    out += "kayak_memory_input_pauses_total " + std::to_string(m->pauses()) + "\n";
  }
  family("kayak_bucket_entries", "gauge", "Live entries in a bucket.");
  for (const auto* b : graph()->Buckets()) {
    sample("kayak_bucket_entries", metrics::RenderLabels({{"bucket", b->name()}}),
           static_cast<double>(b->Size()));
  }
  family("kayak_bucket_refused_keys_total", "counter",
         "Writes of a new key a bucket refused at its max_keys (on_full: refuse).");
  for (const auto* b : graph()->Buckets()) {
    sample("kayak_bucket_refused_keys_total", metrics::RenderLabels({{"bucket", b->name()}}),
           static_cast<double>(b->refused_keys()));
  }
  family("kayak_bucket_evicted_keys_total", "counter",
         "Keys a bucket evicted at its max_keys (on_full: evict_oldest).");
  for (const auto* b : graph()->Buckets()) {
    sample("kayak_bucket_evicted_keys_total", metrics::RenderLabels({{"bucket", b->name()}}),
           static_cast<double>(b->evicted_keys()));
  }
  if (graph()->checkpointing()) {
    const auto regions = graph()->Regions();
    auto each = [&](const char* name, const char* type, const char* help, auto value) {
      family(name, type, help);
      for (const auto& r : regions) {
        sample(name, metrics::RenderLabels({{"region", r.name}}), static_cast<double>(value(r)));
      }
    };
    each("kayak_checkpoint_last_committed_id", "gauge", "Id of the region's last committed checkpoint.",
         [](const RegionStatus& r) { return r.last_committed_id; });
    each("kayak_checkpoint_last_committed_timestamp_seconds", "gauge",
         "Unix time of the region's last committed checkpoint (0: none yet).",
         [](const RegionStatus& r) { return static_cast<double>(r.last_committed_ms) / 1e3; });
    each("kayak_checkpoints_committed_total", "counter", "Checkpoints the region committed.",
         [](const RegionStatus& r) { return r.committed; });
    each("kayak_checkpoints_abandoned_total", "counter", "Checkpoints the region abandoned.",
         [](const RegionStatus& r) { return r.abandoned; });
    each("kayak_checkpoint_written_bytes_total", "counter", "Bytes the region's checkpoints wrote.",
         [](const RegionStatus& r) { return r.bytes_written_total; });
    each("kayak_checkpoint_reused_bytes_total", "counter",
         "Bytes of unchanged state the region's checkpoints referred to instead of writing.",
         [](const RegionStatus& r) { return r.bytes_reused_total; });
    each("kayak_checkpoint_last_written_bytes", "gauge", "Bytes the last checkpoint wrote.",
         [](const RegionStatus& r) { return r.bytes_written; });
    each("kayak_checkpoint_held_back", "gauge", "1 when a failed pipeline holds the region back.",
         [](const RegionStatus& r) { return r.held_back.empty() ? 0 : 1; });
  }
  // Histograms and counters recorded as things happen: checkpoint duration
  // and barrier pause, http ingest requests by status, the http log's fsync.
  metrics::Registry::Global().Render(&out);
  ProcessMetrics(&out);
  res->result(200);
  res->set(bhttp::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
  res->body() = std::move(out);
}

void Api::Dashboard(const std::string& path, Response* res) {
  const UiAsset* a = FindUiAsset(path == "/" ? "/index.html" : path);
  if (a == nullptr) return JsonError(res, 404, "no route for GET " + path);
  res->result(200);
  res->set(bhttp::field::content_type, std::string(a->content_type));
  // Everything the page loads comes from this listener; nothing inline.
  res->set("Content-Security-Policy",
           "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
           "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
  res->set("X-Content-Type-Options", "nosniff");
  res->set("Referrer-Policy", "no-referrer");
  res->set(bhttp::field::cache_control, "no-cache");
  res->body() = std::string(a->body);
}

}  // namespace kayak::http
