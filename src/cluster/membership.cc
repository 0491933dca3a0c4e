#include "cluster/membership.h"

#include <chrono>

#include "cluster/shard_agent.h"
#include "common/log.h"

namespace kayak::cluster {

namespace {

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

constexpr int kFormat = 1;

}  // namespace

Membership::Membership(const ClusterConfig& config)
    : name_(config.name),
      member_(config.member),
      blobs_(config.blobs ? config.blobs : DirectoryBlobs(config.store)),
      dir_(config.name + "/members"),
      partitioner_(config.partitioner) {}

Membership::~Membership() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Membership::Start(std::string api) {
  {
    MutexLock lock(mu_);
    api_ = std::move(api);
  }
  thread_ = std::thread([this] { Run(); });
}

void Membership::Add(const ShardAgent* agent) {
  MutexLock lock(mu_);
  agents_.insert(agent);
}

void Membership::Remove(const ShardAgent* agent) {
  MutexLock lock(mu_);
  agents_.erase(agent);
}

nlohmann::json Membership::Describe() const {
  MutexLock lock(mu_);
  nlohmann::json regions = nlohmann::json::array();
  for (const ShardAgent* a : agents_) {
    const ShardAgent::Description d = a->Describe();
    if (d.region.empty()) continue;
    nlohmann::json owned = nlohmann::json::array();
    for (const auto& sh : d.owned) {
      owned.push_back({{"partition", sh.partition},
                       {"epoch", sh.epoch},
                       {"next", sh.next},
                       {"lag", sh.lag}});
    }
    regions.push_back({{"region", d.region},
                       {"buckets", d.buckets},
                       {"topic", d.topic},
                       {"partitions", d.partitions},
                       {"owned", std::move(owned)}});
  }
  return {{"format", kFormat}, {"member", member_},       {"api", api_},
          {"updated_ms", WallMs()}, {"regions", std::move(regions)}};
}

void Membership::WriteOwn() const {
  const std::string path = dir_ + "/" + member_ + ".json";
  Status st = blobs_->Write(path, Describe().dump(), "", /*durable=*/false);
  if (!st.ok()) KLOG_WARN("cluster: cannot write {}: {}", blobs_->Where(path), st.message());
}

void Membership::Run() {
  for (;;) {
    WriteOwn();
    MutexLock lock(mu_);
    if (lock.WaitFor(cv_, std::chrono::milliseconds(kIntervalMs),
                     [&]() KAYAK_REQUIRES(mu_) { return stopping_; })) {
      break;
    }
  }
}

std::vector<nlohmann::json> Membership::ReadAll() const {
  std::vector<nlohmann::json> out;
  std::vector<std::string> files;
  if (Status st = blobs_->List(dir_, &files); !st.ok()) {
    KLOG_WARN("cluster: cannot list {}: {}", blobs_->Where(dir_), st.message());
    return out;
  }
  const int64_t now = WallMs();
  for (const std::string& file : files) {
    if (file.size() < 6 || file.compare(file.size() - 5, 5, ".json") != 0) continue;
    auto text = blobs_->Read(dir_ + "/" + file);
    if (!text.ok()) continue;  // gone since the listing: a member left
    auto j = nlohmann::json::parse(*text, nullptr, false);
    if (!j.is_object() || j.value("format", 0) != kFormat || !j.contains("member") ||
        !j["member"].is_string() || !j.contains("updated_ms") ||
        !j["updated_ms"].is_number_integer() || !j.contains("regions") ||
        !j["regions"].is_array()) {
      continue;
    }
    j["age_ms"] = now - j["updated_ms"].get<int64_t>();
    out.push_back(std::move(j));
  }
  return out;
}

std::string Membership::OwnerOf(const std::string& bucket, const std::string& key) const {
  if (key.empty()) return "";
  std::string owner;
  uint64_t best = 0;
  for (const auto& m : ReadAll()) {
    if (m["age_ms"].get<int64_t>() > kStaleMs) continue;
    for (const auto& r : m["regions"]) {
      if (!r.is_object() || !r.value("buckets", nlohmann::json::array()).is_array()) continue;
      bool has = false;
      for (const auto& b : r["buckets"]) has = has || (b.is_string() && b == bucket);
      const int32_t partitions = r.value("partitions", 0);
      if (!has || partitions < 1) continue;
      const int32_t p = PartitionOf(partitioner_, key, partitions);
      for (const auto& o : r.value("owned", nlohmann::json::array())) {
        if (!o.is_object() || o.value("partition", -1) != p) continue;
        // Two fresh files naming the partition: the newer claim has it.
        const uint64_t epoch = o.value("epoch", uint64_t{0});
        if (epoch >= best) {
          best = epoch;
          owner = m["member"].get<std::string>() == member_ ? "" : m.value("api", "");
        }
      }
    }
  }
  return owner;
}

nlohmann::ordered_json Membership::Overview() const {
  nlohmann::ordered_json members = nlohmann::ordered_json::array();
  for (const auto& m : ReadAll()) {
    nlohmann::ordered_json shards = nlohmann::ordered_json::array();
    for (const auto& r : m["regions"]) {
      if (!r.is_object()) continue;
      for (const auto& o : r.value("owned", nlohmann::json::array())) {
        if (!o.is_object()) continue;
        const int64_t next = o.value("next", int64_t{-1});
        const int64_t lag = o.value("lag", int64_t{-1});
        shards.push_back({{"region", r.value("region", "")},
                          {"topic", r.value("topic", "")},
                          {"partition", o.value("partition", -1)},
                          {"epoch", o.value("epoch", uint64_t{0})},
                          {"next", next < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(next)},
                          {"lag", lag < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(lag)}});
      }
    }
    const int64_t age = m["age_ms"].get<int64_t>();
    members.push_back({{"member", m["member"]},
                       {"api", m.value("api", "")},
                       {"age_ms", age},
                       {"live", age <= kStaleMs},
                       {"shards", std::move(shards)}});
  }
  return {{"name", name_}, {"member", member_}, {"members", std::move(members)}};
}

}  // namespace kayak::cluster
