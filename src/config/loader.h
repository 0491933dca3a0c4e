// The pipelines file (SPEC section 2): YAML -> a validated GraphSpec.
#pragma once

#include <yaml-cpp/yaml.h>

#include <map>
#include <string>
#include <vector>

#include "config/options.h"

namespace kayak {

// A bucket a component names (PropRef::kBucketWrite/kBucketRead).
struct BucketUse {
  std::string bucket;
  bool writes = false;
  SourceMark mark;  // of the option's value
};

struct ComponentSpec {
  const ComponentDef* def = nullptr;
  YAML::Node value;         // options or shorthand value
  SourceMark mark;          // of the one-key map
  // What its options name (from the property table's PropRef):
  std::vector<BucketUse> buckets;
  std::string served_path;   // "" = none
  SourceMark served_path_mark;
  RetryPolicy retry;         // outputs: their `retry` option
  // Canonical text of the type and its identity options (tuning options,
  // PropRole::kTuning, left out): "the same component" for a restore.
  std::string fingerprint;
};

struct PipelineSpec {
  std::string id;
  SourceMark mark;
  ComponentSpec input;
  std::vector<ComponentSpec> transforms;
  // The outputs; the pipeline's dead-letter output, when it has one, is the
  // last of them (index `dead_letter`), and takes only what was set aside.
  std::vector<ComponentSpec> outputs;
  int dead_letter = -1;
  std::vector<std::string> upstreams;  // ids, for a `pipeline` input

  bool IsDeadLetter(size_t k) const { return dead_letter >= 0 && k == static_cast<size_t>(dead_letter); }
  // "outputs[k]", or "dead_letter": the output's name on its card and in logs.
  std::string OutputName(size_t k) const {
    return IsDeadLetter(k) ? "dead_letter" : "outputs[" + std::to_string(k) + "]";
  }
};

struct BucketSpec {
  std::string name;
  int64_t idle_timeout_secs = 0;  // 0 = entries never expire
  int64_t max_keys = 0;           // 0 = no limit on the live keys
  bool evict_oldest = false;      // at max_keys: evict the oldest write, else refuse the new key
  SourceMark mark;
  std::string fingerprint;
};

struct GraphSpec {
  std::string file;
  std::vector<BucketSpec> buckets;
  std::vector<PipelineSpec> pipelines;  // upstreams before downstreams
  YAML::Node root;                      // keeps the nodes above alive
};

// Replaces ${NAME} in every string scalar with the environment variable NAME
// and ${file:PATH} with the content of the file at the absolute PATH (one
// trailing newline cut; how Docker and Kubernetes mount secrets), read at
// every load, so a reload or an API change sees a rotated secret. What a
// file gives is registered with the redactor. A missing variable or an
// unreadable file is an error at its scalar.
void InterpolateEnv(YAML::Node node, const std::string& file, ErrorList* errors);

// Parses and validates the structure, component types, option shapes and the
// graph (ids, upstreams, buckets, cycles). Semantic checks that need the
// component itself happen in ValidateComponents (src/core/engine.h). Returns
// false and fills `errors` on any error; `out` then still holds what was valid
// (components with errors left out), for those semantic checks.
bool LoadGraphText(const std::string& text, const std::string& file,
                   const ComponentRegistry& registry, GraphSpec* out, ErrorList* errors);
bool LoadGraphFile(const std::string& path, const ComponentRegistry& registry, GraphSpec* out,
                   ErrorList* errors);

// A component's identity options (its tuning options left out), each as the
// canonical text its fingerprint holds; a shorthand value is the one entry
// "". Two components of one type with equal maps have equal fingerprints.
std::map<std::string, std::string> IdentityOptions(const ComponentSpec& c);

// True for a valid pipeline id or bucket name: [a-z0-9_-]{1,64}.
bool IsValidId(const std::string& id);

}  // namespace kayak
