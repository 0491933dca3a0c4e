// A cluster's store in S3 against a real S3 endpoint (moto's S3 server,
// started by the CTest fixture `s3`): the objects' calls, the conditional PUT
// the shard log is placed with, and the shard log itself (commits, a claim
// that fences the old owner, an entry whose answer was lost, pruning) on it.
//
// Two writers racing for one entry are tested on a directory
// (cluster_test.cc): moto checks `If-None-Match` and then stores, not in one
// step, so only S3 itself decides a race atomically.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "cluster/shard_store.h"
#include "connectors/s3/blobs.h"
#include "connectors/s3/env_file.h"

namespace kayak::s3 {
namespace {

using cluster::CommitOutcome;
using cluster::ShardId;
using cluster::ShardManifest;
using cluster::ShardStore;

template <typename T>
T V(Result<T> r) {
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? std::move(*r) : T{};
}

Endpoint FromEnv() {
  const char* base = std::getenv("KAYAK_SERVERS");
  return base == nullptr ? Endpoint{} : EndpointFromEnvFile(std::string(base) + "/s3/env");
}

class S3BlobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    e_ = FromEnv();
    ASSERT_FALSE(e_.endpoint.empty()) << "KAYAK_SERVERS/s3/env: run through ctest (fixture s3)";
    prefix_ = "blobs-" + std::to_string(::getpid()) + "/" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  Endpoint e_;
  std::string prefix_;
};

TEST(S3StoreUrl, NamesABucketAndAPrefix) {
  std::string bucket, prefix;
  ASSERT_TRUE(ParseStoreUrl("s3://b/x/y", &bucket, &prefix).ok());
  EXPECT_EQ(bucket, "b");
  EXPECT_EQ(prefix, "x/y");
  ASSERT_TRUE(ParseStoreUrl("s3://b", &bucket, &prefix).ok());
  EXPECT_EQ(prefix, "");
  for (const char* bad : {"s3://", "s3:///x", "s3://b/", "s3://b/x/", "s3://b/x//y", "/dir"}) {
    EXPECT_FALSE(ParseStoreUrl(bad, &bucket, &prefix).ok()) << bad;
  }
}

TEST_F(S3BlobsTest, ObjectsAndTheConditionalPut) {
  auto blobs = MakeBlobs(e_, prefix_);
  EXPECT_EQ(blobs->Where("d/x"), "s3://" + e_.bucket + "/" + prefix_ + "/d/x");
  // Nothing there yet.
  std::vector<std::string> names;
  ASSERT_TRUE(blobs->List("d", &names).ok());
  EXPECT_TRUE(names.empty());
  EXPECT_EQ(blobs->Read("d/x").status().code(), Code::kNotFound);
  EXPECT_EQ(V(blobs->Size("d/x")), -1);
  // Placed once; the second writer of the name is refused, and the object
  // is the first one's.
  EXPECT_TRUE(V(blobs->WriteNew("d/x", "first")));
  EXPECT_FALSE(V(blobs->WriteNew("d/x", "second")));
  EXPECT_EQ(V(blobs->Read("d/x")), "first");
  EXPECT_EQ(V(blobs->Size("d/x")), 5);
  // Write replaces; List names only what is directly under the directory.
  ASSERT_TRUE(blobs->Write("d/y", "head-", "body", true).ok());
  ASSERT_TRUE(blobs->Write("d/y", "head2-", "body", true).ok());
  EXPECT_EQ(V(blobs->Read("d/y")), "head2-body");
  ASSERT_TRUE(blobs->Write("d/sub/z", "", "z", false).ok());
  ASSERT_TRUE(blobs->List("d", &names).ok());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"x", "y"}));
  // A prefix of a name is not a directory.
  ASSERT_TRUE(blobs->List("d/x", &names).ok());
  EXPECT_TRUE(names.empty());
  ASSERT_TRUE(blobs->Remove("d/x").ok());
  ASSERT_TRUE(blobs->Remove("d/x").ok());  // gone already
  EXPECT_EQ(blobs->Read("d/x").status().code(), Code::kNotFound);
  EXPECT_TRUE(V(blobs->WriteNew("d/x", "again")));
}

TEST_F(S3BlobsTest, AServerThatIsGoneIsAnErrorNotAnAnswer) {
  Endpoint gone = e_;
  gone.endpoint = "http://127.0.0.1:1";
  auto blobs = MakeBlobs(gone, prefix_);
  std::vector<std::string> names;
  EXPECT_EQ(blobs->List("d", &names).code(), Code::kUnavailable);
  EXPECT_EQ(blobs->WriteNew("d/x", "x").status().code(), Code::kUnavailable);
  EXPECT_EQ(blobs->Size("d/x").status().code(), Code::kUnavailable);
  ShardStore store(blobs, "c");
  EXPECT_FALSE(store.Newest(ShardId{"r", "t", 0}).ok());
}

// The shard log on S3, as two members see it.
TEST_F(S3BlobsTest, TheShardLogCommitsClaimsFencesAndPrunes) {
  ShardStore old_owner(MakeBlobs(e_, prefix_), "c1");
  ShardStore new_owner(MakeBlobs(e_, prefix_), "c1");
  const ShardId shard{"orders", "orders.v1", 3};
  auto commit = [&](ShardStore& s, uint64_t epoch, uint64_t id, const std::string& state,
                    int64_t offset) -> Result<CommitOutcome> {
    auto unit = s.WriteChunk(shard, epoch, id, "b.totals", state);
    if (!unit.ok()) return unit.status();
    ShardManifest m;
    m.epoch = epoch;
    m.checkpoint = id;
    m.owner = "server-" + std::to_string(epoch);
    m.next_offset = offset;
    m.units["b.totals"] = *unit;
    return s.Commit(shard, m);
  };
  ASSERT_EQ(V(commit(old_owner, 1, 10, "state-10", 100)), CommitOutcome::kCommitted);
  ASSERT_EQ(V(commit(old_owner, 1, 11, "state-11", 150)), CommitOutcome::kCommitted);
  // The same entry again (a PUT whose answer was lost, tried again) is the
  // one committed; another checkpoint 11 is refused.
  ASSERT_EQ(V(commit(old_owner, 1, 11, "state-11", 150)), CommitOutcome::kCommitted);
  EXPECT_EQ(V(commit(old_owner, 1, 11, "state-11", 160)), CommitOutcome::kFenced);
  // The new owner claims the shard: it restores checkpoint 11.
  ShardManifest claimed;
  uint64_t epoch = 0;
  ASSERT_EQ(V(new_owner.ClaimNext(shard, "server-2", -1, &claimed, &epoch)),
            CommitOutcome::kCommitted);
  EXPECT_EQ(epoch, 2u);
  EXPECT_EQ(claimed.next_offset, 150);
  EXPECT_EQ(V(new_owner.ReadChunk(shard, claimed.units.at("b.totals"))), "state-11");
  // The old owner, back from a pause, is fenced.
  EXPECT_EQ(V(commit(old_owner, 1, 12, "state-12", 200)), CommitOutcome::kFenced);
  ASSERT_EQ(V(commit(new_owner, 2, 1, "state-n1", 210)), CommitOutcome::kCommitted);
  ASSERT_EQ(V(commit(new_owner, 2, 2, "state-n2", 260)), CommitOutcome::kCommitted);
  auto newest = old_owner.Newest(shard);
  ASSERT_TRUE(newest.ok() && newest->has_value());
  EXPECT_EQ((*newest)->owner, "server-2");
  EXPECT_EQ((*newest)->next_offset, 260);
  // Pruned to the newest two entries: the older entries and their chunks
  // go, what the kept ones name stays.
  ASSERT_TRUE(new_owner.Prune(shard, 2).ok());
  auto blobs = MakeBlobs(e_, prefix_);
  std::vector<std::string> names;
  ASSERT_TRUE(blobs->List("c1/" + shard.Path(), &names).ok());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{
                       "LOG-00000000000000000004.kys", "LOG-00000000000000000005.kys",
                       "chunk-00000000000000000002-00000000000000000001-b.totals.kyc",
                       "chunk-00000000000000000002-00000000000000000002-b.totals.kyc"}));
  newest = new_owner.Newest(shard);
  ASSERT_TRUE(newest.ok() && newest->has_value());
  EXPECT_EQ(V(new_owner.ReadChunk(shard, (*newest)->units.at("b.totals"))), "state-n2");
}

}  // namespace
}  // namespace kayak::s3
