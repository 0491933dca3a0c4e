// What each member of a cluster says of itself, and what it reads of the
// others (docs/cluster.md, "Queries and the overview").
//
// Every few seconds a member writes <store>/<name>/members/<member>.json:
// its admin API's address and, for each region with shards, the buckets
// the region writes, its input topic and partition count, and the
// partitions it owns now. A member asked for a bucket key it does not hold
// finds the key's partition with the cluster's partitioner and the member
// that owns it in those files, and sends the client there (307).
//
// The files are soft state: each replaced whole (Blobs::Write), not
// fsynced; a member's file older than kStaleMs is not believed (the
// member is gone, or cut off, and its partitions move).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/blobs.h"
#include "cluster/partitioner.h"
#include "kayak/thread_annotations.h"

namespace kayak::cluster {

class ShardAgent;
struct ClusterConfig;

class Membership {
 public:
  static constexpr int64_t kIntervalMs = 2000;
  static constexpr int64_t kStaleMs = 15000;

  explicit Membership(const ClusterConfig& config);
  ~Membership();
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // The member's admin API (http://host:port), once the listener is bound;
  // then the member file is written every kIntervalMs until destruction.
  void Start(std::string api);

  // Agents come and go with the regions they serve (ShardAgent does this).
  void Add(const ShardAgent* agent);
  void Remove(const ShardAgent* agent);

  // The admin API of the member that owns `key` of `bucket`, from the
  // member files; "" when it is this member, or no fresh file names one.
  std::string OwnerOf(const std::string& bucket, const std::string& key) const;

  // For GET /api/v1/overview: the cluster's name, this member, and each
  // member file (member, api, age, the shards it owns).
  nlohmann::ordered_json Overview() const;

  // This member's file as it would be written now.
  nlohmann::json Describe() const;

 private:
  void Run();
  void WriteOwn() const;
  // Every member file that parses, with its age in ms added as "age_ms".
  std::vector<nlohmann::json> ReadAll() const;

  const std::string name_;
  const std::string member_;
  const std::shared_ptr<Blobs> blobs_;
  const std::string dir_;  // <name>/members in the store
  const Partitioner partitioner_;

  mutable Mutex mu_;
  std::condition_variable cv_;
  std::set<const ShardAgent*> agents_ KAYAK_GUARDED_BY(mu_);
  std::string api_ KAYAK_GUARDED_BY(mu_);
  bool stopping_ KAYAK_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace kayak::cluster
