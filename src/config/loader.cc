#include "config/loader.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "common/redact.h"
#include "config/yaml_load.h"

namespace kayak {

bool IsValidId(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  }
  return true;
}

namespace {

// The largest secret file ${file:...} reads: a password, a token, a key or a
// credentials file, not data.
constexpr size_t kMaxSecretFile = 1 << 20;
constexpr std::string_view kSecretFile = "file:";

// ${file:PATH}: the file's content with one trailing newline cut (what
// `echo secret > file` leaves), registered with the redactor. The error
// names the path, never what the file holds.
bool ReadSecretFile(const std::string& path, std::string* out, std::string* error) {
  if (path.empty() || path[0] != '/') {
    *error = "secret file '" + path + "' is not an absolute path";
    return false;
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "secret file '" + path + "' cannot be read: " +
             (errno != 0 ? std::strerror(errno) : "cannot open");
    return false;
  }
  std::string content;
  char buf[4096];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    content.append(buf, static_cast<size_t>(in.gcount()));
    if (content.size() > kMaxSecretFile) {
      *error = "secret file '" + path + "' is larger than 1 MiB";
      return false;
    }
  }
  if (in.bad()) {
    *error = "secret file '" + path + "' cannot be read";
    return false;
  }
  if (!content.empty() && content.back() == '\n') content.pop_back();
  if (!content.empty() && content.back() == '\r') content.pop_back();
  RegisterSecret(content);
  *out += content;
  return true;
}

// Replaces every ${NAME} with the environment variable and every
// ${file:PATH} with the file's content; false with `error` for the first
// that cannot be had. Anything else, `${` included, stays as written.
bool Interpolate(const std::string& in, std::string* out, std::string* error) {
  out->clear();
  size_t i = 0;
  while (i < in.size()) {
    if (in[i] == '$' && i + 1 < in.size() && in[i + 1] == '{') {
      const size_t close = in.find('}', i + 2);
      if (close != std::string::npos) {
        const std::string name = in.substr(i + 2, close - i - 2);
        if (name.rfind(kSecretFile, 0) == 0) {
          if (!ReadSecretFile(name.substr(kSecretFile.size()), out, error)) return false;
          i = close + 1;
          continue;
        }
        bool valid = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0]));
        for (char c : name) valid = valid && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
        if (valid) {
          const char* v = std::getenv(name.c_str());
          if (v == nullptr) {
            *error = "environment variable '" + name + "' is not set";
            return false;
          }
          *out += v;
          i = close + 1;
          continue;
        }
      }
    }
    *out += in[i++];
  }
  return true;
}

// A secret option's value into the redactor: a string, or a map's values
// whose keys name a credential (headers, librdkafka properties).
void RegisterSecrets(const YAML::Node& v) {
  if (v.IsScalar()) {
    RegisterSecret(v.Scalar());
    return;
  }
  if (!v.IsMap()) return;
  for (const auto& kv : v) {
    if (!kv.first.IsScalar() || !kv.second.IsScalar()) continue;
    std::string key = kv.first.Scalar();
    std::transform(key.begin(), key.end(), key.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    for (const char* word : {"pass", "secret", "token", "key", "auth", "credential", "cookie"}) {
      if (key.find(word) != std::string::npos) {
        RegisterSecret(kv.second.Scalar());
        break;
      }
    }
  }
}

// A stable text form of a node for fingerprints: keys in document order,
// scalars quoted, so reformatting the file does not change it.
void Canonical(const YAML::Node& n, std::string* out) {
  switch (n.Type()) {
    case YAML::NodeType::Scalar:
      *out += "\"" + n.Scalar() + "\"";
      return;
    case YAML::NodeType::Sequence:
      *out += "[";
      for (const auto& e : n) {
        Canonical(e, out);
        *out += ",";
      }
      *out += "]";
      return;
    case YAML::NodeType::Map:
      *out += "{";
      for (const auto& kv : n) {
        *out += "\"" + kv.first.Scalar() + "\":";
        Canonical(kv.second, out);
        *out += ",";
      }
      *out += "}";
      return;
    default:
      *out += "null";
  }
}

class GraphLoader {
 public:
  GraphLoader(const std::string& file, const ComponentRegistry& registry, ErrorList* errors)
      : file_(file), registry_(registry), errors_(errors) {}

  void Load(const YAML::Node& root, GraphSpec* out) {
    out->file = file_;
    if (!root.IsDefined() || root.IsNull()) {
      Err(root, "the file is empty: expected a map with 'pipelines' (and optionally 'buckets')");
      return;
    }
    if (!root.IsMap()) {
      Err(root, "expected a map with 'pipelines' (and optionally 'buckets')");
      return;
    }
    for (const auto& kv : root) {
      const std::string k = kv.first.Scalar();
      if (k != "pipelines" && k != "buckets") {
        Err(kv.first, "unknown top-level key '" + k + "' (known: buckets, pipelines)");
      }
    }
    LoadBuckets(root["buckets"], out);
    const YAML::Node pipelines = root["pipelines"];
    if (!pipelines.IsDefined() || pipelines.IsNull()) {
      Err(root, "missing 'pipelines': declare at least one pipeline");
      return;
    }
    if (!pipelines.IsMap()) {
      Err(pipelines, "'pipelines' must be a map of pipeline id to pipeline");
      return;
    }
    std::vector<PipelineSpec> specs;
    for (const auto& kv : pipelines) {
      PipelineSpec p;
      // Kept even when invalid, so components that are fine still get their
      // semantic checks and every error is reported in one run.
      LoadPipeline(kv.first, kv.second, &p);
      SplitAtRepartitions(std::move(p), &specs);
    }
    ReadFromLastParts(&specs);
    CheckGraph(&specs, out);
  }

 private:
  void Err(const YAML::Node& n, std::string msg) { errors_->Add(MarkOf(file_, n), std::move(msg)); }

  void LoadBuckets(const YAML::Node& buckets, GraphSpec* out) {
    if (!buckets.IsDefined() || buckets.IsNull()) return;
    if (!buckets.IsMap()) {
      Err(buckets, "'buckets' must be a map of bucket name to its declaration");
      return;
    }
    for (const auto& kv : buckets) {
      BucketSpec b;
      b.name = kv.first.Scalar();
      b.mark = MarkOf(file_, kv.first);
      if (!IsValidId(b.name)) {
        Err(kv.first, "bad bucket name '" + b.name + "': use 1-64 of a-z 0-9 _ -");
        continue;
      }
      const YAML::Node& decl = kv.second;
      if (decl.IsMap()) {
        for (const auto& o : decl) {
          const std::string k = o.first.Scalar();
          auto whole = [&](const char* what, int64_t* out) {
            char* end = nullptr;
            const std::string s = o.second.IsScalar() ? o.second.Scalar() : "";
            const long long v = std::strtoll(s.c_str(), &end, 10);
            if (s.empty() || *end != '\0' || v < 0) {
              Err(o.second, "bucket '" + b.name + "': " + k + " must be a whole number" + what +
                                " >= 0");
            } else {
              *out = v;
            }
          };
          if (k == "idle_timeout_secs") {
            whole(" of seconds", &b.idle_timeout_secs);
          } else if (k == "max_keys") {
            whole("", &b.max_keys);
          } else if (k == "on_full") {
            const std::string s = o.second.IsScalar() ? o.second.Scalar() : "";
            if (s != "refuse" && s != "evict_oldest") {
              Err(o.second, "bucket '" + b.name + "': on_full must be refuse or evict_oldest");
            }
            b.evict_oldest = s == "evict_oldest";
          } else {
            Err(o.first, "unknown option '" + k + "' for bucket '" + b.name +
                             "' (known: idle_timeout_secs, max_keys, on_full)");
          }
        }
      } else if (!decl.IsNull()) {
        Err(decl, "bucket '" + b.name + "' must be a map of options (or empty)");
      }
      // The limit is tuning: changing it keeps the bucket's state.
      YAML::Node identity = YAML::Clone(decl);
      if (identity.IsMap()) {
        identity.remove("max_keys");
        identity.remove("on_full");
      }
      Canonical(identity, &b.fingerprint);
      bucket_names_.insert(b.name);
      out->buckets.push_back(std::move(b));
    }
  }

  bool LoadComponent(const std::string& kind, const YAML::Node& node, ComponentSpec* c) {
    c->mark = MarkOf(file_, node);
    if (!node.IsMap() || node.size() != 1) {
      Err(node, "a" + std::string(kind == "input" ? "n " : " ") + kind +
                    " is a one-key map {type: options}");
      return false;
    }
    auto kv = *node.begin();
    const std::string type = kv.first.Scalar();
    c->def = registry_.Find(kind, type);
    if (c->def == nullptr) {
      std::string known;
      for (const auto* d : registry_.All()) {
        if (d->kind == kind) known += (known.empty() ? "" : ", ") + d->type;
      }
      Err(kv.first, "unknown " + kind + " type '" + type + "' (known: " + known + ")");
      return false;
    }
    c->mark = MarkOf(file_, kv.first);
    c->value = kv.second;
    c->fingerprint = type + ":";
    if (c->def->shape == Shape::kOptions && kv.second.IsMap()) {
      // Tuning options decide how fast, not what: changing one keeps the
      // state. Written as Canonical writes a map, without building one (a
      // node assigned from the document merges the whole document's memory
      // into it: a cost per component that grows with the file).
      c->fingerprint += "{";
      for (const auto& o : kv.second) {
        const std::string name = o.first.IsScalar() ? o.first.Scalar() : "";
        const PropDef* prop = nullptr;
        for (const auto& p : c->def->props) {
          if (p.name == name) prop = &p;
        }
        if (prop != nullptr && prop->secret) RegisterSecrets(o.second);
        if (prop != nullptr && prop->role == PropRole::kTuning) continue;
        c->fingerprint += "\"" + o.first.Scalar() + "\":";
        if (prop != nullptr && prop->address && o.second.IsScalar()) {
          c->fingerprint += "\"" + AddressIdentity(o.second.Scalar()) + "\"";
        } else {
          Canonical(o.second, &c->fingerprint);
        }
        c->fingerprint += ",";
      }
      c->fingerprint += "}";
    } else {
      Canonical(kv.second, &c->fingerprint);
    }
    if (!ValidateShape(*c->def, kv.second, c->mark, errors_)) return false;
    CollectRefs(c);
    return kind != "output" || ParseRetry(c->value, &c->retry);
  }

  // What the component's options name, from its property table.
  void CollectRefs(ComponentSpec* c) {
    if (!c->value.IsMap()) return;
    for (const auto& p : c->def->props) {
      if (p.ref == PropRef::kNone) continue;
      const YAML::Node v = c->value[p.name];
      if (!v.IsDefined() || !v.IsScalar()) continue;
      if (p.ref == PropRef::kServedPath) {
        c->served_path = v.Scalar();
        c->served_path_mark = MarkOf(file_, v);
        continue;
      }
      bool writes = p.ref == PropRef::kBucketWrite;
      if (writes && !p.reads_only_when.first.empty()) {
        const YAML::Node w = c->value[p.reads_only_when.first];
        if (w.IsScalar() && w.Scalar() == p.reads_only_when.second) writes = false;
      }
      c->buckets.push_back(BucketUse{v.Scalar(), writes, MarkOf(file_, v)});
    }
  }

  // An output's `retry: {base_ms, max_ms, max_attempts}`.
  bool ParseRetry(const YAML::Node& value, RetryPolicy* out) {
    if (!value.IsMap()) return true;
    const YAML::Node r = value["retry"];
    if (!r.IsDefined() || r.IsNull()) return true;
    bool ok = true;
    for (const auto& kv : r) {
      const std::string k = kv.first.Scalar();
      int64_t* slot = k == "base_ms" ? &out->base_ms
                      : k == "max_ms" ? &out->max_ms
                      : k == "max_attempts" ? &out->max_attempts
                                            : nullptr;
      if (slot == nullptr) {
        Err(kv.first, "unknown retry option '" + k + "' (known: base_ms, max_ms, max_attempts)");
        ok = false;
        continue;
      }
      char* end = nullptr;
      const std::string& s = kv.second.Scalar();
      const long long v = std::strtoll(s.c_str(), &end, 10);
      if (s.empty() || *end != '\0' || v < 1) {
        Err(kv.second, "retry." + k + " must be a whole number >= 1");
        ok = false;
        continue;
      }
      *slot = v;
    }
    if (out->max_ms < out->base_ms) out->max_ms = out->base_ms;
    return ok;
  }

  bool LoadPipeline(const YAML::Node& key, const YAML::Node& body, PipelineSpec* p) {
    p->id = key.Scalar();
    p->mark = MarkOf(file_, key);
    bool ok = true;
    if (!IsValidId(p->id)) {
      Err(key, "bad pipeline id '" + p->id + "': use 1-64 of a-z 0-9 _ -");
      ok = false;
    }
    if (!body.IsMap()) {
      Err(body.IsNull() ? key : body,
          "pipeline '" + p->id + "' must be a map with input, transforms and outputs");
      return false;
    }
    for (const auto& kv : body) {
      const std::string k = kv.first.Scalar();
      if (k != "input" && k != "transforms" && k != "outputs" && k != "dead_letter") {
        Err(kv.first, "unknown key '" + k + "' in pipeline '" + p->id +
                          "' (known: input, transforms, outputs, dead_letter)");
        ok = false;
      }
    }
    const YAML::Node input = body["input"];
    if (!input.IsDefined()) {
      Err(key, "pipeline '" + p->id + "' is missing its input");
      ok = false;
    } else if (ComponentSpec c; LoadComponent("input", input, &c)) {
      p->input = std::move(c);
      if (p->input.def->reads_pipelines) {
        const YAML::Node& v = p->input.value;
        if (v.IsScalar()) {
          p->upstreams.push_back(v.Scalar());
        } else {
          for (const auto& e : v) p->upstreams.push_back(e.Scalar());
        }
      }
    } else {
      ok = false;
    }
    ok = LoadList("transform", body["transforms"], &p->transforms) && ok;
    ok = LoadList("output", body["outputs"], &p->outputs) && ok;
    if (const YAML::Node dead = body["dead_letter"]; dead.IsDefined() && !dead.IsNull()) {
      if (ComponentSpec c; LoadComponent("output", dead, &c)) {
        p->outputs.push_back(std::move(c));
        p->dead_letter = static_cast<int>(p->outputs.size()) - 1;
      } else {
        ok = false;
      }
    }
    return ok;
  }

  bool LoadList(const std::string& kind, const YAML::Node& list, std::vector<ComponentSpec>* out) {
    if (!list.IsDefined() || list.IsNull()) return true;
    if (!list.IsSequence()) {
      Err(list, "'" + kind + "s' must be a list of components");
      return false;
    }
    bool ok = true;
    for (const auto& item : list) {
      ComponentSpec c;
      if (LoadComponent(kind, item, &c)) {
        out->push_back(std::move(c));
      } else {
        ok = false;
      }
    }
    return ok;
  }

  // A pipeline with `repartition` steps becomes one pipeline per part: the
  // part before a step ends in a kafka output of the step's topic, keyed by
  // its key; the part after it, <id>-part2 (-part3, ...), reads that topic
  // with a kafka input and goes on with the steps after it, and the last
  // part has the pipeline's outputs and dead letters. Each part after a
  // step is partitioned by the step's key: in a cluster, a region of its own
  // whose shards follow that key.
  //
  // An input that writes ahead to a Kafka topic (`writes_ahead_to_kafka`,
  // given `topic`) is a part by itself: the steps after it read that topic.
  void SplitAtRepartitions(PipelineSpec p, std::vector<PipelineSpec>* specs) {
    declared_ids_.insert(p.id);
    std::vector<size_t> cuts;
    for (size_t i = 0; i < p.transforms.size(); ++i) {
      if (p.transforms[i].def != nullptr && p.transforms[i].def->cuts_pipeline) {
        cuts.push_back(i);
      }
    }
    const bool ahead = p.input.def != nullptr && p.input.def->writes_ahead_to_kafka &&
                       p.input.value.IsMap() && p.input.value["topic"].IsDefined() &&
                       p.input.value["brokers"].IsDefined();  // without, the input says so
    if (cuts.empty() && !ahead) {
      specs->push_back(std::move(p));
      return;
    }
    // Each part is made in its place in `specs`: a YAML::Node assigned to
    // writes through to the node it shared, so no spec is assigned over.
    specs->emplace_back();
    size_t part = specs->size() - 1;
    (*specs)[part].id = p.id;
    (*specs)[part].mark = p.mark;
    (*specs)[part].input = std::move(p.input);
    (*specs)[part].upstreams = std::move(p.upstreams);
    size_t from = 0;
    size_t parts = 1;
    if (ahead) {
      PipelineSpec next;
      next.id = p.id + "-part" + std::to_string(++parts);
      next.mark = (*specs)[part].input.mark;
      MakeWriteAheadInput((*specs)[part].input, p.id, &next.input);
      generated_ids_[next.id] = next.mark;
      specs->push_back(std::move(next));
      part = specs->size() - 1;
    }
    for (size_t k = 0; k < cuts.size(); ++k) {
      const ComponentSpec& step = p.transforms[cuts[k]];
      for (size_t i = from; i < cuts[k]; ++i) {
        (*specs)[part].transforms.push_back(std::move(p.transforms[i]));
      }
      PipelineSpec next;
      next.id = p.id + "-part" + std::to_string(++parts);
      next.mark = step.mark;
      ComponentSpec out;
      if (MakeRepartitionEnds(step, p.id, (*specs)[part].input, &out, &next.input)) {
        (*specs)[part].outputs.push_back(std::move(out));
      }
      generated_ids_[next.id] = step.mark;
      specs->push_back(std::move(next));
      part = specs->size() - 1;
      from = cuts[k] + 1;
    }
    for (size_t i = from; i < p.transforms.size(); ++i) {
      (*specs)[part].transforms.push_back(std::move(p.transforms[i]));
    }
    (*specs)[part].outputs = std::move(p.outputs);
    (*specs)[part].dead_letter = p.dead_letter;
    last_part_[p.id] = (*specs)[part].id;
  }

  // The two ends of a repartition step: the kafka output the part before it
  // ends in, and the kafka input the part after it begins with. The step's
  // own option nodes are shared, so an error in one points at the step.
  bool MakeRepartitionEnds(const ComponentSpec& step, const std::string& pipeline,
                           const ComponentSpec& before, ComponentSpec* out, ComponentSpec* in) {
    const YAML::Node v = step.value;
    if (!v.IsMap()) return false;  // its shape error is reported
    // An option of the file into a generated component, the node itself
    // (its place in the file goes with it); one not given is left out.
    auto put = [](YAML::Node& to, const char* key, const YAML::Node& from) {
      if (from.IsDefined() && !from.IsNull()) to[key] = from;
    };
    YAML::Node ov(YAML::NodeType::Map), iv(YAML::NodeType::Map);
    if (v["brokers"].IsDefined()) {
      put(ov, "brokers", v["brokers"]);
      put(iv, "brokers", v["brokers"]);
    } else {
      // A partitioned input reads a consumer group: kafka's brokers, tls,
      // sasl and properties.
      if (before.def == nullptr || !before.def->partitioned || !before.value.IsMap()) {
        errors_->Add(step.mark, "repartition: give `brokers`: the input before this step is not "
                                "kafka, whose brokers it would use");
        return false;
      }
      const YAML::Node b = before.value;
      for (const char* name : {"brokers", "tls", "sasl"}) {
        put(ov, name, b[name]);
        put(iv, name, b[name]);
      }
      put(iv, "properties", b["properties"]);
    }
    put(ov, "topic", v["topic"]);
    put(iv, "topics", v["topic"]);
    put(ov, "key", v["key"]);
    if (v["exactly_once"].IsDefined()) {
      put(ov, "exactly_once", v["exactly_once"]);
    } else {
      ov["exactly_once"] = "true";
    }
    for (const char* name : {"transactional_id", "marker_topic", "properties"}) {
      put(ov, name, v[name]);
    }
    if (v["group"].IsDefined()) {
      put(iv, "group", v["group"]);
    } else {
      iv["group"] = "kayak-" + pipeline + "-" + (v["topic"].IsScalar() ? v["topic"].Scalar() : "");
    }
    YAML::Node o(YAML::NodeType::Map), i(YAML::NodeType::Map);
    o["kafka"] = ov;
    i["kafka"] = iv;
    const bool made = LoadComponent("output", o, out) && LoadComponent("input", i, in);
    out->mark = step.mark;
    in->mark = step.mark;
    return made;
  }

  // The kafka input of the part after an input that writes ahead to `topic`:
  // that topic, on the input's brokers and with its `kafka_properties`, in
  // the group kayak-<pipeline>-<topic>.
  void MakeWriteAheadInput(const ComponentSpec& front, const std::string& pipeline,
                           ComponentSpec* in) {
    const YAML::Node v = front.value;
    YAML::Node iv(YAML::NodeType::Map);
    iv["brokers"] = v["brokers"];
    iv["topics"] = v["topic"];
    if (const YAML::Node props = v["kafka_properties"]; props.IsDefined() && !props.IsNull()) {
      iv["properties"] = props;
    }
    iv["group"] = "kayak-" + pipeline + "-" + (v["topic"].IsScalar() ? v["topic"].Scalar() : "");
    YAML::Node i(YAML::NodeType::Map);
    i["kafka"] = iv;
    (void)LoadComponent("input", i, in);
    in->mark = front.mark;
  }

  // Pipelines that read a pipeline cut by repartition steps read its last
  // part, which has its outputs. A part's id must not be a pipeline's.
  void ReadFromLastParts(std::vector<PipelineSpec>* specs) {
    for (const auto& [id, mark] : generated_ids_) {
      if (declared_ids_.count(id)) {
        errors_->Add(mark, "the part after this would be pipeline '" + id +
                               "', which the file declares too");
      } else if (!IsValidId(id)) {
        errors_->Add(mark, "the part after this would be pipeline '" + id +
                               "', longer than 64 characters: shorten the pipeline's id");
      }
    }
    for (auto& p : *specs) {
      for (auto& up : p.upstreams) {
        if (auto it = last_part_.find(up); it != last_part_.end()) up = it->second;
      }
    }
  }

  // Upstreams exist, buckets exist (for bucket/lookup transforms), no
  // cycles; orders pipelines so that upstreams come first.
  void CheckGraph(std::vector<PipelineSpec>* specs, GraphSpec* out) {
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < specs->size(); ++i) index[(*specs)[i].id] = i;
    bool ok = true;
    std::map<std::string, std::string> http_paths;  // path -> the pipeline serving it
    for (auto& p : *specs) {
      if (p.input.def != nullptr && !p.input.served_path.empty()) {
        auto [it, fresh] = http_paths.emplace(p.input.served_path, p.id);
        if (!fresh) {
          errors_->Add(p.input.served_path_mark,
                       p.input.def->type + " input: pipeline '" + it->second +
                           "' already serves " + p.input.served_path);
        }
      }
      std::set<std::string> seen;
      for (const auto& up : p.upstreams) {
        if (!index.count(up)) {
          errors_->Add(p.input.mark, "pipeline '" + p.id + "' reads from unknown pipeline '" +
                                         up + "'");
          ok = false;
        } else if (up == p.id) {
          errors_->Add(p.input.mark, "pipeline '" + p.id + "' reads from itself");
          ok = false;
        } else if (!seen.insert(up).second) {
          errors_->Add(p.input.mark,
                       "pipeline '" + p.id + "' lists upstream '" + up + "' twice");
          ok = false;
        }
      }
      for (const auto& t : p.transforms) {
        for (const auto& b : t.buckets) {
          if (!bucket_names_.count(b.bucket)) {
            errors_->Add(b.mark, t.def->type + " transform: unknown bucket '" + b.bucket +
                                     "' (declare it under 'buckets')");
          }
        }
      }
    }
    // Depth-first search for cycles, emitting a topological order. Runs
    // whatever else is wrong, so that `check` reports every error at once;
    // edges already reported (unknown upstreams, a pipeline reading itself)
    // are left out.
    std::vector<int> color(specs->size(), 0);  // 0 new, 1 on stack, 2 done
    std::vector<size_t> order;
    std::vector<size_t> stack;
    bool cyclic = false;
    std::function<void(size_t)> visit = [&](size_t i) {
      color[i] = 1;
      stack.push_back(i);
      for (const auto& up : (*specs)[i].upstreams) {
        auto found = index.find(up);
        if (found == index.end() || found->second == i) continue;
        const size_t j = found->second;
        if (color[j] == 1) {
          std::string path;
          bool on = false;
          for (size_t s : stack) {
            if (s == j) on = true;
            if (on) path += (*specs)[s].id + " <- ";
          }
          path += (*specs)[j].id;
          errors_->Add((*specs)[i].input.mark, "cycle between pipelines: " + path);
          cyclic = true;
        } else if (color[j] == 0) {
          visit(j);
        }
      }
      stack.pop_back();
      color[i] = 2;
      order.push_back(i);
    };
    for (size_t i = 0; i < specs->size(); ++i) {
      if (color[i] == 0) visit(i);
    }
    if (cyclic || !ok) {
      for (auto& p : *specs) out->pipelines.push_back(std::move(p));
      return;
    }
    for (size_t i : order) out->pipelines.push_back(std::move((*specs)[i]));
  }

  const std::string file_;
  const ComponentRegistry& registry_;
  ErrorList* errors_;
  std::set<std::string> bucket_names_;
  std::set<std::string> declared_ids_;               // the file's pipelines
  std::map<std::string, SourceMark> generated_ids_;  // a part's id -> its repartition step
  std::map<std::string, std::string> last_part_;     // a cut pipeline -> its last part
};

}  // namespace

void InterpolateEnv(YAML::Node node, const std::string& file, ErrorList* errors) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      if (s.find("${") == std::string::npos) return;
      std::string out, error;
      if (!Interpolate(s, &out, &error)) {
        errors->Add(MarkOf(file, node), error);
        return;
      }
      node = out;
      return;
    }
    case YAML::NodeType::Sequence:
      for (auto e : node) InterpolateEnv(e, file, errors);
      return;
    case YAML::NodeType::Map:
      for (auto kv : node) InterpolateEnv(kv.second, file, errors);
      return;
    default:
      return;
  }
}

bool LoadGraphText(const std::string& text, const std::string& file,
                   const ComponentRegistry& registry, GraphSpec* out, ErrorList* errors) {
  YAML::Node root;
  // Duplicate keys are refused there: YAML lets a parser keep either.
  if (!LoadYamlBounded(text, file, &root, errors)) return false;
  InterpolateEnv(root, file, errors);
  out->root = root;
  GraphLoader(file, registry, errors).Load(root, out);
  return errors->empty();
}

bool LoadGraphFile(const std::string& path, const ComponentRegistry& registry, GraphSpec* out,
                   ErrorList* errors) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    errors->Add(SourceMark{path, 0, 0}, "cannot read the config file");
    return false;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return LoadGraphText(ss.str(), path, registry, out, errors);
}

std::map<std::string, std::string> IdentityOptions(const ComponentSpec& c) {
  std::map<std::string, std::string> out;
  if (c.def == nullptr) return out;
  if (c.def->shape != Shape::kOptions || !c.value.IsMap()) {
    Canonical(c.value, &out[""]);
    return out;
  }
  for (const auto& o : c.value) {
    const std::string name = o.first.IsScalar() ? o.first.Scalar() : "";
    const PropDef* prop = nullptr;
    for (const auto& p : c.def->props) {
      if (p.name == name) prop = &p;
    }
    if (prop != nullptr && prop->role == PropRole::kTuning) continue;
    std::string& v = out[name];
    if (prop != nullptr && prop->address && o.second.IsScalar()) {
      v = "\"" + AddressIdentity(o.second.Scalar()) + "\"";
    } else {
      Canonical(o.second, &v);
    }
  }
  return out;
}

}  // namespace kayak
