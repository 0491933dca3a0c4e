#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>

#include "cluster/membership.h"
#include "cluster/partitioner.h"
#include "cluster/shard_agent.h"
#include "cluster/shard_split.h"
#include "cluster/shard_store.h"
#include "common/clock.h"
#include "common/format.h"
#include "state/bucket.h"
#include "test_util.h"

namespace kayak::cluster {
namespace {

namespace fs = std::filesystem;

// The value of a result that must have one.
template <typename T>
T V(Result<T> r) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(*r) : T{};
}

// Kafka's own test vectors for Utils.murmur2 (clients' UtilsTest).
TEST(Partitioner, Murmur2MatchesKafkasVectors) {
  EXPECT_EQ(KafkaMurmur2("21"), -973932308);
  EXPECT_EQ(KafkaMurmur2("foobar"), -790332482);
  EXPECT_EQ(KafkaMurmur2("a-little-bit-long-string"), -985981536);
  EXPECT_EQ(KafkaMurmur2("a-little-bit-longer-string"), -1486304829);
  EXPECT_EQ(KafkaMurmur2("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"), -58897971);
  EXPECT_EQ(KafkaMurmur2("abc"), 479470107);
}

// The partition of every key is the one librdkafka's partitioners choose:
// murmur2 (as Java clients and Kafka Streams) and consistent (librdkafka's
// default, CRC-32).
TEST(Partitioner, AgreesWithLibrdkafka) {
  std::mt19937 rng(7);
  for (int32_t n : {1, 2, 3, 7, 12, 64}) {
    for (int i = 0; i < 5000; ++i) {
      std::string key = "key-" + std::to_string(rng());
      key.resize(1 + rng() % key.size());  // every tail length
      if (i % 7 == 0) key.push_back(static_cast<char>(0x80 + i % 100));  // high bytes
      EXPECT_EQ(PartitionOf(Partitioner::kMurmur2, key, n),
                rd_kafka_msg_partitioner_murmur2(nullptr, key.data(), key.size(), n, nullptr,
                                                 nullptr))
          << key << " of " << n;
      EXPECT_EQ(PartitionOf(Partitioner::kCrc32, key, n),
                rd_kafka_msg_partitioner_consistent(nullptr, key.data(), key.size(), n, nullptr,
                                                    nullptr))
          << key << " of " << n;
    }
  }
  Partitioner p;
  EXPECT_TRUE(ParsePartitioner("crc32", &p));
  EXPECT_EQ(p, Partitioner::kCrc32);
  EXPECT_TRUE(ParsePartitioner("murmur2", &p));
  EXPECT_EQ(p, Partitioner::kMurmur2);
  EXPECT_FALSE(ParsePartitioner("random", &p));
}

// A bucket of `keys` entries, key i written at time 1000 + i with {"n": i}.
std::string BucketChunk(int keys, int first = 0) {
  Bucket b("totals", 0);
  for (int i = first; i < first + keys; ++i) {
    EXPECT_TRUE(b.Update("user-" + std::to_string(i), 1000 + i, [&](Json& v, bool) {
                   v = Json::object({{"n", i}});
                   return Status::Ok();
                 }).ok());
  }
  std::string out;
  b.SaveState(&out);
  return out;
}

TEST(ShardSplit, ABucketSplitByPartitionMergesBackToItself) {
  const std::string full = BucketChunk(5000);
  for (Partitioner how : {Partitioner::kMurmur2, Partitioner::kCrc32}) {
    std::vector<std::string> shards;
    ASSERT_TRUE(SplitStateChunk(KeyedState::kBucket, full, how, 6, &shards).ok());
    ASSERT_EQ(shards.size(), 6u);
    size_t total = 0;
    for (int32_t p = 0; p < 6; ++p) {
      Bucket b("totals", 0);
      ASSERT_TRUE(b.RestoreState(shards[p]).ok());
      total += b.Size();
      EXPECT_GT(b.Size(), 500u);  // 5000 keys over 6 partitions, roughly even
      for (const auto& [key, entry] : b.Page("", 100000, 10000)) {
        EXPECT_EQ(PartitionOf(how, key, 6), p) << key;
      }
    }
    EXPECT_EQ(total, 5000u);
    // Merged in any order, the shards are the bucket again, byte for byte
    // (entries in write order).
    std::vector<std::string_view> views(shards.rbegin(), shards.rend());
    std::string merged;
    ASSERT_TRUE(MergeStateChunks(KeyedState::kBucket, views, &merged).ok());
    EXPECT_EQ(merged, full);
  }
}

TEST(ShardSplit, AMovedShardJoinsAnotherServersBucket) {
  // Server A owns partitions 0 and 1 of 3, server B partition 2; partition 1
  // moves to B. B's bucket afterwards is its own shard plus the moved one.
  const std::string full = BucketChunk(3000);
  std::vector<std::string> shards;
  ASSERT_TRUE(SplitStateChunk(KeyedState::kBucket, full, Partitioner::kMurmur2, 3, &shards).ok());
  std::string b_after;
  ASSERT_TRUE(MergeStateChunks(KeyedState::kBucket, {shards[2], shards[1]}, &b_after).ok());
  Bucket b("totals", 0);
  ASSERT_TRUE(b.RestoreState(b_after).ok());
  Bucket one("x", 0), two("y", 0);
  ASSERT_TRUE(one.RestoreState(shards[1]).ok());
  ASSERT_TRUE(two.RestoreState(shards[2]).ok());
  EXPECT_EQ(b.Size(), one.Size() + two.Size());
  for (const auto& [key, entry] : one.Page("", 100000, 10000)) {
    auto got = b.Get(key, 10000);
    ASSERT_TRUE(got.has_value()) << key;
    EXPECT_EQ(got->value, entry.value);
    EXPECT_EQ(got->last_write_ms, entry.last_write_ms);
  }
}

TEST(ShardSplit, RefusesAKeyInTwoShardsAndMalformedChunks) {
  const std::string a = BucketChunk(10);
  const std::string b = BucketChunk(10, 5);  // keys 5..9 in both
  std::string out;
  const Status st = MergeStateChunks(KeyedState::kBucket, {a, b}, &out);
  EXPECT_EQ(st.code(), Code::kCorruption);
  EXPECT_NE(st.message().find("in two shards"), std::string::npos) << st.ToString();
  std::vector<std::string> shards;
  EXPECT_EQ(SplitStateChunk(KeyedState::kBucket, a.substr(0, a.size() - 3), Partitioner::kMurmur2, 4, &shards).code(),
            Code::kCorruption);
  EXPECT_EQ(SplitStateChunk(KeyedState::kBucket, a + "x", Partitioner::kMurmur2, 4, &shards).code(),
            Code::kCorruption);
  EXPECT_EQ(SplitStateChunk(KeyedState::kBucket, a, Partitioner::kMurmur2, 0, &shards).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(MergeStateChunks(KeyedState::kBucket, {a.substr(0, 40)}, &out).code(), Code::kCorruption);
  // Nothing to merge is an empty bucket.
  out.clear();
  ASSERT_TRUE(MergeStateChunks(KeyedState::kBucket, {}, &out).ok());
  Bucket empty("e", 0);
  EXPECT_TRUE(empty.RestoreState(out).ok());
}

// A rolling window's keys split and merge the same way; its count of late
// points goes with partition 0's slice and adds up again.
TEST(ShardSplit, ARollingWindowSplitsByKeyAndMergesBack) {
  FakeClock clock;
  auto window = testing::MakeTransform(
      "rolling_window: {key: k, field: v, window_secs: 100, time_field: ts}", &clock);
  ASSERT_NE(window, nullptr);
  for (int i = 0; i < 2000; ++i) {
    clock.AdvanceMs(1);
    // Three points per key; ts 1 after 500 is late for a key that saw 500.
    const int key = i % 700;
    const int ts = i < 1400 ? 400 + i / 700 * 100 : 1;
    Batch b = testing::MakeBatch({"{\"k\":\"dev-" + std::to_string(key) + "\",\"ts\":" +
                                  std::to_string(ts) + ",\"v\":" + std::to_string(i) + "}"});
    ASSERT_TRUE(window->Process(&b).ok());
  }
  std::string full;
  window->SaveState(&full);
  std::vector<std::string> shards;
  ASSERT_TRUE(SplitStateChunk(KeyedState::kRollingWindow, full, Partitioner::kCrc32, 4, &shards)
                  .ok());
  for (int32_t p = 0; p < 4; ++p) {
    auto slice = testing::MakeTransform(
        "rolling_window: {key: k, field: v, window_secs: 100, time_field: ts}", &clock);
    ASSERT_TRUE(slice->RestoreState(shards[p]).ok()) << p;
    checkpoint::Decoder d(shards[p]);
    uint64_t keys = 0, late = 0;
    ASSERT_TRUE(d.U64(&keys) && d.U64(&late));
    EXPECT_GT(keys, 100u);
    EXPECT_EQ(late > 0, p == 0);
    // Every key of the slice is one its partition holds.
    std::string_view key;
    ASSERT_TRUE(d.View(&key));
    EXPECT_EQ(PartitionOf(Partitioner::kCrc32, key, 4), p) << key;
  }
  std::string merged;
  ASSERT_TRUE(MergeStateChunks(KeyedState::kRollingWindow,
                               {shards[3], shards[1], shards[0], shards[2]}, &merged)
                  .ok());
  EXPECT_EQ(merged, full);
  EXPECT_EQ(SplitStateChunk(KeyedState::kRollingWindow, full.substr(0, full.size() - 8),
                            Partitioner::kCrc32, 4, &shards)
                .code(),
            Code::kCorruption);
}

class ShardStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("kayak-shards-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Writes a checkpoint of the shard: one unit, `state`, at the offset.
  Result<CommitOutcome> Checkpoint(ShardStore& s, uint64_t epoch, uint64_t id,
                                   const std::string& state, int64_t offset) {
    auto unit = s.WriteChunk(shard_, epoch, id, "b.totals", state);
    if (!unit.ok()) return unit.status();
    ShardManifest m;
    m.epoch = epoch;
    m.checkpoint = id;
    m.owner = "server-" + std::to_string(epoch);
    m.next_offset = offset;
    m.units["b.totals"] = *unit;
    return s.Commit(shard_, m);
  }
  std::string ShardDir() const { return root_.string() + "/" + shard_.Path(); }

  fs::path root_;
  ShardId shard_{"orders", "orders.v1", 3};
};

TEST_F(ShardStoreTest, CommitsAndReadsTheNewest) {
  ShardStore s(root_.string());
  auto none = s.Newest(shard_);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  ASSERT_EQ(V(Checkpoint(s, 1, 10, "state-10", 100)), CommitOutcome::kCommitted);
  ASSERT_EQ(V(Checkpoint(s, 1, 11, "state-11", 150)), CommitOutcome::kCommitted);
  auto newest = s.Newest(shard_);
  ASSERT_TRUE(newest.ok() && newest->has_value());
  EXPECT_EQ((*newest)->checkpoint, 11u);
  EXPECT_EQ((*newest)->next_offset, 150);
  EXPECT_EQ((*newest)->owner, "server-1");
  auto state = s.ReadChunk(shard_, (*newest)->units.at("b.totals"));
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(*state, "state-11");
  // The same checkpoint twice is refused: a log holds it once.
  EXPECT_EQ(V(Checkpoint(s, 1, 11, "again", 150)), CommitOutcome::kFenced);
  EXPECT_TRUE(fs::exists(ShardDir() + "/LOG-00000000000000000002.kys"));
  EXPECT_FALSE(fs::exists(ShardDir() + "/LOG-00000000000000000003.kys"));
}

TEST_F(ShardStoreTest, AClaimFencesTheOldOwner) {
  ShardStore old_owner(root_.string());
  ShardStore new_owner(root_.string());
  ASSERT_EQ(V(Checkpoint(old_owner, 4, 20, "old-20", 500)), CommitOutcome::kCommitted);
  ShardManifest claimed;
  ASSERT_EQ(V(new_owner.Claim(shard_, 5, "server-b", 0, &claimed)), CommitOutcome::kCommitted);
  // The claim restates the old owner's last checkpoint: state and offset.
  EXPECT_EQ(claimed.checkpoint, 20u);
  EXPECT_EQ(claimed.next_offset, 500);
  EXPECT_EQ(V(new_owner.ReadChunk(shard_, claimed.units.at("b.totals"))), "old-20");
  // The old owner, back from a pause, cannot commit any more.
  EXPECT_EQ(V(Checkpoint(old_owner, 4, 21, "old-21", 600)), CommitOutcome::kFenced);
  // A claim of an epoch not above the log's is refused too.
  EXPECT_EQ(V(old_owner.Claim(shard_, 5, "server-a", 0, nullptr)), CommitOutcome::kFenced);
  EXPECT_EQ(V(old_owner.Claim(shard_, 4, "server-a", 0, nullptr)), CommitOutcome::kFenced);
  ASSERT_EQ(V(Checkpoint(new_owner, 5, 21, "new-21", 640)), CommitOutcome::kCommitted);
  auto newest = new_owner.Newest(shard_);
  EXPECT_EQ((*newest)->owner, "server-5");
  EXPECT_EQ((*newest)->next_offset, 640);
  // A shard nobody wrote is claimed empty, at the offset the group gives.
  ShardId fresh{"orders", "orders.v1", 4};
  ASSERT_EQ(V(new_owner.Claim(fresh, 5, "server-b", 77, &claimed)), CommitOutcome::kCommitted);
  EXPECT_TRUE(claimed.units.empty());
  EXPECT_EQ(claimed.next_offset, 77);
}

TEST_F(ShardStoreTest, AnEntryWrittenPastAHigherEpochDoesNotCount) {
  // A writer cannot put an old epoch after a claim through the store (its
  // link onto the claim's number fails, and it reads the claim). A file
  // system that lost that order could; readers then pass the entry over.
  ShardStore s(root_.string());
  ASSERT_EQ(V(Checkpoint(s, 2, 1, "a", 10)), CommitOutcome::kCommitted);  // LOG-1
  ASSERT_EQ(V(s.Claim(shard_, 3, "b", 0, nullptr)), CommitOutcome::kCommitted);  // LOG-2
  // The stale entry: number 3 of epoch 2, made in a scratch store of the
  // same shard and copied in with its chunk.
  const fs::path scratch = root_ / "scratch";
  ShardStore other(scratch.string());
  for (uint64_t id = 1; id <= 3; ++id) {
    ASSERT_EQ(V(Checkpoint(other, 2, id, "stale", 99)), CommitOutcome::kCommitted);
  }
  const fs::path from = scratch / shard_.Path();
  fs::copy_file(from / "LOG-00000000000000000003.kys", ShardDir() + "/LOG-00000000000000000003.kys");
  fs::copy_file(from / "chunk-00000000000000000002-00000000000000000003-b.totals.kyc",
                ShardDir() + "/chunk-00000000000000000002-00000000000000000003-b.totals.kyc");
  std::vector<std::string> notes;
  auto newest = s.Newest(shard_, &notes);
  ASSERT_TRUE(newest.ok() && newest->has_value());
  EXPECT_EQ((*newest)->epoch, 3u);
  EXPECT_EQ((*newest)->checkpoint, 1u);
  EXPECT_EQ((*newest)->next_offset, 10);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("LOG-00000000000000000003.kys passed over: epoch 2 was fenced by "
                          "epoch 3 before it"),
            std::string::npos)
      << notes[0];
}

TEST_F(ShardStoreTest, ACorruptEntryOrMissingChunkIsPassedOverWithANote) {
  ShardStore s(root_.string());
  ASSERT_EQ(V(Checkpoint(s, 1, 1, "one", 10)), CommitOutcome::kCommitted);
  ASSERT_EQ(V(Checkpoint(s, 1, 2, "two", 20)), CommitOutcome::kCommitted);
  {
    std::fstream f(ShardDir() + "/LOG-00000000000000000002.kys",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('#');
  }
  std::vector<std::string> notes;
  auto newest = s.Newest(shard_, &notes);
  ASSERT_TRUE(newest.ok() && newest->has_value());
  EXPECT_EQ((*newest)->checkpoint, 1u);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("LOG-00000000000000000002.kys passed over: payload checksum mismatch"),
            std::string::npos)
      << notes[0];
  // The next commit takes number 3 all the same.
  ASSERT_EQ(V(Checkpoint(s, 1, 3, "three", 30)), CommitOutcome::kCommitted);
  fs::remove(ShardDir() + "/chunk-00000000000000000001-00000000000000000003-b.totals.kyc");
  notes.clear();
  newest = s.Newest(shard_, &notes);
  EXPECT_EQ((*newest)->checkpoint, 1u);
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("is missing"), std::string::npos) << notes[0];
  // A chunk swapped for another is caught when read.
  auto unit = s.WriteChunk(shard_, 1, 4, "b.totals", "four");
  ShardUnit wrong = (*newest)->units.at("b.totals");
  fs::copy_file(ShardDir() + "/" + unit->chunk, ShardDir() + "/" + wrong.chunk,
                fs::copy_options::overwrite_existing);
  EXPECT_EQ(s.ReadChunk(shard_, wrong).status().code(), Code::kCorruption);
}

TEST_F(ShardStoreTest, PruneKeepsTheNewestAndWhatTheyName) {
  ShardStore s(root_.string());
  for (uint64_t id = 1; id <= 5; ++id) {
    ASSERT_EQ(V(Checkpoint(s, 1, id, "s" + std::to_string(id), static_cast<int64_t>(id) * 10)),
              CommitOutcome::kCommitted);
  }
  ASSERT_EQ(V(s.Claim(shard_, 2, "b", 0, nullptr)), CommitOutcome::kCommitted);  // names ckpt 5's chunk
  // Entries a writer died before placing: an old one goes, a fresh one (a
  // writer placing it now) stays.
  const std::string old_temp = ShardDir() + "/entry.tmp-1-dead";
  const std::string new_temp = ShardDir() + "/entry.tmp-2-live";
  std::ofstream(old_temp) << "x";
  std::ofstream(new_temp) << "x";
  fs::last_write_time(old_temp, fs::file_time_type::clock::now() - std::chrono::minutes(5));
  ASSERT_TRUE(s.Prune(shard_, 2).ok());
  EXPECT_FALSE(fs::exists(old_temp));
  EXPECT_TRUE(fs::exists(new_temp));
  fs::remove(new_temp);
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(ShardDir())) left.insert(e.path().filename());
  EXPECT_EQ(left, (std::set<std::string>{
                      "LOG-00000000000000000005.kys", "LOG-00000000000000000006.kys",
                      "chunk-00000000000000000001-00000000000000000005-b.totals.kyc"}));
  auto newest = s.Newest(shard_);
  EXPECT_EQ(V(s.ReadChunk(shard_, (*newest)->units.at("b.totals"))), "s5");
  // The next commit goes on after the kept numbers.
  ASSERT_EQ(V(Checkpoint(s, 2, 6, "s6", 60)), CommitOutcome::kCommitted);
  EXPECT_TRUE(fs::exists(ShardDir() + "/LOG-00000000000000000007.kys"));
}

TEST_F(ShardStoreTest, UnsafeNamesAreRefused) {
  ShardStore s(root_.string());
  ShardManifest m;
  for (const ShardId& bad : {ShardId{"..", "t", 0}, ShardId{"r", "a/b", 0}, ShardId{"r", "", 0},
                             ShardId{"r", "t", -1}}) {
    EXPECT_EQ(s.Commit(bad, m).status().code(), Code::kInvalidArgument) << bad.Path();
  }
  EXPECT_EQ(s.WriteChunk(shard_, 1, 1, "../x", "y").status().code(), Code::kInvalidArgument);
}

// Writers racing on one shard: an old owner committing checkpoints while a
// new one claims. Whatever the interleaving, the new owner restores the last
// checkpoint the old one was told was committed, and nothing the old one
// wrote after the claim counts.
TEST_F(ShardStoreTest, RacingOwnersSeeOneOrder) {
  for (int round = 0; round < 30; ++round) {
    shard_.partition = round;
    ShardStore a(root_.string());
    ShardStore b(root_.string());
    ASSERT_EQ(V(Checkpoint(a, 1, 1, "1", 1)), CommitOutcome::kCommitted);
    std::atomic<uint64_t> last_committed{1};
    std::atomic<bool> go{false};
    std::thread old_owner([&] {
      while (!go.load()) {
      }
      for (uint64_t id = 2; id < 200; ++id) {
        auto r = Checkpoint(a, 1, id, std::to_string(id), static_cast<int64_t>(id));
        ASSERT_TRUE(r.ok());
        if (*r == CommitOutcome::kFenced) return;
        last_committed = id;
      }
    });
    ShardManifest claimed;
    go = true;
    std::this_thread::yield();
    auto r = b.Claim(shard_, 2, "b", 0, &claimed);
    old_owner.join();
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(*r, CommitOutcome::kCommitted);
    EXPECT_EQ(claimed.checkpoint, last_committed.load()) << "round " << round;
    EXPECT_EQ(claimed.next_offset, static_cast<int64_t>(last_committed.load()));
    auto newest = b.Newest(shard_);
    EXPECT_EQ((*newest)->epoch, 2u);
    EXPECT_EQ((*newest)->checkpoint, last_committed.load());
  }
}

// ---- a live bucket's keys replaced, and the agent that does it ----

// The keys of `b` and their values, as text.
std::map<std::string, std::string> Contents(Bucket& b) {
  std::map<std::string, std::string> out;
  for (auto& [k, e] : b.Page("", 100000, 0)) out[k] = DumpJson(e.value);
  return out;
}

void Fill(Bucket& b, int keys, int64_t base) {
  for (int i = 0; i < keys; ++i) {
    ASSERT_TRUE(b.Update("k" + std::to_string(i), 1000 + i,
                         [&](Json& v, bool) {
                           v = Json(base + i);
                           return Status::Ok();
                         })
                    .ok());
  }
}

TEST(BucketReplaceKeys, DropsWhatBelongsWritesTheSliceAndCountsBothAsChanges) {
  Bucket from("sums", 0), live("sums", 0);
  Fill(from, 10, 100);
  Fill(live, 10, 500);
  live.TrackChanges();
  std::vector<Bucket::Change> ignored;
  live.TakeChanges(/*all=*/true, &ignored);
  std::string full;
  from.SaveState(&full);
  std::vector<std::string> shards;
  ASSERT_TRUE(SplitStateChunk(KeyedState::kBucket, full, Partitioner::kCrc32, 2, &shards).ok());
  auto in1 = [](const std::string& k) { return PartitionOf(Partitioner::kCrc32, k, 2) == 1; };
  ASSERT_TRUE(live.ReplaceKeys(in1, {shards[1]}).ok());
  const auto got = Contents(live);
  const auto was = Contents(from);
  ASSERT_EQ(got.size(), 10u);
  for (const auto& [k, v] : got) {
    // Partition 1's keys are the slice's; the others are as they were.
    EXPECT_EQ(v, in1(k) ? was.at(k) : std::to_string(500 + std::stoi(k.substr(1)))) << k;
  }
  std::vector<Bucket::Change> changes;
  live.TakeChanges(/*all=*/false, &changes);
  size_t written = 0;
  for (const auto& c : changes) {
    EXPECT_TRUE(in1(c.key)) << c.key;
    written += c.dropped ? 0 : 1;
  }
  EXPECT_GT(written, 0u);
  // A malformed slice changes nothing.
  EXPECT_EQ(live.ReplaceKeys([](const std::string&) { return true; }, {"\x05"}).code(),
            Code::kCorruption);
  EXPECT_EQ(Contents(live), got);
  // No slice: the keys go.
  ASSERT_TRUE(live.ReplaceKeys(in1, {}).ok());
  for (const auto& [k, v] : Contents(live)) EXPECT_FALSE(in1(k)) << k;
}

// A member of a cluster that owns no partitions: what a transform made in
// a cluster is given (ComponentContext::partitions).
class MemberOnly final : public PartitionOwner {
 public:
  const std::string& member() const override { return name_; }
  Status Assign(std::vector<Assigned>* parts) override {
    (void)parts;
    return Status::Ok();
  }

 private:
  std::string name_ = "m";
};

class ShardAgentTest : public ShardStoreTest {
 protected:
  ClusterConfig Config(const std::string& member) const {
    return ClusterConfig{"c", member, root_.string(), Partitioner::kCrc32};
  }
  static std::vector<PartitionOwner::Assigned> Parts(std::initializer_list<int32_t> ps,
                                                     bool have_position) {
    std::vector<PartitionOwner::Assigned> out;
    for (int32_t p : ps) {
      PartitionOwner::Assigned a;
      a.topic = "t";
      a.partition = p;
      a.partitions = 2;
      a.have_position = have_position;
      out.push_back(a);
    }
    return out;
  }
  // The bucket as it is now, for the checkpoint's full state.
  static ShardAgent::FullChunk Saved(Bucket* b) {
    return [b](const std::string& unit, std::string* full) {
      EXPECT_EQ(unit, "b." + b->name());
      full->clear();
      b->SaveState(full);
      return Status::Ok();
    };
  }
  FakeClock clock_;
};

TEST_F(ShardAgentTest, APartitionMovesWithItsStateAndTheOldOwnerIsFenced) {
  Bucket bucket_a("sums", 0), bucket_b("sums", 0);
  ShardAgent a(Config("a"), nullptr, &clock_), b(Config("b"), nullptr, &clock_);
  a.Bind("r", {&bucket_a});
  b.Bind("r", {&bucket_b});
  auto parts = Parts({0, 1}, false);
  ASSERT_TRUE(a.Assign(&parts).ok());
  for (const auto& p : parts) {
    EXPECT_FALSE(p.keep);
    EXPECT_EQ(p.offset, -1) << "a shard without a checkpoint starts at the group's offset";
  }
  Fill(bucket_a, 40, 100);
  ASSERT_TRUE(a.Prepare(5, R"({"offsets":[["t",0,100],["t",1,50]]})", {}, Saved(&bucket_a)).ok());
  a.Publish(5);
  const auto at5 = Contents(bucket_a);
  Fill(bucket_a, 40, 900);  // after checkpoint 5: not published
  ASSERT_TRUE(a.Prepare(6, R"({"offsets":[["t",0,180],["t",1,90]]})", {}, Saved(&bucket_a)).ok());

  // Partition 1 goes to b, which gets checkpoint 5's state of it and its
  // offset there.
  auto to_b = Parts({1}, false);
  ASSERT_TRUE(b.Assign(&to_b).ok());
  EXPECT_FALSE(to_b[0].keep);
  EXPECT_EQ(to_b[0].offset, 50);
  auto in1 = [](const std::string& k) { return PartitionOf(Partitioner::kCrc32, k, 2) == 1; };
  const auto got_b = Contents(bucket_b);
  ASSERT_FALSE(got_b.empty());
  for (const auto& [k, v] : at5) {
    if (in1(k)) {
      EXPECT_EQ(got_b.at(k), v) << k;
    }
  }
  for (const auto& [k, v] : got_b) EXPECT_TRUE(in1(k)) << k;

  // a, not yet told, publishes checkpoint 6: partition 0 goes in; partition
  // 1 is refused (b claimed it at a higher epoch) and a stops writing it.
  a.Publish(6);
  ShardStore store(root_.string() + "/c");
  auto p1 = V(store.Newest(ShardId{"r", "t", 1}));
  ASSERT_TRUE(p1.has_value());
  EXPECT_EQ(p1->owner, "b");
  EXPECT_EQ(p1->next_offset, 50);
  auto p0 = V(store.Newest(ShardId{"r", "t", 0}));
  ASSERT_TRUE(p0.has_value());
  EXPECT_EQ(p0->owner, "a");
  EXPECT_EQ(p0->next_offset, 180);
  // b numbers its checkpoints its own way: its checkpoint 5 is not the
  // claim's restated checkpoint 5 of a.
  ASSERT_TRUE(b.Prepare(5, R"({"offsets":[["t",1,70]]})", {}, Saved(&bucket_b)).ok());
  b.Publish(5);
  p1 = V(store.Newest(ShardId{"r", "t", 1}));
  ASSERT_TRUE(p1.has_value());
  EXPECT_EQ(p1->next_offset, 70);
  EXPECT_FALSE(p1->claim);
  a.Progress("t", 0, 185, 15);
  a.Progress("t", 1, 95, 0);  // not a's any more: ignored
  const auto owned = a.Describe().owned;
  ASSERT_EQ(owned.size(), 1u);
  EXPECT_EQ(owned[0].partition, 0);
  EXPECT_EQ(owned[0].next, 185);
  EXPECT_EQ(owned[0].lag, 15);

  // a's next assignment keeps partition 0 (its own, current) and holds no
  // key of partition 1 any more.
  auto keep0 = Parts({0}, true);
  ASSERT_TRUE(a.Assign(&keep0).ok());
  EXPECT_TRUE(keep0[0].keep);
  for (const auto& [k, v] : Contents(bucket_a)) EXPECT_FALSE(in1(k)) << k;

  // A server that restarts without a position for a shard it published
  // restores it rather than trust what it holds.
  Bucket bucket_a2("sums", 0);
  ShardAgent a2(Config("a"), nullptr, &clock_);
  a2.Bind("r", {&bucket_a2});
  auto again = Parts({0}, false);
  ASSERT_TRUE(a2.Assign(&again).ok());
  EXPECT_FALSE(again[0].keep);
  EXPECT_EQ(again[0].offset, 180);
  EXPECT_EQ(Contents(bucket_a2).size(), Contents(bucket_a).size());

  // A server that claims both shards in one assignment holds each one's
  // keys as its owner published them, each read from its own offset, and
  // nothing it held before.
  Bucket bucket_c("sums", 0);
  Fill(bucket_c, 60, 5000);
  ShardAgent c(Config("c"), nullptr, &clock_);
  c.Bind("r", {&bucket_c});
  auto both = Parts({0, 1}, true);
  ASSERT_TRUE(c.Assign(&both).ok());
  EXPECT_FALSE(both[0].keep);
  EXPECT_FALSE(both[1].keep);
  EXPECT_EQ(both[0].offset, 180);
  EXPECT_EQ(both[1].offset, 70);
  auto expected = Contents(bucket_a2);
  for (const auto& [k, v] : Contents(bucket_b)) expected[k] = v;
  EXPECT_EQ(Contents(bucket_c), expected);
}

// A revocation: the agent asks for a checkpoint and says the partitions may
// go only once one begun after the request is published, with their
// offsets in the store.
// A buffer can release what it holds with no new input: a shard whose
// newest entry held messages is published again at the next checkpoint even
// though its offset did not move, so a claim does not release them twice.
TEST_F(ShardAgentTest, AShardWhoseBufferHeldMessagesIsPublishedAgainOnceReleased) {
  MemberOnly owner;
  BucketRegistry buckets;
  std::string errors;
  const std::string yaml = "buffer: {max_messages: 1000}";
  auto buffer_a = testing::MakeTransform(yaml, &clock_, &buckets, &errors, &owner);
  auto buffer_b = testing::MakeTransform(yaml, &clock_, &buckets, &errors, &owner);
  ASSERT_TRUE(buffer_a && buffer_b) << errors;
  ShardAgent a(Config("a"), nullptr, &clock_), b(Config("b"), nullptr, &clock_);
  a.Bind("r", {}, {{"p.k.t0", buffer_a.get()}});
  b.Bind("r", {}, {{"p.k.t0", buffer_b.get()}});
  auto parts = Parts({0, 1}, false);
  ASSERT_TRUE(a.Assign(&parts).ok());
  Batch in = testing::MakeBatch({R"({"seq":1})", R"({"seq":2})", R"({"seq":3})"});
  for (size_t i = 0; i < in.messages.size(); ++i) {
    in.messages[i].set_key("key-" + std::to_string(i));
  }
  ASSERT_TRUE(buffer_a->Process(&in).ok());
  const auto saved = [&](const std::string& unit, std::string* full) {
    EXPECT_EQ(unit, "p.k.t0");
    full->clear();
    buffer_a->SaveState(full);
    return Status::Ok();
  };
  ASSERT_TRUE(a.Prepare(1, R"({"offsets":[["t",0,10],["t",1,10]]})", {}, saved).ok());
  a.Publish(1);
  Batch released;
  buffer_a->Drain(&released);  // max_secs passed: out to the outputs
  ASSERT_EQ(released.messages.size(), 3u);
  // The same offsets: only what the buffer holds changed.
  ASSERT_TRUE(a.Prepare(2, R"({"offsets":[["t",0,10],["t",1,10]]})", {}, saved).ok());
  a.Publish(2);
  auto to_b = Parts({0, 1}, false);
  ASSERT_TRUE(b.Assign(&to_b).ok());
  for (const auto& p : to_b) EXPECT_EQ(p.offset, 10);
  Batch again;
  buffer_b->Drain(&again);
  EXPECT_EQ(again.messages.size(), 0u) << "released by a, and released again by b";
  // An idle shard whose entry holds nothing is not written again.
  const auto entries = [&] {
    size_t n = 0;
    for (const auto& e : fs::recursive_directory_iterator(root_)) {
      n += e.path().filename().string().rfind("LOG-", 0) == 0;
    }
    return n;
  };
  const auto saved_b = [&](const std::string&, std::string* full) {
    full->clear();
    buffer_b->SaveState(full);
    return Status::Ok();
  };
  ASSERT_TRUE(b.Prepare(3, R"({"offsets":[["t",0,10],["t",1,10]]})", {}, saved_b).ok());
  b.Publish(3);  // after a claim: written once
  const size_t after_claim = entries();
  ASSERT_TRUE(b.Prepare(4, R"({"offsets":[["t",0,10],["t",1,10]]})", {}, saved_b).ok());
  b.Publish(4);
  EXPECT_EQ(entries(), after_claim);
}

// From the revocation to the next assignment a buffer releases nothing by
// time: what it holds of the partitions handed over is in the checkpoint
// their next owner restores and releases. Then it goes on with what it kept.
TEST_F(ShardAgentTest, ABufferReleasesNothingByTimeWhilePartitionsAreHandedOver) {
  ShardAgent a(Config("a"), nullptr, &clock_);
  BucketRegistry buckets;
  std::string errors;
  auto buffer = testing::MakeTransform("buffer: {max_messages: 1000, max_secs: 1}", &clock_,
                                       &buckets, &errors, &a);
  ASSERT_TRUE(buffer) << errors;
  a.Bind("r", {}, {{"p.k.t0", buffer.get()}});
  a.SetCheckpointRequest([] { return uint64_t{7}; });
  // A restarted member's buffer holds what its local checkpoint held, of
  // partitions that may have moved meanwhile: nothing goes by time before
  // the first assignment says which are still its own.
  Batch restored = testing::MakeBatch({"{}", "{}"});
  restored.messages[0].set_key("key-0");
  restored.messages[1].set_key("key-1");
  ASSERT_TRUE(buffer->Process(&restored).ok());
  EXPECT_TRUE(a.StateHeld());
  Batch early;
  buffer->Tick(clock_.NowMs() + 5000, &early);
  EXPECT_TRUE(early.messages.empty()) << "released before the first assignment";
  auto parts = Parts({0, 1}, false);
  ASSERT_TRUE(a.Assign(&parts).ok());
  EXPECT_FALSE(a.StateHeld());
  Batch in = testing::MakeBatch({"{}", "{}", "{}", "{}", "{}", "{}"});
  for (size_t i = 0; i < in.messages.size(); ++i) {
    in.messages[i].set_key("key-" + std::to_string(i));
  }
  ASSERT_TRUE(buffer->Process(&in).ok());
  // The hand-over's checkpoint, published.
  ASSERT_TRUE(a.Prepare(1, R"({"offsets":[["t",0,10],["t",1,10]]})", {},
                        [&](const std::string&, std::string* full) {
                          full->clear();
                          buffer->SaveState(full);
                          return Status::Ok();
                        }).ok());
  a.Publish(1);
  ASSERT_TRUE(a.HandOver());
  EXPECT_TRUE(a.StateHeld());
  Batch out;
  buffer->Tick(clock_.NowMs() + 5000, &out);
  EXPECT_TRUE(out.messages.empty()) << "released while its partitions were handed over";
  // An assignment that fails is tried again later: until one succeeds the
  // messages of the partitions that went are still held for their owner.
  auto bad = Parts({0}, true);
  bad.front().partitions = 0;
  ASSERT_FALSE(a.Assign(&bad).ok());
  EXPECT_TRUE(a.StateHeld());
  buffer->Tick(clock_.NowMs() + 5000, &out);
  EXPECT_TRUE(out.messages.empty()) << "released after an assignment that failed";
  auto kept = Parts({0}, true);
  ASSERT_TRUE(a.Assign(&kept).ok());
  EXPECT_FALSE(a.StateHeld());
  buffer->Tick(clock_.NowMs() + 5000, &out);
  ASSERT_FALSE(out.messages.empty());
  for (const auto& m : out.messages) {
    EXPECT_EQ(PartitionOf(Partitioner::kCrc32, m.key(), 2), 0) << m.key();
  }
}

TEST_F(ShardAgentTest, AHandOverWaitsForACheckpointBegunAfterIt) {
  Bucket bucket("sums", 0);
  ShardAgent a(Config("a"), nullptr, &clock_);
  a.Bind("r", {&bucket});
  EXPECT_FALSE(a.HandOver()) << "no way to ask for a checkpoint: let go at once";
  int asked = 0;
  a.SetCheckpointRequest([&] {
    ++asked;
    return uint64_t{7};  // checkpoint 7 was in flight
  });
  EXPECT_FALSE(a.HandOver()) << "nothing owned: nothing to hand over";
  EXPECT_EQ(asked, 0);
  auto parts = Parts({0, 1}, false);
  ASSERT_TRUE(a.Assign(&parts).ok());
  Fill(bucket, 40, 100);
  ASSERT_TRUE(a.HandOver());
  EXPECT_EQ(asked, 1);
  EXPECT_FALSE(a.HandedOver());
  // The checkpoint in flight when it was asked may not cover what was read.
  ASSERT_TRUE(a.Prepare(7, R"({"offsets":[["t",0,100],["t",1,50]]})", {}, Saved(&bucket)).ok());
  a.Publish(7);
  EXPECT_FALSE(a.HandedOver());
  ASSERT_TRUE(a.Prepare(8, R"({"offsets":[["t",0,120],["t",1,60]]})", {}, Saved(&bucket)).ok());
  a.Publish(8);
  EXPECT_TRUE(a.HandedOver());
  ShardStore store(root_.string() + "/c");
  for (auto [p, offset] : {std::pair{0, 120}, std::pair{1, 60}}) {
    auto newest = store.Newest(ShardId{"r", "t", p});
    ASSERT_TRUE(newest.ok() && newest->has_value());
    EXPECT_EQ((*newest)->checkpoint, 8u);
    EXPECT_EQ((*newest)->next_offset, offset);
  }
}

// The two-phase output states of an entry whose one output, o.k.0, names
// `marker` as its commit.
std::map<std::string, std::string> Outputs(const char* marker) {
  return std::map<std::string, std::string>{{"o.k.0", marker}};
}

// A claim may wait long on its commit check (an open transaction on the
// marker topic): the member file and the checkpoints of the partitions that
// stay go on meanwhile.
TEST_F(ShardAgentTest, AClaimWaitingOnItsCommitCheckHoldsUpNothingElse) {
  Bucket bucket_a("sums", 0), bucket_b("sums", 0);
  ShardAgent a(Config("a"), nullptr, &clock_), b(Config("b"), nullptr, &clock_);
  a.Bind("r", {&bucket_a});
  b.Bind("r", {&bucket_b});
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  bool asking = false, answer = false;
  b.SetCommitCheck([&](const std::map<std::string, std::string>&) {
    std::unique_lock<std::mutex> l(gate_mu);
    asking = true;
    gate_cv.notify_all();
    gate_cv.wait(l, [&] { return answer; });
    return true;
  });
  auto to_a = Parts({1}, false);
  ASSERT_TRUE(a.Assign(&to_a).ok());
  Fill(bucket_a, 40, 100);
  ASSERT_TRUE(a.Prepare(5, R"({"offsets":[["t",1,50]]})", Outputs("m5"), Saved(&bucket_a)).ok());
  ASSERT_TRUE(a.PublishBeforeCommit(5).ok());
  auto first = Parts({0}, false);
  ASSERT_TRUE(b.Assign(&first).ok());
  Fill(bucket_b, 40, 300);

  // b is given partition 1 besides 0 (which it keeps): its claim asks about
  // a's commit of 5.
  auto both = Parts({0, 1}, true);
  Status assigned;
  std::thread claimer([&] { assigned = b.Assign(&both); });
  {
    std::unique_lock<std::mutex> l(gate_mu);
    ASSERT_TRUE(gate_cv.wait_for(l, std::chrono::seconds(30), [&] { return asking; }));
  }
  // While it waits: the member file reads what b owns, and a checkpoint of
  // partition 0 is cut and published.
  ShardStore store(root_.string() + "/c");
  auto meanwhile = std::async(std::launch::async, [&] {
    const auto d = b.Describe();
    EXPECT_EQ(d.owned.size(), 1u);
    EXPECT_TRUE(b.Prepare(6, R"({"offsets":[["t",0,70]]})", {}, Saved(&bucket_b)).ok());
    b.Publish(6);
    EXPECT_EQ(V(store.Newest(ShardId{"r", "t", 0}))->checkpoint, 6u);
  });
  EXPECT_EQ(meanwhile.wait_for(std::chrono::seconds(20)), std::future_status::ready)
      << "the member file and the checkpoint waited for the claim";
  {
    std::lock_guard<std::mutex> l(gate_mu);
    answer = true;
  }
  gate_cv.notify_all();
  meanwhile.wait();
  claimer.join();
  ASSERT_TRUE(assigned.ok()) << assigned.message();
  EXPECT_EQ(both[1].offset, 50);
  EXPECT_EQ(b.Describe().owned.size(), 2u);
}

// With two-phase outputs an entry is published before its outputs commit
// and names that commit: a claim restores the newest entry whose commit took
// place, and an owner fenced from a shard may commit nothing more.
TEST_F(ShardAgentTest, WithTwoPhaseOutputsAClaimRestoresTheNewestCommittedEntry) {
  std::set<std::string> committed;  // the markers whose transactions committed
  int asked = 0;
  const auto check = [&](const std::map<std::string, std::string>& outputs) {
    ++asked;
    for (const auto& [unit, marker] : outputs) {
      EXPECT_EQ(unit, "o.k.0");
      if (!committed.count(marker)) return false;
    }
    return true;
  };
  Bucket bucket_a("sums", 0), bucket_b("sums", 0);
  ShardAgent a(Config("a"), nullptr, &clock_), b(Config("b"), nullptr, &clock_);
  a.Bind("r", {&bucket_a});
  b.Bind("r", {&bucket_b});
  a.SetCommitCheck(check);
  b.SetCommitCheck(check);
  auto parts = Parts({0, 1}, false);
  ASSERT_TRUE(a.Assign(&parts).ok());
  Fill(bucket_a, 40, 100);
  ASSERT_TRUE(a.Prepare(5, R"({"offsets":[["t",0,100],["t",1,50]]})", Outputs("m5"),
                        Saved(&bucket_a)).ok());
  ASSERT_TRUE(a.PublishBeforeCommit(5).ok());
  committed.insert("m5");
  a.Publish(5);
  const auto at5 = Contents(bucket_a);
  Fill(bucket_a, 40, 900);
  ASSERT_TRUE(a.Prepare(6, R"({"offsets":[["t",0,180],["t",1,90]]})", Outputs("m6"),
                        Saved(&bucket_a)).ok());
  ASSERT_TRUE(a.PublishBeforeCommit(6).ok());
  ShardStore store(root_.string() + "/c");
  ASSERT_EQ(V(store.Newest(ShardId{"r", "t", 1}))->checkpoint, 6u)
      << "published before the commit";
  EXPECT_EQ(V(store.Newest(ShardId{"r", "t", 1}))->outputs, Outputs("m6"));

  // a's commit of 6 does not take place; b claims partition 1 and restores
  // checkpoint 5, the newest whose commit did.
  auto to_b = Parts({1}, false);
  ASSERT_TRUE(b.Assign(&to_b).ok());
  EXPECT_EQ(to_b[0].offset, 50);
  EXPECT_GT(asked, 0);
  auto in1 = [](const std::string& k) { return PartitionOf(Partitioner::kCrc32, k, 2) == 1; };
  for (const auto& [k, v] : at5) {
    if (in1(k)) {
      EXPECT_EQ(Contents(bucket_b).at(k), v) << k;
    }
  }
  auto claim = V(store.Newest(ShardId{"r", "t", 1}));
  EXPECT_TRUE(claim->claim);
  EXPECT_EQ(claim->checkpoint, 5u);
  EXPECT_TRUE(claim->outputs.empty()) << "a claim has decided";

  // a, not told, publishes checkpoint 7: partition 1 is refused, and from
  // then on a publishes nothing before a commit, so it commits nothing.
  ASSERT_TRUE(a.Prepare(7, R"({"offsets":[["t",0,200],["t",1,95]]})", Outputs("m7"),
                        Saved(&bucket_a)).ok());
  Status fenced = a.PublishBeforeCommit(7);
  EXPECT_EQ(fenced.code(), Code::kInvalidArgument) << fenced.message();
  ASSERT_TRUE(a.Prepare(8, R"({"offsets":[["t",0,210]]})", Outputs("m8"), Saved(&bucket_a)).ok());
  EXPECT_FALSE(a.PublishBeforeCommit(8).ok()) << "fenced for good";

  // a restarts on its local state (a position for partition 0). The newest
  // entry of partition 0 is its own, published before a commit: had that
  // commit taken place, its own state would be current and kept...
  committed.insert("m7");
  {
    Bucket bucket("sums", 0);
    ShardAgent restarted(Config("a"), nullptr, &clock_);
    restarted.Bind("r", {&bucket});
    restarted.SetCommitCheck(check);
    auto kept = Parts({0}, true);
    ASSERT_TRUE(restarted.Assign(&kept).ok());
    EXPECT_TRUE(kept[0].keep);
  }
  // ...but it did not (the restart went back to the checkpoint before), so
  // the shard is claimed again, from checkpoint 5.
  committed.erase("m7");
  Bucket bucket_a2("sums", 0);
  ShardAgent a2(Config("a"), nullptr, &clock_);
  a2.Bind("r", {&bucket_a2});
  a2.SetCommitCheck(check);
  auto again = Parts({0}, true);
  ASSERT_TRUE(a2.Assign(&again).ok());
  EXPECT_FALSE(again[0].keep);
  EXPECT_EQ(again[0].offset, 100);
  // Restarted once more before a checkpoint of its own: the newest entry is
  // its earlier run's claim, whose state may be newer than what the local
  // checkpoint holds, so it claims again rather than keep.
  Bucket bucket_a3("sums", 0);
  ShardAgent a3(Config("a"), nullptr, &clock_);
  a3.Bind("r", {&bucket_a3});
  a3.SetCommitCheck(check);
  auto third = Parts({0}, true);
  ASSERT_TRUE(a3.Assign(&third).ok());
  EXPECT_FALSE(third[0].keep);
  EXPECT_EQ(third[0].offset, 100);
  // In the same run, a shard it claimed is its own: kept.
  auto same_run = Parts({0}, true);
  ASSERT_TRUE(a3.Assign(&same_run).ok());
  EXPECT_TRUE(same_run[0].keep);
}

TEST_F(ShardAgentTest, MemberFilesNameEachKeysOwner) {
  ClusterConfig ca = Config("a"), cb = Config("b");
  Membership ma(ca), mb(cb);  // outlive the agents, which leave them
  ca.membership = &ma;
  cb.membership = &mb;
  Bucket bucket_a("sums", 0), bucket_b("sums", 0);
  ShardAgent a(ca, nullptr, &clock_), b(cb, nullptr, &clock_);
  a.Bind("r", {&bucket_a});
  b.Bind("r", {&bucket_b});
  auto pa = Parts({0}, false);
  auto pb = Parts({1}, false);
  ASSERT_TRUE(a.Assign(&pa).ok());
  ASSERT_TRUE(b.Assign(&pb).ok());
  std::string in0, in1;  // a key of each partition
  for (int i = 0; in0.empty() || in1.empty(); ++i) {
    const std::string k = "k" + std::to_string(i);
    (PartitionOf(Partitioner::kCrc32, k, 2) == 0 ? in0 : in1) = k;
  }
  a.Progress("t", 0, 40, 2);  // b's input has not said yet
  ma.Start("http://127.0.0.1:1");
  mb.Start("http://127.0.0.1:2");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((ma.OwnerOf("sums", in1).empty() || mb.OwnerOf("sums", in0).empty()) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(ma.OwnerOf("sums", in1), "http://127.0.0.1:2");
  EXPECT_EQ(mb.OwnerOf("sums", in0), "http://127.0.0.1:1");
  EXPECT_EQ(ma.OwnerOf("sums", in0), "") << "its own key";
  EXPECT_EQ(ma.OwnerOf("other", in1), "") << "a bucket no region of the cluster writes";
  const auto ov = ma.Overview();
  EXPECT_EQ(ov["member"], "a");
  ASSERT_EQ(ov["members"].size(), 2u) << ov.dump();
  for (const auto& m : ov["members"]) {
    EXPECT_TRUE(m["live"].get<bool>());
    ASSERT_EQ(m["shards"].size(), 1u);
    const auto& shard = m["shards"][0];
    EXPECT_EQ(shard["partition"].get<int>(), m["member"] == "a" ? 0 : 1);
    if (m["member"] == "a") {
      EXPECT_EQ(shard["next"], 40);
      EXPECT_EQ(shard["lag"], 2);
    } else {
      EXPECT_TRUE(shard["next"].is_null());
      EXPECT_TRUE(shard["lag"].is_null());
    }
  }
}

// In a cluster keyed state is keyed by the message's Kafka key, the key its
// partition follows: a bucket write or a window under another key is
// refused, naming both; a lookup reads any key; a window without a key is
// refused when it is made. On one server nothing of this applies.
TEST(ClusterKeys, KeyedStateInAClusterIsKeyedByTheMessagesKafkaKey) {
  using testing::MakeBatch;
  using testing::MakeTransform;
  MemberOnly owner;
  FakeClock clock;
  BucketRegistry buckets;
  buckets.Add("sums", 0);
  std::string errors;
  auto one = [](const std::string& payload, const std::string& key) {
    Batch b = MakeBatch({payload});
    b.messages[0].set_key(key);
    return b;
  };
  auto add = MakeTransform("bucket: {name: sums, key: k, op: add, field: v}", &clock, &buckets,
                           &errors, &owner);
  ASSERT_TRUE(add) << errors;
  Batch same = one(R"({"k":"k1","v":2})", "k1");
  EXPECT_TRUE(add->Process(&same).ok());
  Batch other = one(R"({"k":"k1","v":3})", "k2");
  const Status st = add->Process(&other);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("key field 'k' is 'k1', the message's key 'k2'"),
            std::string::npos) << st.message();
  EXPECT_EQ(buckets.Find("sums")->Get("k1", 0)->value, Json(2));

  auto lookup = MakeTransform("bucket: {name: sums, key: k, op: lookup, as: s}", &clock, &buckets,
                              &errors, &owner);
  ASSERT_TRUE(lookup) << errors;
  Batch read = one(R"({"k":"k1"})", "k9");
  EXPECT_TRUE(lookup->Process(&read).ok());

  auto window = MakeTransform("rolling_window: {key: k, field: v, window_messages: 3}", &clock,
                              &buckets, &errors, &owner);
  ASSERT_TRUE(window) << errors;
  Batch w = one(R"({"k":"k1","v":1})", "");
  EXPECT_FALSE(window->Process(&w).ok());
  EXPECT_FALSE(MakeTransform("rolling_window: {field: v, window_messages: 3}", &clock, &buckets,
                             &errors, &owner));
  EXPECT_NE(errors.find("in a cluster a window needs a `key`"), std::string::npos) << errors;

  // One server: any key.
  auto plain = MakeTransform("bucket: {name: sums, key: k, op: add, field: v}", &clock, &buckets);
  ASSERT_TRUE(plain);
  Batch any = one(R"({"k":"k1","v":3})", "k2");
  EXPECT_TRUE(plain->Process(&any).ok());
}

// A rolling_window's keys of one partition move to another instance, which
// goes on with their windows where they stopped; the moves count as changes
// for its next delta.
TEST(WindowReplaceKeys, AMovedPartitionsWindowsGoOnWhereTheyStopped) {
  using testing::FieldsOf;
  using testing::MakeBatch;
  using testing::MakeTransform;
  FakeClock clock;
  BucketRegistry buckets;
  std::string errors;
  const std::string yaml =
      "rolling_window: {key: k, field: v, window_messages: 3, aggregates: [count, sum]}";
  auto a = MakeTransform(yaml, &clock, &buckets, &errors);
  auto b = MakeTransform(yaml, &clock, &buckets, &errors);
  auto c = MakeTransform(yaml, &clock, &buckets, &errors);
  ASSERT_TRUE(a && b && c) << errors;
  ASSERT_EQ(a->ShardedAs(), Transform::Sharding::kKeyed);
  auto feed = [](Transform& t, int key, int v) {
    Batch batch = MakeBatch({"{\"k\":\"k" + std::to_string(key) + "\",\"v\":" + std::to_string(v) +
                             "}"});
    EXPECT_TRUE(t.Process(&batch).ok());
    return FieldsOf(batch.messages[0]);
  };
  for (int i = 0; i < 40; ++i) feed(*a, i % 20, i);
  std::string empty, full;
  b->SaveState(&empty);  // b checkpoints from here on
  a->SaveState(&full);
  std::vector<std::string> slices;
  ASSERT_TRUE(
      SplitStateChunk(KeyedState::kRollingWindow, full, Partitioner::kCrc32, 2, &slices).ok());
  auto in1 = [](const std::string& k) { return PartitionOf(Partitioner::kCrc32, k, 2) == 1; };
  ASSERT_TRUE(b->ReplaceKeys(in1, {slices[1]}).ok());
  ASSERT_TRUE(a->ReplaceKeys(in1, {}).ok());
  EXPECT_TRUE(b->StateChanged());
  // The delta b writes next carries the keys it took.
  std::string delta, b_full, c_full;
  ASSERT_TRUE(b->SaveDelta(&delta));
  ASSERT_TRUE(c->RestoreState(empty).ok());
  ASSERT_TRUE(c->ApplyDelta(delta).ok());
  b->SaveState(&b_full);
  c->SaveState(&c_full);
  EXPECT_EQ(b_full, c_full);
  int moved = 0;
  for (int key = 0; key < 20; ++key) {
    const std::string k = "k" + std::to_string(key);
    // Key `key` saw `key` and `key + 20`; a third point fills its window.
    const Json on_b = feed(*b, key, 100);
    const Json on_a = feed(*a, key, 100);
    if (in1(k)) {
      ++moved;
      EXPECT_EQ(on_b["v_count"], 3) << k;
      EXPECT_DOUBLE_EQ(on_b["v_sum"].get<double>(), 2 * key + 20 + 100) << k;
      EXPECT_EQ(on_a["v_count"], 1) << k << " left a";
    } else {
      EXPECT_EQ(on_a["v_count"], 3) << k;
      EXPECT_EQ(on_b["v_count"], 1) << k << " never went to b";
    }
  }
  EXPECT_GT(moved, 0);
  EXPECT_EQ(b->ReplaceKeys(in1, {"\x01"}).code(), Code::kCorruption);
}

// A buffer's held messages move with the partition of their Kafka key: the
// new owner releases them, in the order they came, and the old one drops
// them. In a cluster a message without a key is refused.
TEST(BufferReplaceKeys, AMovedPartitionsHeldMessagesGoWithIt) {
  using testing::FieldsOf;
  using testing::MakeBatch;
  using testing::MakeTransform;
  MemberOnly owner;
  FakeClock clock;
  BucketRegistry buckets;
  std::string errors;
  const std::string yaml = "buffer: {max_messages: 1000}";
  auto a = MakeTransform(yaml, &clock, &buckets, &errors, &owner);
  auto b = MakeTransform(yaml, &clock, &buckets, &errors, &owner);
  auto c = MakeTransform(yaml, &clock, &buckets, &errors, &owner);
  ASSERT_TRUE(a && b && c) << errors;
  ASSERT_EQ(a->ShardedAs(), Transform::Sharding::kMessages);
  for (int i = 0; i < 40; ++i) {
    Batch batch = MakeBatch({"{\"seq\":" + std::to_string(i) + "}"});
    batch.messages[0].set_key("k" + std::to_string(i % 20));
    ASSERT_TRUE(a->Process(&batch).ok());
    EXPECT_TRUE(batch.messages.empty());
  }
  Batch keyless = MakeBatch({R"({"seq":99})"});
  const Status refused = a->Process(&keyless);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("has no key"), std::string::npos) << refused.message();

  std::string full;
  a->SaveState(&full);
  std::vector<std::string> slices;
  ASSERT_TRUE(SplitStateChunk(KeyedState::kBuffer, full, Partitioner::kCrc32, 2, &slices).ok());
  // Merged back, the slices hold every message once.
  std::string merged;
  ASSERT_TRUE(MergeStateChunks(KeyedState::kBuffer, {slices[0], slices[1]}, &merged).ok());
  ASSERT_TRUE(c->RestoreState(merged).ok());
  Batch all;
  c->Drain(&all);
  EXPECT_EQ(all.messages.size(), 40u);

  auto in1 = [](const std::string& k) { return PartitionOf(Partitioner::kCrc32, k, 2) == 1; };
  ASSERT_TRUE(b->ReplaceKeys(in1, {slices[1]}).ok());
  ASSERT_TRUE(a->ReplaceKeys(in1, {}).ok());
  EXPECT_TRUE(b->StateChanged());
  Batch from_a, from_b;
  a->Drain(&from_a);
  b->Drain(&from_b);
  std::set<int64_t> seen;
  int64_t last_b = -1;
  for (auto& m : from_a.messages) {
    EXPECT_FALSE(in1(m.key())) << m.key();
    EXPECT_TRUE(seen.insert(FieldsOf(m)["seq"].get<int64_t>()).second);
  }
  for (auto& m : from_b.messages) {
    EXPECT_TRUE(in1(m.key())) << m.key();
    const int64_t seq = FieldsOf(m)["seq"].get<int64_t>();
    EXPECT_GT(seq, last_b) << "in the order they came";
    last_b = seq;
    EXPECT_TRUE(seen.insert(seq).second);
  }
  EXPECT_GT(from_b.messages.size(), 0u);
  EXPECT_EQ(seen.size(), 40u);
  EXPECT_EQ(b->ReplaceKeys(in1, {"\x01"}).code(), Code::kCorruption);
  EXPECT_EQ(SplitStateChunk(KeyedState::kBuffer, "\x01", Partitioner::kCrc32, 2, &slices).code(),
            Code::kCorruption);
}

}  // namespace
}  // namespace kayak::cluster
