// The state directory's layout and the checkpoint's unit names, built in one
// place (docs/state_format.md, "The state directory"):
//
//   <state_dir>/chunk-*, MANIFEST-*    the store (checkpoint/store.h)
//   <state_dir>/graph/GRAPH            the graph's versions (GraphHistory)
//   <state_dir>/crash/<pipeline>       a pipeline's crash guard
//   <state_dir>/<type>/<pipeline>      the private directory of a pipeline's
//                                      input of that type, when its definition
//                                      asks for one (the http input's log)
#pragma once

#include <cstddef>
#include <string>

namespace kayak::layout {

inline std::string InputUnit(const std::string& pipeline) { return "p." + pipeline + ".input"; }
inline std::string TransformUnit(const std::string& pipeline, size_t i) {
  return "p." + pipeline + ".t" + std::to_string(i);
}
inline std::string OutputUnit(const std::string& pipeline, size_t k) {
  return "p." + pipeline + ".o" + std::to_string(k);
}
inline std::string DeadLetterUnit(const std::string& pipeline) { return "p." + pipeline + ".dead"; }
inline std::string BucketUnit(const std::string& bucket) { return "b." + bucket; }

inline std::string GraphDir(const std::string& state_dir) { return state_dir + "/graph"; }
inline std::string GraphFile(const std::string& state_dir) { return GraphDir(state_dir) + "/GRAPH"; }
inline std::string CrashDir(const std::string& state_dir) { return state_dir + "/crash"; }
inline std::string CrashFile(const std::string& state_dir, const std::string& pipeline) {
  return CrashDir(state_dir) + "/" + pipeline;
}
inline std::string PrivateDir(const std::string& state_dir, const std::string& type,
                              const std::string& pipeline) {
  return state_dir + "/" + type + "/" + pipeline;
}

}  // namespace kayak::layout
