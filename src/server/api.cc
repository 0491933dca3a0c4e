#include "server/api.h"

#include <nlohmann/json.hpp>

#include <cstdlib>

#include "common/bearer.h"
#include "common/clock.h"

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

void SendJson(Response* res, unsigned status, const Json& body) {
  res->result(status);
  res->set(bhttp::field::content_type, "application/json");
  res->body() = body.dump(-1, ' ', false, Json::error_handler_t::replace);
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
  Json cards = Json::array();
  for (const auto* c : p.cards()) {
    Json card{{"name", c->name()},
              {"kind", c->kind()},
              {"type", c->type()},
              {"state", ComponentStateName(c->state())},
              {"messages_in", c->in()},
              {"messages_out", c->out()},
              {"errors", c->errors()},
              {"last_error", c->last_error()},
              {"state_since_ms", c->state_since_ms()}};
    if (c->kind() == "input") card["position"] = c->position();
    cards.push_back(std::move(card));
  }
  j["components"] = std::move(cards);
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
    for (const auto& o : s.outputs) cfg["outputs"].push_back(ComponentConfig(o));
    j["config"] = std::move(cfg);
  }
  return j;
}

}  // namespace

void Api::Handle(const Request& req, Response* res) {
  const std::string target(req.target());
  const size_t q = target.find('?');
  const std::string path = target.substr(0, q);
  const std::string query = q == std::string::npos ? "" : target.substr(q + 1);
  const bool get = req.method() == bhttp::verb::get || req.method() == bhttp::verb::head;

  if (!Authorized(req, path, res)) return;
  // Held for this request: a change on the change thread may replace it.
  current_ = graph_->view();
  struct Release {
    std::shared_ptr<const RunningGraph>* held;
    ~Release() { held->reset(); }
  } release{&current_};
  if (path == "/health") {
    if (!get) return MethodNotAllowed(res, "GET");
    return Health(res);
  }
  if (path == "/ready") {
    if (!get) return MethodNotAllowed(res, "GET");
    return Ready(res);
  }
  if (path == "/" || path == "/index.html") {
    if (!get) return MethodNotAllowed(res, "GET");
    return Dashboard(res);
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
  // The admin API's routes demand the bearer token when one is set; the
  // health and readiness checks, the metrics and the dashboard's page (whose
  // calls to the API carry the token) do not.
  if (token_.empty() || (path != "/api" && path.rfind("/api/", 0) != 0)) return true;
  const auto auth = req[bhttp::field::authorization];
  switch (CheckBearer(std::string_view(auth.data(), auth.size()), token_)) {
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
  std::function<GraphManager::Answer()> change;
  if (path.rfind(kPipelines, 0) == 0 && path.size() > kPipelines.size()) {
    const std::string rest = path.substr(kPipelines.size());
    const size_t slash = rest.find('/');
    const std::string id = UrlDecode(rest.substr(0, slash));
    const std::string action = slash == std::string::npos ? "" : rest.substr(slash + 1);
    GraphManager* g = graph_;
    if (action.empty() && method == bhttp::verb::put) {
      change = [g, id, body = req.body()] { return g->Put("pipeline", id, body); };
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
    change = [g = graph_, name = UrlDecode(path.substr(kBuckets.size())), body = req.body()] {
      return g->Put("bucket", name, body);
    };
  } else if (path == "/api/v1/checkpoints" && method == bhttp::verb::post) {
    change = [this] { return TakeCheckpoint(); };
  }
  if (!change) return false;
  Response refused;
  if (!Authorized(req, path, &refused)) return false;  // Handle answers 401 or 403
  auto reply = [done](const GraphManager::Answer& a) {
    done(IngestReply{HttpStatus(a.outcome), a.body.dump(),
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

void Api::Health(Response* res) { SendJson(res, 200, Json{{"status", "ok"}}); }

Json Api::NotReadyReasons() {
  Json reasons = Json::array();
  const RunningGraph* g = graph();
  if (g == nullptr) {
    reasons.push_back(Json{{"reason", "the graph is not running"}});
    return reasons;
  }
  if (g->changing()) reasons.push_back(Json{{"reason", "a change to the graph is being applied"}});
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

void Api::Ready(Response* res) {
  Json reasons = NotReadyReasons();
  const bool ready = reasons.empty();
  SendJson(res, ready ? 200 : 503,
           Json{{"status", ready ? "ready" : "not ready"}, {"reasons", std::move(reasons)}});
}

void Api::ListPipelines(Response* res) {
  Json list = Json::array();
  for (const auto* p : graph()->pipelines()) {
    list.push_back(PipelineJson(*p, false, graph_->CurrentVersion(p->id())));
  }
  SendJson(res, 200, Json{{"pipelines", std::move(list)}});
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
  if (page.size() == limit) body["next_after"] = page.back().first;
  SendJson(res, 200, body);
}

namespace {

Json CheckpointsJson(const std::vector<RegionStatus>& all) {
  Json regions = Json::array();
  for (const auto& r : all) {
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
                           {"last_error", r.last_error}});
  }
  return Json{{"checkpointing", true}, {"regions", std::move(regions)}};
}

}  // namespace

void Api::Checkpoints(Response* res) {
  if (!graph()->checkpointing()) {
    return SendJson(res, 200, Json{{"checkpointing", false}, {"regions", Json::array()}});
  }
  SendJson(res, 200, CheckpointsJson(graph()->Regions()));
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
  return {ok ? Outcome::kOk : Outcome::kUnavailable, CheckpointsJson(g->Regions())};
}

void Api::Metrics(Response* res) {
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  auto sample = [&](const char* name, const std::string& labels, uint64_t v) {
    out += std::string(name) + "{" + labels + "} " + std::to_string(v) + "\n";
  };
  const auto& pipelines = graph()->pipelines();
  auto labels = [](const PipelineRunner& p, const ComponentStats& c) {
    return "pipeline=\"" + p.id() + "\",component=\"" + c.name() + "\",type=\"" + c.type() + "\"";
  };
  family("kayak_ready", "gauge", "1 when /ready answers 200, else 0.");
  const Json reasons = NotReadyReasons();
  out += "kayak_ready " + std::string(reasons.empty() ? "1" : "0") + "\n";
  family("kayak_not_ready_reasons", "gauge", "How many reasons /ready lists.");
  out += "kayak_not_ready_reasons " + std::to_string(reasons.size()) + "\n";
  family("kayak_component_state_since_ms", "gauge",
         "Wall-clock ms of a component's last change of state (retrying since, failed since).");
  for (const auto& p : pipelines) {
    for (const auto* c : p->cards()) {
      sample("kayak_component_state_since_ms",
             labels(*p, *c) + ",state=\"" + ComponentStateName(c->state()) + "\"",
             static_cast<uint64_t>(c->state_since_ms()));
    }
  }
  family("kayak_messages_in_total", "counter", "Messages a component received.");
  for (const auto& p : pipelines) {
    for (const auto* c : p->cards()) sample("kayak_messages_in_total", labels(*p, *c), c->in());
  }
  family("kayak_messages_out_total", "counter", "Messages a component passed on or wrote.");
  for (const auto& p : pipelines) {
    for (const auto* c : p->cards()) sample("kayak_messages_out_total", labels(*p, *c), c->out());
  }
  family("kayak_errors_total", "counter", "Errors a component had.");
  for (const auto& p : pipelines) {
    for (const auto* c : p->cards()) sample("kayak_errors_total", labels(*p, *c), c->errors());
  }
  family("kayak_queue_depth", "gauge", "Batches waiting in a bounded queue.");
  for (const auto& p : pipelines) {
    for (const auto& [name, depth] : p->QueueDepths()) {
      sample("kayak_queue_depth", "pipeline=\"" + p->id() + "\",queue=\"" + name + "\"", depth);
    }
  }
  family("kayak_bucket_entries", "gauge", "Live entries in a bucket.");
  for (const auto* b : graph()->Buckets()) {
    sample("kayak_bucket_entries", "bucket=\"" + b->name() + "\"", b->Size());
  }
  if (graph()->checkpointing()) {
    const auto regions = graph()->Regions();
    auto each = [&](const char* name, const char* type, const char* help, auto value) {
      family(name, type, help);
      for (const auto& r : regions) sample(name, "region=\"" + r.name + "\"", value(r));
    };
    each("kayak_checkpoint_last_committed_id", "gauge", "Id of the region's last committed checkpoint.",
         [](const RegionStatus& r) { return r.last_committed_id; });
    each("kayak_checkpoints_committed_total", "counter", "Checkpoints the region committed.",
         [](const RegionStatus& r) { return r.committed; });
    each("kayak_checkpoints_abandoned_total", "counter", "Checkpoints the region abandoned.",
         [](const RegionStatus& r) { return r.abandoned; });
    each("kayak_checkpoint_duration_ms", "gauge", "Barrier to commit, last checkpoint.",
         [](const RegionStatus& r) { return static_cast<uint64_t>(r.last_duration_ms); });
    each("kayak_checkpoint_bytes_written", "gauge", "Bytes the last checkpoint wrote.",
         [](const RegionStatus& r) { return r.bytes_written; });
    each("kayak_checkpoint_bytes_reused", "gauge", "Bytes of unchanged state the last checkpoint referred to.",
         [](const RegionStatus& r) { return r.bytes_reused; });
    each("kayak_checkpoint_held_back", "gauge", "1 when a failed pipeline holds the region back.",
         [](const RegionStatus& r) { return static_cast<uint64_t>(r.held_back.empty() ? 0 : 1); });
  }
  res->result(200);
  res->set(bhttp::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
  res->body() = std::move(out);
}

void Api::Dashboard(Response* res) {
  res->result(200);
  res->set(bhttp::field::content_type, "text/html; charset=utf-8");
  res->body() = R"(<!doctype html>
<html><head><meta charset="utf-8"><title>kayak</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;background:#fafafa}
.p{background:#fff;border:1px solid #ddd;border-radius:6px;padding:1em;margin-bottom:1em}
.cards{display:flex;gap:.5em;flex-wrap:wrap}
.c{border:1px solid #ccc;border-radius:4px;padding:.5em;min-width:11em;font-size:.9em}
.failed,.retrying{border-color:#c00;background:#fee}
.err{color:#c00;font-size:.8em}
.ready{border:1px solid #c00;background:#fee;padding:.5em 1em;border-radius:6px;margin-bottom:1em}
</style></head><body><h1>kayak</h1><div id="ready"></div><div id="g">loading…</div>
<script>
let asked=false;
function esc(s){return String(s).replace(/[&<>"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]))}
async function load(){
  const t=sessionStorage.getItem('kayak-token');
  const r=await fetch('/api/v1/pipelines',t?{headers:{Authorization:'Bearer '+t}}:{});
  if(r.status==401||r.status==403){
    const n=asked?null:prompt('The admin API needs its token (auth.token_file):');
    asked=true;
    if(n){sessionStorage.setItem('kayak-token',n.trim());asked=false;return load();}
    document.getElementById('g').textContent='the admin API needs its token; reload to enter it';
    return;
  }
  const d=await r.json();
  const rd=await (await fetch('/ready')).json();
  document.getElementById('ready').innerHTML=rd.reasons.length?'<div class="ready"><b>not ready</b><ul>'+
    rd.reasons.map(x=>'<li>'+esc(x.reason)+' '+esc(x.pipeline||x.region||'')+(x.component?' '+esc(x.component):'')+
    (x.since_ms?' since '+esc(new Date(x.since_ms).toISOString()):'')+
    (x.why||x.last_error?': '+esc(x.why||x.last_error):'')+'</li>').join('')+'</ul></div>':'';
  document.getElementById('g').innerHTML=d.pipelines.map(p=>
    '<div class="p"><b>'+esc(p.id)+'</b> '+esc(p.status)+
    (p.upstreams.length?' ← '+p.upstreams.map(esc).join(', '):'')+
    '<div class="cards">'+p.components.map(c=>'<div class="c '+esc(c.state)+'"><b>'+esc(c.type)+
    '</b> '+esc(c.name)+'<br>'+esc(c.state)+'<br>in '+c.messages_in+' / out '+c.messages_out+
    '<br>errors '+c.errors+(c.last_error?'<div class="err">'+esc(c.last_error)+'</div>':'')+
    '</div>').join('')+'</div></div>').join('');
}
load();setInterval(load,2000);
</script></body></html>
)";
}

}  // namespace kayak::http
