#include "engine/graph_history.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>

#include "checkpoint/state_layout.h"
#include "common/format.h"
#include "common/io.h"
#include "common/json_util.h"
#include "common/log.h"
#include "engine/engine.h"

namespace kayak {

namespace {

using Json = nlohmann::ordered_json;

// docs/state_format.md, "the graph file".
constexpr int kGraphFormat = 1;

std::string Emit(const YAML::Node& node) {
  YAML::Emitter e;
  e << node;
  std::string s = e.c_str();
  if (s.empty() || s.back() != '\n') s.push_back('\n');
  return s;
}

void AppendIndented(std::string* out, const std::string& body, int* lines) {
  std::istringstream in(body);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out->append("    ").append(line).push_back('\n');
    ++n;
  }
  if (n == 0) {  // an empty body: the key's value is null
    out->append("    ~\n");
    n = 1;
  }
  *lines = n;
}

int CountLines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

GraphHistory::GraphHistory(const ComponentRegistry* registry, bool checkpointing,
                           const Clock* clock, std::string state_dir)
    : registry_(registry),
      checkpointing_(checkpointing),
      clock_(clock),
      state_dir_(std::move(state_dir)) {}

void GraphHistory::Swap(Entries* buckets, Entries* pipelines) {
  std::swap(buckets_, *buckets);
  std::swap(pipelines_, *pipelines);
}

void GraphHistory::Order(const std::string& pipeline) {
  if (std::find(order_.begin(), order_.end(), pipeline) == order_.end()) {
    order_.push_back(pipeline);
  }
}

void GraphHistory::Publish() {
  MutexLock lock(view_mu_);
  view_pipelines_ = pipelines_;
}

int GraphHistory::CurrentVersion(const std::string& id) const {
  MutexLock lock(view_mu_);
  auto it = view_pipelines_.find(id);
  if (it == view_pipelines_.end() || !it->second.live()) return 0;
  return it->second.versions.back().number;
}

GraphHistory::Composed GraphHistory::Compose(const Entries& buckets, const Entries& pipelines,
                                             const std::string& kind,
                                             const std::string& name) const {
  Composed c;
  auto section = [&](const char* title, const Entries& entries, const std::string& k,
                     const std::vector<std::string>& order) {
    std::vector<std::string> names;
    for (const auto& n : order) {
      auto it = entries.find(n);
      if (it != entries.end() && it->second.live() && !(k == kind && n == name)) {
        names.push_back(n);
      }
    }
    const bool tested = k == kind && entries.count(name) && entries.at(name).live();
    if (names.empty() && !tested) return false;
    c.text.append(title).append(":\n");
    for (const auto& n : names) {
      c.text.append("  ").append(n).append(":\n");
      int lines = 0;
      AppendIndented(&c.text, entries.at(n).versions.back().body, &lines);
    }
    if (tested) {  // the body under test goes last, so its lines are easy to find
      c.text.append("  ").append(name).append(":\n");
      c.body_first_line = CountLines(c.text) + 1;
      AppendIndented(&c.text, entries.at(name).versions.back().body, &c.body_lines);
    }
    return true;
  };
  std::vector<std::string> bucket_order;
  for (const auto& [n, e] : buckets) bucket_order.push_back(n);
  section("buckets", buckets, "bucket", bucket_order);
  if (!section("pipelines", pipelines, "pipeline", order_)) c.text.append("pipelines: {}\n");
  return c;
}

bool GraphHistory::Validate(const Composed& c, GraphSpec* spec, Json* errors) const {
  ErrorList el;
  const bool loaded = LoadGraphText(c.text, "body", *registry_, spec, &el);
  ValidateComponents(*spec, &el, checkpointing_);
  if (loaded && el.empty()) return true;
  *errors = Json::array();
  for (const auto& e : el.errors()) {
    int line = e.mark.line, column = e.mark.column;
    if (c.body_first_line > 0 && line >= c.body_first_line &&
        line < c.body_first_line + c.body_lines) {
      line = line - c.body_first_line + 1;
      column = std::max(1, column - 4);
    } else {
      line = column = 0;  // about the graph around the body (a cycle, a missing upstream)
    }
    errors->push_back(Json{{"line", line}, {"column", column}, {"message", e.message}});
  }
  return false;
}

Status GraphHistory::Persist() const {
  if (!checkpointing_) return Status::Ok();
  auto entries = [this](const Entries& es) {
    Json j = Json::object();
    for (const auto& [name, e] : es) {
      Json vs = Json::array();
      for (const auto& v : e.versions) {
        vs.push_back(Json{{"version", v.number}, {"created_ms", v.created_ms},
                          {"change", v.change}, {"body", AtRest(v.body)}});
      }
      j[name] = Json{{"from_api", e.from_api}, {"versions", std::move(vs)}};
    }
    return j;
  };
  Json j{{"format", kGraphFormat},
         {"order", order_},
         {"buckets", entries(buckets_)},
         {"pipelines", entries(pipelines_)}};
  const std::string dir = layout::GraphDir(state_dir_);
  KAYAK_RETURN_IF_ERROR(CreateDirsDurably(dir));
  const std::string bytes = checkpoint::Frame(checkpoint::FileKind::kGraph, DumpJson(j));
  KAYAK_RETURN_IF_ERROR(checkpoint::WriteFileSynced(dir + "/GRAPH.tmp", bytes));
  return checkpoint::RenameSynced(dir + "/GRAPH.tmp", dir + "/GRAPH", dir);
}

Status GraphHistory::Load(bool* found) {
  *found = false;
  const std::string path = layout::GraphFile(state_dir_);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Status::Ok();
  auto bytes = checkpoint::ReadWholeFile(path);
  if (!bytes.ok()) return bytes.status();
  auto payload = checkpoint::Unframe(checkpoint::FileKind::kGraph, *bytes);
  const std::string fix = "; move it away to start from the config file alone";
  if (!payload.ok()) return Status::Corruption(path + ": " + payload.status().message() + fix);
  Json j = Json::parse(payload.value(), nullptr, false);
  if (!j.is_object() || j.value("format", 0) != kGraphFormat) {
    return Status::Corruption(path + ": not a graph file of format " +
                              std::to_string(kGraphFormat) + fix);
  }
  try {
    Status opened;
    auto load = [&](const Json& src, Entries* out) {
      for (const auto& [name, e] : src.items()) {
        Entry& entry = (*out)[name];
        entry.from_api = e.at("from_api").get<bool>();
        for (const auto& v : e.at("versions")) {
          entry.versions.push_back(Version{v.at("version").get<int>(),
                                           v.at("created_ms").get<int64_t>(),
                                           v.at("change").get<std::string>(),
                                           v.at("body").get<std::string>()});
          if (Status st = FromRest(&entry.versions.back().body); !st.ok() && opened.ok()) {
            opened = Status::Corruption(name + " version " +
                                        std::to_string(entry.versions.back().number) + ": " +
                                        st.message());
          }
        }
      }
    };
    load(j.at("buckets"), &buckets_);
    load(j.at("pipelines"), &pipelines_);
    if (!opened.ok()) return Status::Corruption(path + ": " + opened.message() + fix);
    order_ = j.at("order").get<std::vector<std::string>>();
  } catch (const std::exception& e) {
    return Status::Corruption(path + ": " + e.what() + fix);
  }
  *found = true;
  return Status::Ok();
}

// The config file decides every pipeline and bucket not changed through the
// API: new or changed ones get a version, ones it no longer names are
// deleted. What the API changed keeps its stored version (with a warning when
// the file says otherwise). docs/lifecycle.md.
void GraphHistory::Seed(const std::string& file_text) {
  YAML::Node root = YAML::Load(file_text);  // the file was validated before
  const int64_t now = NowMs();
  auto merge = [&](const YAML::Node& section, Entries* entries, const char* what,
                   std::vector<std::string>* order) {
    std::set<std::string> in_file;
    if (section.IsMap()) {
      for (const auto& kv : section) {
        const std::string name = kv.first.as<std::string>();
        const std::string body = Emit(kv.second);
        in_file.insert(name);
        Entry& e = (*entries)[name];
        if (order && std::find(order->begin(), order->end(), name) == order->end()) {
          order->push_back(name);
        }
        if (e.from_api) {
          if (!e.live() || e.versions.back().body != body) {
            KLOG_WARN("{} {}: the config file differs from version {} made through the API, "
                      "which stays in force (docs/lifecycle.md)",
                      what, name, e.versions.empty() ? 0 : e.versions.back().number);
          }
          continue;
        }
        if (!e.live() || e.versions.back().body != body) {
          const int n = e.versions.empty() ? 1 : e.versions.back().number + 1;
          e.versions.push_back(Version{n, now, "from-file", body});
        }
      }
    }
    for (auto& [name, e] : *entries) {
      if (!e.from_api && e.live() && !in_file.count(name)) {
        KLOG_INFO("{} {}: no longer in the config file, deleted", what, name);
        e.versions.push_back(Version{e.versions.back().number + 1, now, "deleted", ""});
      }
    }
  };
  merge(root["buckets"], &buckets_, "bucket", nullptr);
  merge(root["pipelines"], &pipelines_, "pipeline", &order_);
}

namespace {

// A secret option's value that names where the secret is, not the secret:
// one ${NAME} (or ${file:...}) reference and nothing around it.
bool IsReference(const YAML::Node& v) {
  if (!v.IsScalar()) return false;
  const std::string& s = v.Scalar();
  return s.size() > 3 && s.rfind("${", 0) == 0 && s.find('}') == s.size() - 1;
}

// Calls `f` with every secret option of the body's components whose value is
// not a reference (a literal secret, or a map of them): the options map and
// the option's name.
template <typename F>
void ForEachLiteralSecret(const ComponentRegistry& registry, YAML::Node root, F&& f) {
  auto component = [&](const char* kind, YAML::Node c) {
    if (!c.IsMap() || c.size() != 1) return;
    auto kv = *c.begin();
    const ComponentDef* def = registry.Find(kind, kv.first.Scalar());
    if (def == nullptr || !kv.second.IsMap()) return;
    for (const auto& p : def->props) {
      YAML::Node v = kv.second[p.name];
      if (!p.secret || !v.IsDefined() || v.IsNull() || IsReference(v)) continue;
      if (v.IsMap()) {
        bool all = true;
        for (const auto& e : v) all = all && IsReference(e.second);
        if (all) continue;
      }
      f(kv.second, p.name);
    }
  };
  component("input", root["input"]);
  for (const char* list : {"transforms", "outputs"}) {
    YAML::Node l = root[list];
    if (!l.IsSequence()) continue;
    for (auto c : l) component(list == std::string("outputs") ? "output" : "transform", c);
  }
}

YAML::Node LoadBody(const std::string& body) {
  try {
    YAML::Node root = YAML::Load(body);
    return root.IsMap() ? root : YAML::Node();
  } catch (const YAML::Exception&) {
    return YAML::Node();
  }
}

constexpr std::string_view kSealedBody = "${sealed:";

}  // namespace

// A pipeline body as the API may show it: the values of secret options
// (PropDef::secret) replaced by "***", unless they are ${ENV} references.
std::string GraphHistory::WithoutSecrets(const std::string& body) const {
  YAML::Node root = LoadBody(body);
  if (!root.IsDefined() || root.IsNull()) return body;
  bool masked = false;
  ForEachLiteralSecret(*registry_, root, [&](YAML::Node options, const std::string& name) {
    options[name] = "***";
    masked = true;
  });
  return masked ? Emit(root) : body;
}

// A body as the graph file keeps it: one that holds a literal secret sealed
// whole (Store::SealText), so the file never holds the secret.
std::string GraphHistory::AtRest(const std::string& body) const {
  if (store_ == nullptr) return body;
  YAML::Node root = LoadBody(body);
  if (!root.IsDefined() || root.IsNull()) return body;
  bool literal = false;
  ForEachLiteralSecret(*registry_, root,
                       [&](YAML::Node, const std::string&) { literal = true; });
  if (!literal) return body;
  return std::string(kSealedBody) + store_->SealText(body) + "}";
}

Status GraphHistory::FromRest(std::string* body) const {
  if (body->rfind(kSealedBody, 0) != 0 || body->back() != '}') return Status::Ok();
  if (store_ == nullptr) return Status::Corruption("a sealed body without the store's key");
  auto opened = store_->OpenText(
      std::string_view(*body).substr(kSealedBody.size(), body->size() - kSealedBody.size() - 1));
  if (!opened.ok()) return opened.status();
  *body = std::move(opened).value();
  return Status::Ok();
}

std::optional<Json> GraphHistory::Versions(const std::string& id) const {
  MutexLock lock(view_mu_);
  auto it = view_pipelines_.find(id);
  if (it == view_pipelines_.end()) return std::nullopt;
  Json vs = Json::array();
  for (const auto& v : it->second.versions) {
    vs.push_back(Json{{"version", v.number}, {"created_ms", v.created_ms}, {"change", v.change},
                      {"body", WithoutSecrets(v.body)}});
  }
  return Json{{"id", id},
              {"current", it->second.live() ? it->second.versions.back().number : 0},
              {"versions", std::move(vs)}};
}

}  // namespace kayak
