// The time a cluster takes to move a partition's state between two members
// (docs/cluster.md), on the real code: a bucket of N keys on member a, all of
// them in the partition that moves unless --partitions says otherwise.
//
//   publish   a's checkpoint of the shard: its slice cut from the bucket's
//             full chunk (ShardAgent::Prepare, given the chunk) and written
//             to the store with its entry (Publish)
//   claim     b given the partition: the claim, the slice read back and
//             checked, its keys written into b's live bucket (Assign)
//   drop      a's next assignment without the partition: its keys leave a's
//             bucket (Assign)
//
//   shard_move [--keys N] [--partitions P] [--rounds R] [--dir DIR | --s3 ENV]
//
// With --s3 the store is a bucket: ENV is a file of KEY=VALUE lines
// (S3_ENDPOINT, S3_BUCKET, S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY, as the
// test servers' s3/env), and the floor is printed too: one PUT and one GET
// of the slice's bytes through the same client.
//
// Prints each round and the medians.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

#include "cluster/partitioner.h"
#include "cluster/shard_agent.h"
#include "common/clock.h"
#include "connectors/s3/blobs.h"
#include "connectors/s3/env_file.h"
#include "state/bucket.h"

namespace fs = std::filesystem;
using namespace kayak;

namespace {

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::vector<PartitionOwner::Assigned> Parts(const std::vector<int32_t>& ps, int32_t partitions,
                                            bool have_position) {
  std::vector<PartitionOwner::Assigned> out;
  for (int32_t p : ps) {
    PartitionOwner::Assigned a;
    a.topic = "in";
    a.partition = p;
    a.partitions = partitions;
    a.have_position = have_position;
    out.push_back(a);
  }
  return out;
}

void Check(const Status& st, const char* what) {
  if (!st.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, st.ToString().c_str());
    std::exit(1);
  }
}

// The bucket an s3/env file names; the run stops without one.
s3::Endpoint EndpointFrom(const std::string& file) {
  s3::Endpoint e = s3::EndpointFromEnvFile(file);
  if (e.endpoint.empty() || e.bucket.empty()) {
    std::fprintf(stderr, "%s names no S3_ENDPOINT and S3_BUCKET\n", file.c_str());
    std::exit(2);
  }
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t keys = 1'000'000;
  int32_t partitions = 1;
  int rounds = 3;
  std::string dir = (fs::temp_directory_path() / "kayak-shard-move").string();
  std::string s3_env;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--keys")) keys = std::stoull(argv[i + 1]);
    if (!std::strcmp(argv[i], "--partitions")) partitions = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--dir")) dir = argv[i + 1];
    if (!std::strcmp(argv[i], "--s3")) s3_env = argv[i + 1];
  }
  const std::string prefix = "shard-move-" + std::to_string(::getpid());
  std::vector<double> publish, claim, drop;
  uint64_t moved_keys = 0, slice_bytes = 0;
  const SystemClock* clock = SystemClock::Get();
  for (int r = 0; r < rounds; ++r) {
    fs::remove_all(dir);
    cluster::ClusterConfig ca{"bench", "a", dir, cluster::Partitioner::kCrc32};
    if (!s3_env.empty()) {
      // A prefix of its own each round: the logs start empty.
      const std::string round = prefix + "/" + std::to_string(r);
      ca.store = "s3://bucket/" + round;
      ca.blobs = s3::MakeBlobs(EndpointFrom(s3_env), round);
    }
    cluster::ClusterConfig cb = ca;
    cb.member = "b";
    Bucket bucket_a("sums", 0), bucket_b("sums", 0);
    cluster::ShardAgent a(ca, nullptr, clock), b(cb, nullptr, clock);
    a.Bind("r", {&bucket_a});
    b.Bind("r", {&bucket_b});
    std::vector<int32_t> all(static_cast<size_t>(partitions));
    for (int32_t p = 0; p < partitions; ++p) all[static_cast<size_t>(p)] = p;
    auto given = Parts(all, partitions, false);
    Check(a.Assign(&given), "a's first assignment");
    for (uint64_t i = 0; i < keys; ++i) {
      Check(bucket_a.Update("key-" + std::to_string(i), 1'700'000'000'000,
                            [&](Json& v, bool) {
                              v = Json(static_cast<int64_t>(i));
                              return Status::Ok();
                            }),
            "a write");
    }
    std::string full;
    bucket_a.SaveState(&full);
    std::string position = "{\"offsets\":[";
    for (int32_t p = 0; p < partitions; ++p) {
      position += (p ? "," : "") + std::string("[\"in\",") + std::to_string(p) + ",1000]";
    }
    position += "]}";
    double t = Seconds();
    Check(a.Prepare(1, position, {},
                    [&](const std::string&, std::string* out) {
                      *out = full;
                      return Status::Ok();
                    }),
          "prepare");
    a.Publish(1);
    publish.push_back(Seconds() - t);
    // Partition 0 moves to b.
    auto to_b = Parts({0}, partitions, false);
    t = Seconds();
    Check(b.Assign(&to_b), "b's claim");
    claim.push_back(Seconds() - t);
    moved_keys = bucket_b.Size();
    std::vector<int32_t> rest(all.begin() + 1, all.end());
    auto keep = Parts(rest, partitions, true);
    t = Seconds();
    Check(a.Assign(&keep), "a's next assignment");
    drop.push_back(Seconds() - t);
    if (s3_env.empty()) {
      for (const auto& e : fs::recursive_directory_iterator(dir)) {
        if (e.is_regular_file() && e.path().filename().string().rfind("chunk-", 0) == 0 &&
            e.path().string().find("/in.0/") != std::string::npos) {
          slice_bytes = std::max<uint64_t>(slice_bytes, e.file_size());
        }
      }
    } else {
      std::vector<std::string> names;
      Check(ca.blobs->List("bench/r/in.0", &names), "listing the shard");
      for (const auto& n : names) {
        if (n.rfind("chunk-", 0) != 0) continue;
        auto size = ca.blobs->Size("bench/r/in.0/" + n);
        Check(size.status(), "the slice's size");
        slice_bytes = std::max<uint64_t>(slice_bytes, static_cast<uint64_t>(*size));
      }
    }
    std::printf("round %d: %llu keys moved, publish %.3f s, claim and restore %.3f s, drop %.3f s\n",
                r + 1, static_cast<unsigned long long>(moved_keys), publish.back(), claim.back(),
                drop.back());
    if (moved_keys == 0 || bucket_a.Size() + moved_keys != keys) {
      std::fprintf(stderr, "the keys did not move: a holds %zu, b %llu of %llu\n",
                   bucket_a.Size(), static_cast<unsigned long long>(moved_keys),
                   static_cast<unsigned long long>(keys));
      return 1;
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("\n%llu keys in %d partition(s), shard of %llu keys (%.1f MB), medians of %d:\n",
              static_cast<unsigned long long>(keys), partitions,
              static_cast<unsigned long long>(moved_keys), slice_bytes / 1e6, rounds);
  std::printf("| step | seconds |\n|---|---|\n");
  std::printf("| publish (cut + write + commit) | %.3f |\n", median(publish));
  std::printf("| claim + restore on the new owner | %.3f |\n", median(claim));
  std::printf("| drop on the old owner | %.3f |\n", median(drop));
  if (!s3_env.empty()) {
    // The floor: the slice's bytes in one PUT and one GET, nothing cut or
    // merged.
    auto blobs = s3::MakeBlobs(EndpointFrom(s3_env), prefix + "/floor");
    const std::string bytes(slice_bytes, 'x');
    std::vector<double> put, get;
    for (int r = 0; r < rounds; ++r) {
      double t = Seconds();
      Check(blobs->Write("slice-" + std::to_string(r), "", bytes, true), "the floor's PUT");
      put.push_back(Seconds() - t);
      t = Seconds();
      auto back = blobs->Read("slice-" + std::to_string(r));
      Check(back.status(), "the floor's GET");
      get.push_back(Seconds() - t);
    }
    std::printf("| the floor: one PUT of the slice's bytes | %.3f |\n", median(put));
    std::printf("| the floor: one GET of the slice's bytes | %.3f |\n", median(get));
  }
  fs::remove_all(dir);
  return 0;
}
