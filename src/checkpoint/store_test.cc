// The checkpoint store: commit, recover, fall back from corruption, reuse
// unchanged state, collect garbage.
#include "checkpoint/store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <atomic>
#include <random>
#include <thread>

#include "common/format.h"
#include "state/bucket.h"

namespace kayak::checkpoint {
namespace {

namespace fs = std::filesystem;

// Fingerprints in these tests are written as the engine hands them over,
// already sealed ("k1:..."); the sealing itself is tested on its own.
class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kayak-store-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::map<std::string, RestoredUnit> Recover(uint64_t* max_id = nullptr) {
    Store s(dir_);
    std::map<std::string, RestoredUnit> out;
    uint64_t id = 0;
    EXPECT_TRUE(s.Recover(&out, &id).ok());
    if (max_id != nullptr) *max_id = id;
    return out;
  }
  // Recover on a fresh store; `out` gets what it restored.
  Status RecoverStatus(std::map<std::string, RestoredUnit>* out = nullptr,
                       const std::set<std::string>& discard = {}) {
    Store s(dir_);
    std::map<std::string, RestoredUnit> none;
    uint64_t id = 0;
    return s.Recover(out != nullptr ? out : &none, &id, discard);
  }
  std::vector<std::string> Files() {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().filename() != "KEY") out.push_back(e.path().filename());  // the store's own
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  void FlipByte(const std::string& name, size_t from_end) {
    std::fstream f(dir_ / name, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(0, std::ios::end);
    const auto size = static_cast<size_t>(f.tellg());
    f.seekp(static_cast<std::streamoff>(size - from_end));
    char c;
    f.seekg(static_cast<std::streamoff>(size - from_end));
    f.get(c);
    f.seekp(static_cast<std::streamoff>(size - from_end));
    f.put(static_cast<char>(c ^ 0x5a));
  }
  // A store on the directory, recovered (what it restores is dropped).
  std::unique_ptr<Store> Open() {
    auto s = std::make_unique<Store>(dir_.string());
    std::map<std::string, RestoredUnit> none;
    uint64_t id;
    EXPECT_TRUE(s->Recover(&none, &id).ok());
    return s;
  }
  // What changed in `unit` since its committed chunks.
  static UnitState Delta(std::string unit, std::string fingerprint, std::string data) {
    UnitState u{std::move(unit), std::move(fingerprint), std::move(data)};
    u.delta = true;
    return u;
  }
  // Opens a store and commits `values` of unit "u" as checkpoints 1, 2, ...
  void CommitValues(const std::vector<std::string>& values) {
    Store s(dir_);
    std::map<std::string, RestoredUnit> none;
    uint64_t id;
    ASSERT_TRUE(s.Recover(&none, &id).ok());
    CommitStats st;
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_TRUE(s.Commit("r", i + 1, 1, {{"u", "k1:f", values[i]}}, &st).ok());
    }
  }
  fs::path dir_;
};

TEST(Format, FrameRoundTripAndCorruption) {
  const std::string framed = Frame(FileKind::kChunk, "hello state");
  auto ok = Unframe(FileKind::kChunk, framed);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, "hello state");
  EXPECT_FALSE(Unframe(FileKind::kManifest, framed).ok());  // wrong kind
  for (size_t i = 0; i < framed.size(); ++i) {
    std::string bad = framed;
    bad[i] = static_cast<char>(bad[i] ^ 1);
    EXPECT_FALSE(Unframe(FileKind::kChunk, bad).ok()) << "flipped byte " << i;
  }
  EXPECT_FALSE(Unframe(FileKind::kChunk, framed.substr(0, framed.size() - 1)).ok());
  EXPECT_FALSE(Unframe(FileKind::kChunk, framed + "x").ok());
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);  // the standard check value
  // A header written apart from its payload (the store's chunks) frames it
  // the same, and a file written as the two parts holds both.
  const std::string payload = "hello state";
  EXPECT_EQ(FrameHeader(FileKind::kChunk, payload.size(), Crc32c(payload.data(), payload.size())) +
                payload,
            framed);
  const std::string path = ::testing::TempDir() + "/two-parts";
  ASSERT_TRUE(WriteFileSynced(path, framed.substr(0, 32), payload).ok());
  auto back = ReadWholeFile(path);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, framed);
  std::remove(path.c_str());
}

// RFC 3720 B.4's vectors (lengths past the 8-byte steps of the hardware
// path), and a checksum taken in pieces equals one taken whole.
TEST(Crc32cTest, KnownVectorsAndPieces) {
  std::string zeros(32, '\0'), ones(32, '\xff'), inc(32, '\0');
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<char>(i);
  EXPECT_EQ(Crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(Crc32c(inc.data(), 32), 0x46DD794Eu);
  std::string text;
  for (int i = 0; i < 1000; ++i) text += std::to_string(i * 7919);
  const uint32_t whole = Crc32c(text.data(), text.size());
  for (size_t cut : {0ul, 1ul, 7ul, 8ul, 13ul, 500ul, text.size()}) {
    EXPECT_EQ(Crc32c(text.data() + cut, text.size() - cut, Crc32c(text.data(), cut)), whole)
        << cut;
  }
}

TEST_F(StoreTest, CommitThenRecover) {
  {
    Store s(dir_);
    std::map<std::string, RestoredUnit> none;
    uint64_t id;
    ASSERT_TRUE(s.Recover(&none, &id).ok());
    EXPECT_TRUE(none.empty());
    CommitStats stats;
    ASSERT_TRUE(s.Commit("r", 1, 1000, {{"p.a.input", "k1:fp1", std::string("pos1")},
                                        {"p.a.t0", "k1:fpt", std::string("window")}},
                         &stats)
                    .ok());
    EXPECT_EQ(stats.chunks_written, 2u);
    // Unchanged units are not written again; the new manifest reuses them.
    CommitStats again;
    ASSERT_TRUE(s.Commit("r", 2, 2000, {{"p.a.input", "k1:fp1", std::string("pos2")},
                                        {"p.a.t0", "k1:fpt", std::nullopt}},
                         &again)
                    .ok());
    EXPECT_EQ(again.chunks_written, 1u);
    EXPECT_EQ(again.bytes_reused, 6u);
  }
  uint64_t max_id = 0;
  auto units = Recover(&max_id);
  EXPECT_EQ(max_id, 2u);
  EXPECT_EQ(units["p.a.input"].data, "pos2");
  EXPECT_EQ(units["p.a.t0"].data, "window");
  EXPECT_EQ(units["p.a.t0"].fingerprint, "k1:fpt");
}

// Regions rebuilt while others keep committing: ids grow across the store,
// and ReadLatest gives every region's newest state except the skipped ones.
TEST_F(StoreTest, ReadLatestSkipsRunningRegionsAndIdsGrowAcrossRegions) {
  {
    Store s(dir_);
    CommitStats stats;
    ASSERT_TRUE(s.Commit("a", 7, 1000, {{"p.a.input", "k1:f", std::string("a7")}}, &stats).ok());
  }
  Store s(dir_);
  std::map<std::string, RestoredUnit> first;
  uint64_t max_id = 0;
  ASSERT_TRUE(s.Recover(&first, &max_id).ok());
  EXPECT_EQ(s.NextId(), 8u);
  EXPECT_EQ(s.NextId(), 9u);
  CommitStats stats;
  ASSERT_TRUE(s.Commit("a", 9, 1000, {{"p.a.input", "k1:f", std::string("a9")}}, &stats).ok());
  ASSERT_TRUE(s.Commit("b", 10, 1000, {{"p.b.input", "k1:f", std::string("b10")}}, &stats).ok());
  std::map<std::string, RestoredUnit> latest;
  ASSERT_TRUE(s.ReadLatest({"b"}, &latest).ok());
  ASSERT_EQ(latest.size(), 1u);
  EXPECT_EQ(latest["p.a.input"].data, "a9");
  EXPECT_EQ(latest["p.a.input"].checkpoint_id, 9u);
  // a unit that moved to another region: the newest checkpoint holding it wins
  ASSERT_TRUE(s.Commit("c", 11, 1000, {{"p.a.input", "k1:f", std::string("a11")}}, &stats).ok());
  latest.clear();
  ASSERT_TRUE(s.ReadLatest({}, &latest).ok());
  EXPECT_EQ(latest["p.a.input"].data, "a11");
  EXPECT_EQ(latest["p.b.input"].data, "b10");
  // a chunk that went bad since: the rebuild is refused, as a start would be
  fs::resize_file(dir_ / ChunkName(10, "p.b.input"), 3);
  latest.clear();
  Status st = s.ReadLatest({}, &latest);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("region b"), std::string::npos) << st.message();
}

// Recover on state it cannot read: an error naming the file, every file kept.
TEST_F(StoreTest, CorruptNewestManifestStopsTheStartAndKeepsEveryFile) {
  CommitValues({"one", "two"});
  FlipByte(ManifestName("r", 2), 3);
  const auto before = Files();
  std::map<std::string, RestoredUnit> out;
  Status st = RecoverStatus(&out);
  EXPECT_EQ(st.code(), Code::kCorruption);
  EXPECT_NE(st.message().find(ManifestName("r", 2)), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("--discard-state r"), std::string::npos) << st.message();
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(Files(), before);
}

TEST_F(StoreTest, CorruptChunkStopsTheStart) {
  CommitValues({"one", "two"});
  FlipByte(ChunkName(2, "u"), 1);
  Status st = RecoverStatus();
  EXPECT_EQ(st.code(), Code::kCorruption);
  EXPECT_NE(st.message().find(ChunkName(2, "u")), std::string::npos) << st.message();
}

// A chunk of 1 MiB or more is mapped rather than read: it restores the same
// bytes, outlives the deletion of its file, and a flipped byte or a cut
// file in it still stops the start.
TEST_F(StoreTest, BigChunksAreMappedAndCheckedTheSame) {
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 % 251);
  CommitValues({"small", big});
  {
    auto out = Recover();
    ASSERT_EQ(out["u"].data.size(), big.size());
    EXPECT_TRUE(out["u"].data == big);
    RestoredUnit copy = out["u"];  // a mapping held twice
    fs::remove(dir_ / ChunkName(2, "u"));
    out.clear();
    EXPECT_TRUE(copy.data == big);
  }
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  CommitValues({"small", big});
  FlipByte(ChunkName(2, "u"), 1000);
  Status st = RecoverStatus();
  EXPECT_EQ(st.code(), Code::kCorruption);
  EXPECT_NE(st.message().find(ChunkName(2, "u")), std::string::npos) << st.message();
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  CommitValues({"small", big});
  fs::resize_file(dir_ / ChunkName(2, "u"), (2 << 20) + 7);
  st = RecoverStatus();
  EXPECT_EQ(st.code(), Code::kCorruption);
  EXPECT_NE(st.message().find("truncated"), std::string::npos) << st.message();
}

// Both kept manifests name the chunk of a unit that did not change: one
// flipped byte makes both unusable. Before, the region started empty.
TEST_F(StoreTest, ASharedChunkThatCannotBeReadStopsTheStart) {
  {
    Store s(dir_);
    std::map<std::string, RestoredUnit> none;
    uint64_t id;
    ASSERT_TRUE(s.Recover(&none, &id).ok());
    CommitStats st;
    ASSERT_TRUE(s.Commit("r", 1, 1, {{"u", "k1:f", std::string("same")}, {"v", "k1:f", std::string("a")}},
                         &st).ok());
    ASSERT_TRUE(s.Commit("r", 2, 1, {{"u", "k1:f", std::nullopt}, {"v", "k1:f", std::string("b")}},
                         &st).ok());
  }
  FlipByte(ChunkName(1, "u"), 1);
  const auto before = Files();
  EXPECT_EQ(RecoverStatus().code(), Code::kCorruption);
  EXPECT_EQ(Files(), before);
}

TEST_F(StoreTest, DiscardStateIsTheOperatorsChoice) {
  CommitValues({"one", "two"});
  FlipByte(ChunkName(2, "u"), 1);
  Store s(dir_);
  std::map<std::string, RestoredUnit> out;
  uint64_t id = 0;
  ASSERT_TRUE(s.Recover(&out, &id, {"r"}).ok());
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(id, 2u);  // new checkpoints still number after the discarded ones
  EXPECT_TRUE(Files().empty());
}

TEST_F(StoreTest, AnUnreadableDirectoryStopsTheStart) {
  fs::remove_all(dir_);
  EXPECT_FALSE(RecoverStatus().ok());
}

TEST_F(StoreTest, FallBackToAnUnreadableCheckpointStopsTheStartAndKeepsEveryFile) {
  CommitValues({"v1", "v2"});
  FlipByte(ChunkName(1, "u"), 1);
  Store s(dir_);
  std::map<std::string, RestoredUnit> out;
  uint64_t id = 0;
  ASSERT_TRUE(s.Recover(&out, &id).ok());
  const auto before = Files();
  EXPECT_EQ(s.FallBack("r", &out).code(), Code::kCorruption);
  EXPECT_EQ(Files(), before);
}

TEST_F(StoreTest, FilesNoManifestNamesAreRemovedAtStart) {
  CommitValues({"one"});
  // what a crash in the middle of checkpoint 2 leaves behind
  ASSERT_TRUE(WriteFileSynced((dir_ / ChunkName(2, "u")).string(), "partial").ok());
  ASSERT_TRUE(WriteFileSynced((dir_ / (ManifestName("r", 2) + ".tmp")).string(), "x").ok());
  std::ofstream(dir_ / "LOCK") << "1\n";
  std::ofstream(dir_ / "notes.txt") << "not ours";
  EXPECT_EQ(Recover()["u"].data, "one");
  EXPECT_EQ(Files(), (std::vector<std::string>{"LOCK", ManifestName("r", 1), ChunkName(1, "u"),
                                               "notes.txt"}));
}

TEST_F(StoreTest, OldCheckpointsAreCollected) {
  CommitValues({"v1", "v2", "v3", "v4", "v5"});
  // The newest and the one to fall back to.
  EXPECT_EQ(Files(), (std::vector<std::string>{ManifestName("r", 4), ManifestName("r", 5),
                                               ChunkName(4, "u"), ChunkName(5, "u")}));
}

TEST_F(StoreTest, RecoverKeepsThePreviousCheckpointForAFallBack) {
  CommitValues({"v1", "v2", "v3"});
  {
    Store s(dir_);
    std::map<std::string, RestoredUnit> out;
    uint64_t id = 0;
    ASSERT_TRUE(s.Recover(&out, &id).ok());
    EXPECT_EQ(out["u"].data, "v3");
    EXPECT_EQ(out["u"].region, "r");
    // The one before stays on disk until the newest's fate is known.
    EXPECT_EQ(Files(), (std::vector<std::string>{ManifestName("r", 2), ManifestName("r", 3),
                                                 ChunkName(2, "u"), ChunkName(3, "u")}));
    ASSERT_TRUE(s.FallBack("r", &out).ok());
    EXPECT_EQ(out["u"].data, "v2");
    EXPECT_EQ(out["u"].checkpoint_id, 2u);
    // Checkpoint 3 is gone, so a restart before the next commit does not pick it.
    EXPECT_EQ(Files(), (std::vector<std::string>{ManifestName("r", 2), ChunkName(2, "u")}));
    // An unchanged unit in the next commit refers to the fallen-back-to chunk.
    CommitStats st;
    ASSERT_TRUE(s.Commit("r", 4, 1, {{"u", "k1:f", std::nullopt}}, &st).ok());
    EXPECT_EQ(st.bytes_reused, 2u);
  }
  EXPECT_EQ(Recover()["u"].data, "v2");
}

TEST_F(StoreTest, FallBackWithNothingBeforeTakesTheRegionOut) {
  CommitValues({"v1"});
  Store s(dir_);
  std::map<std::string, RestoredUnit> out;
  uint64_t id = 0;
  ASSERT_TRUE(s.Recover(&out, &id).ok());
  ASSERT_TRUE(s.FallBack("r", &out).ok());
  EXPECT_EQ(out.count("u"), 0u);
  EXPECT_TRUE(Files().empty());
}

// A unit's chain: a full chunk, then deltas, each naming the chain before
// it; recovery reads them in order; a full chunk starts a new chain and the
// old one is collected once no kept manifest names it.
TEST_F(StoreTest, DeltaChainsAreRecoveredInOrderAndCollected) {
  {
    auto s = Open();
    CommitStats st;
    ASSERT_TRUE(s->Commit("r", 1, 1, {{"u", "k1:f", "base"}}, &st).ok());
    ASSERT_TRUE(s->Commit("r", 2, 1, {Delta("u", "k1:f", "d2")}, &st).ok());
    EXPECT_EQ(st.bytes_reused, 4u);  // the base
    st = {};
    ASSERT_TRUE(s->Commit("r", 3, 1, {Delta("u", "k1:f", "d3"), {"v", "k1:f", "other"}}, &st).ok());
    EXPECT_EQ(st.bytes_reused, 6u);  // the base and d2
    st = {};
    ASSERT_TRUE(s->Commit("r", 4, 1, {{"u", "k1:f", std::nullopt}, {"v", "k1:f", std::nullopt}}, &st)
                    .ok());
    EXPECT_EQ(st.bytes_reused, 8u + 5u);
  }
  auto out = Recover();
  EXPECT_EQ(out["u"].data, "base");
  ASSERT_EQ(out["u"].deltas.size(), 2u);
  EXPECT_EQ(out["u"].deltas[0], "d2");
  EXPECT_EQ(out["u"].deltas[1], "d3");
  EXPECT_EQ(out["u"].checkpoint_id, 4u);
  EXPECT_TRUE(out["v"].deltas.empty());
  // Every chunk of the chain is kept; the newest manifest is version 2.
  for (const char* f : {"chunk-00000000000000000001-u.kyc", "chunk-00000000000000000002-u.kyc",
                        "chunk-00000000000000000003-u.kyc"}) {
    EXPECT_TRUE(fs::exists(dir_ / f)) << f;
  }
  {
    std::ifstream in(dir_ / "MANIFEST-r-00000000000000000004.kym", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    uint32_t version = 0;
    ASSERT_TRUE(Unframe(FileKind::kManifest, bytes, &version).ok());
    EXPECT_EQ(version, kManifestWithDeltasVersion);
  }
  // A full chunk starts again: once both kept manifests name only it, the
  // old chain goes.
  {
    auto s = Open();
    CommitStats st;
    ASSERT_TRUE(s->Commit("r", 5, 1, {{"u", "k1:f", "full"}, {"v", "k1:f", std::nullopt}}, &st).ok());
    ASSERT_TRUE(s->Commit("r", 6, 1, {{"u", "k1:f", std::nullopt}, {"v", "k1:f", std::nullopt}}, &st)
                    .ok());
  }
  out = Recover();
  EXPECT_EQ(out["u"].data, "full");
  EXPECT_TRUE(out["u"].deltas.empty());
  EXPECT_FALSE(fs::exists(dir_ / "chunk-00000000000000000002-u.kyc"));
  EXPECT_FALSE(fs::exists(dir_ / "chunk-00000000000000000001-u.kyc"));
}

// A manifest keeps no option value: fingerprints are keyed hashes under the
// directory's own key, which every later start reads back; a manifest written
// before (the canonical text itself) is sealed as it is read, so a component
// whose text is unchanged keeps its state.
TEST_F(StoreTest, FingerprintsAreSealedWithTheDirectorysKey) {
  const std::string plain = "s3:{\"bucket\":\"b\",}";
  std::string sealed;
  {
    auto s = Open();
    sealed = s->Seal(plain);
    EXPECT_EQ(sealed.rfind("k1:", 0), 0u);
    EXPECT_EQ(sealed.size(), 3u + 64u);
    EXPECT_NE(sealed, s->Seal(plain + " "));
    CommitStats st;
    ASSERT_TRUE(s->Commit("r", 1, 1, {{"u", plain, std::string("legacy")}}, &st).ok());
  }
  std::map<std::string, RestoredUnit> out;
  ASSERT_TRUE(RecoverStatus(&out).ok());
  EXPECT_EQ(out["u"].fingerprint, sealed);  // the same key: the same seal
  EXPECT_EQ(out["u"].data, "legacy");
  {
    auto s = Open();
    CommitStats st;
    ASSERT_TRUE(s->Commit("r", 2, 1, {{"u", s->Seal(plain), std::string("new")}}, &st).ok());
  }
  std::ifstream f(dir_ / ManifestName("r", 2), std::ios::binary);
  const std::string manifest((std::istreambuf_iterator<char>(f)), {});
  EXPECT_EQ(manifest.find("bucket"), std::string::npos);
  EXPECT_NE(manifest.find(sealed), std::string::npos);
  // Another directory, another key.
  const fs::path other = dir_.string() + "-other";
  fs::create_directories(other);
  Store s2(other.string());
  std::map<std::string, RestoredUnit> none;
  uint64_t id = 0;
  ASSERT_TRUE(s2.Recover(&none, &id).ok());
  EXPECT_NE(s2.Seal(plain), sealed);
  fs::remove_all(other);
}

// A key that cannot be read stops the start (every fingerprint hangs on it).
TEST_F(StoreTest, AKeyThatCannotBeReadStopsTheStart) {
  Open();
  FlipByte("KEY", 3);
  const Status st = RecoverStatus();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("KEY"), std::string::npos) << st.message();
}

// A delta needs a committed chain of the same fingerprint.
TEST_F(StoreTest, ADeltaWithoutItsChainIsRefused) {
  auto s = Open();
  CommitStats st;
  EXPECT_FALSE(s->Commit("r", 1, 1, {Delta("u", "k1:f", "d")}, &st).ok());
  ASSERT_TRUE(s->Commit("r", 2, 1, {{"u", "k1:f", "base"}}, &st).ok());
  EXPECT_FALSE(s->Commit("r", 3, 1, {Delta("u", "k1:g", "d")}, &st).ok());  // its config changed
}

// A torn or missing piece of a chain (the base or a delta) stops the start,
// naming the file, and nothing is deleted.
TEST_F(StoreTest, ATornDeltaOrAMissingBaseStopsTheStart) {
  auto make = [&] {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    auto s = Open();
    CommitStats st;
    ASSERT_TRUE(s->Commit("r", 1, 1, {{"u", "k1:f", "base"}}, &st).ok());
    ASSERT_TRUE(s->Commit("r", 2, 1, {Delta("u", "k1:f", "delta two")}, &st).ok());
  };
  make();
  FlipByte("chunk-00000000000000000002-u.kyc", 1);
  auto files = Files();
  Status st = RecoverStatus();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("chunk-00000000000000000002-u.kyc"), std::string::npos)
      << st.message();
  EXPECT_EQ(Files(), files);
  make();
  {
    // torn: the file cut short
    const auto p = dir_ / "chunk-00000000000000000002-u.kyc";
    fs::resize_file(p, fs::file_size(p) - 3);
  }
  EXPECT_FALSE(RecoverStatus().ok());
  make();
  fs::remove(dir_ / "chunk-00000000000000000001-u.kyc");
  files = Files();
  st = RecoverStatus();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("chunk-00000000000000000001-u.kyc"), std::string::npos)
      << st.message();
  EXPECT_EQ(Files(), files);
}

TEST(BucketState, RoundTripKeepsLastWritesSoDowntimeCounts) {
  Bucket b("b", 10'000);
  ASSERT_TRUE(b.Update("old", 1000, [](Json& v, bool) { v = 1; return Status::Ok(); }).ok());
  ASSERT_TRUE(b.Update("new", 9000, [](Json& v, bool) { v = Json{{"x", 2}}; return Status::Ok(); }).ok());
  EXPECT_TRUE(b.StateChanged());
  std::string saved;
  b.SaveState(&saved);
  EXPECT_FALSE(b.StateChanged());
  Bucket c("b", 10'000);
  ASSERT_TRUE(c.RestoreState(saved).ok());
  EXPECT_EQ(c.Get("new", 9000)->value, (Json{{"x", 2}}));
  // 12 s after "old" was written, although the restore happened just now.
  EXPECT_FALSE(c.Get("old", 12'000).has_value());
  EXPECT_TRUE(c.Get("new", 12'000).has_value());
  EXPECT_FALSE(c.RestoreState(saved.substr(0, saved.size() - 1)).ok());
}

TEST(BucketMemory, ChargesEntriesAsTheyComeAndGo) {
  MemoryBudget budget(0);
  MemoryAccount account(&budget, "", "bucket:b", "state");
  Bucket b("b", 10'000);
  b.ChargeTo(&account);
  const std::string text(200, 'v');
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(b.Update("a key long enough to have a block " + std::to_string(i), 1000,
                         [&](Json& v, bool) {
                           v = Json{{"text", text}, {"n", i}};
                           return Status::Ok();
                         })
                    .ok());
  }
  // Each entry holds at least its 200-byte string and its long key.
  const int64_t full = account.bytes();
  EXPECT_EQ(full, static_cast<int64_t>(b.MemoryBytes()));
  EXPECT_GT(full, 1000 * (200 + 35));
  EXPECT_LT(full, 1000 * 2000);
  // A value that shrinks gives its bytes back.
  ASSERT_TRUE(b.Update("a key long enough to have a block 0", 1000, [](Json& v, bool) {
                 v = 1;
                 return Status::Ok();
               }).ok());
  EXPECT_LT(account.bytes(), full - 200);
  // A restore charges what it brings, as the writes did.
  std::string saved;
  b.SaveState(&saved);
  MemoryAccount restored_account(&budget, "", "bucket:c", "state");
  Bucket c("c", 10'000);
  c.ChargeTo(&restored_account);
  ASSERT_TRUE(c.RestoreState(saved).ok());
  EXPECT_GT(restored_account.bytes(), full * 9 / 10);
  EXPECT_LT(restored_account.bytes(), full * 11 / 10);
  // Expired, every entry is given back.
  b.Expire(20'000);
  EXPECT_EQ(b.Size(), 0u);
  // Only the table is left (it keeps its size): a few bytes a key it had.
  EXPECT_LT(account.bytes(), 32 * 1000);
}

// A bucket's committed chain as the checkpointer keeps it in the store: a
// full chunk and deltas, compacted into a full chunk on demand.
struct TestChain {
  std::string base;
  std::vector<std::string> deltas;
  void Apply(std::vector<Bucket::Change>&& changes) {
    std::vector<std::vector<Bucket::Change>> lists;
    lists.push_back(std::move(changes));
    if (base.empty()) {
      ASSERT_TRUE(Bucket::Compact({}, {}, lists, &base).ok());
      return;
    }
    deltas.emplace_back();
    Bucket::EncodeDelta(lists, &deltas.back());
  }
  void Encode(std::string* out) const {
    std::vector<std::string_view> d(deltas.begin(), deltas.end());
    ASSERT_TRUE(Bucket::Compact(base, d, {}, out).ok());
  }
};

// What a barrier takes from a bucket (only its changes), kept as a chain of
// deltas and compacted, encodes the same bytes as a full save of the bucket.
TEST(BucketChainTest, ChangesCompactedWithTheChainEncodeLikeAFullSave) {
  Bucket b("b", 10'000);
  b.TrackChanges();
  TestChain snap;
  auto set = [&](const std::string& k, int64_t t, Json v) {
    ASSERT_TRUE(b.Update(k, t, [&](Json& x, bool) { x = v; return Status::Ok(); }).ok());
  };
  for (int i = 0; i < 100; ++i) set("k" + std::to_string(i), 1000 + i, i);
  std::vector<Bucket::Change> changes;
  b.TakeChanges(/*all=*/true, &changes);
  EXPECT_EQ(changes.size(), 100u);
  snap.Apply(std::move(changes));
  auto same = [&] {
    std::string full, enc;
    b.SaveState(&full);
    snap.Encode(&enc);
    EXPECT_EQ(enc, full);
  };
  same();
  // Rewrites move keys to the end of the write order; expiry drops the
  // oldest; a dropped key written again comes back.
  set("k5", 20'000, "five");
  set("k7", 20'001, Json{{"x", 1}});
  set("k5", 20'002, 55);
  b.Expire(20'050);  // every key idle 10 s or more: all but the rewritten k5, k7
  set("k3", 20'100, 3.5);
  changes.clear();
  b.TakeChanges(/*all=*/false, &changes);
  // Each touched key once: k5, k7, k3, and the dropped ones.
  size_t dropped = 0, written = 0;
  for (const auto& c : changes) (c.dropped ? dropped : written)++;
  EXPECT_EQ(written, 3u);
  EXPECT_EQ(dropped, 97u);  // all but k3 (written again), k5, k7
  EXPECT_FALSE(b.StateChanged());
  snap.Apply(std::move(changes));
  same();
  // Nothing changed: nothing taken.
  changes.clear();
  b.TakeChanges(false, &changes);
  EXPECT_TRUE(changes.empty());
}

// The first checkpoint after a start: the changes over the full chunk of an
// empty bucket (no table of their keys is built for that) compact to a full
// save, whichever lists they came in.
TEST(BucketChainTest, ChangesOverTheChunkOfAnEmptyBucketCompactLikeAFullSave) {
  Bucket b("b", 10'000);
  std::string empty;
  b.SaveState(&empty);
  b.TrackChanges();
  auto set = [&](int k, int64_t t) {
    ASSERT_TRUE(b.Update("k" + std::to_string(k), t, [&](Json& x, bool) {
                   x = Json{{"n", k}, {"t", t}};
                   return Status::Ok();
                 }).ok());
  };
  std::vector<std::vector<Bucket::Change>> lists(2);
  for (int i = 0; i < 300; ++i) set(i % 120, 1000 + i);
  b.TakeChanges(/*all=*/false, &lists[0]);
  for (int i = 0; i < 50; ++i) set(i % 30, 2000 + i);  // rewrites, in a second list
  b.Expire(10'990);  // drops keys not written since 990 (none) ...
  b.Expire(11'250);  // ... and those not written since 1250: some of the first list's
  b.TakeChanges(false, &lists[1]);
  std::string want, got;
  b.SaveState(&want);
  ASSERT_TRUE(Bucket::Compact(empty, {}, lists, &got).ok());
  EXPECT_EQ(got, want);
  lists.pop_back();  // the first list alone is not the bucket
  got.clear();
  ASSERT_TRUE(Bucket::Compact(empty, {}, lists, &got).ok());
  EXPECT_NE(got, want);
}

// A full chunk and the deltas of the checkpoints after it restore the same
// bucket (entries, values, last writes and write order) as a full save,
// whatever was written, rewritten, expired and written again in between,
// and whichever checkpoints the changes were taken at (several barriers'
// changes in one delta, as after an abandoned checkpoint).
TEST(BucketDeltaTest, AFullChunkAndItsDeltasRestoreTheBucket) {
  std::mt19937 rng(7);
  Bucket b("b", 5'000);
  b.TrackChanges();
  int64_t now = 1000;
  auto write = [&](int k) {
    const Json v = (rng() % 3 == 0) ? Json{{"n", k}} : Json(static_cast<int64_t>(rng() % 100));
    ASSERT_TRUE(b.Update("k" + std::to_string(k), now, [&](Json& x, bool) {
                   x = v;
                   return Status::Ok();
                 }).ok());
  };
  for (int k = 0; k < 500; ++k) write(k);
  std::vector<std::vector<Bucket::Change>> all(1);
  b.TakeChanges(/*all=*/true, &all[0]);
  std::string base;
  ASSERT_TRUE(Bucket::Compact({}, {}, all, &base).ok());
  std::vector<std::string> deltas;
  std::vector<std::vector<Bucket::Change>> pending;
  for (int round = 0; round < 40; ++round) {
    for (int i = 0; i < 30; ++i) {
      now += static_cast<int64_t>(rng() % 20);
      write(static_cast<int>(rng() % 700));  // rewrites and new keys
    }
    if (round % 7 == 3) b.Expire(now);  // drops the idle ones
    pending.emplace_back();
    b.TakeChanges(false, &pending.back());
    {
      // A compaction of the chain and the changes not yet in it is a full
      // save of the bucket.
      std::vector<std::string_view> chain(deltas.begin(), deltas.end());
      std::string compacted, want;
      ASSERT_TRUE(Bucket::Compact(base, chain, pending, &compacted).ok());
      b.SaveState(&want);
      ASSERT_EQ(compacted, want) << "compaction after round " << round;
    }
    if (round % 5 == 2) continue;  // these changes go with the next delta
    std::string delta;
    Bucket::EncodeDelta(pending, &delta);
    deltas.push_back(delta);
    pending.clear();
    Bucket r("b", 5'000);
    ASSERT_TRUE(r.RestoreState(base).ok());
    for (const auto& d : deltas) ASSERT_TRUE(r.ApplyDelta(d).ok());
    std::string want, got;
    b.SaveState(&want);
    r.SaveState(&got);
    ASSERT_EQ(got, want) << "after round " << round;
  }
  // A delta cut short or with bytes after it is refused.
  Bucket r("b", 5'000);
  ASSERT_TRUE(r.RestoreState(base).ok());
  EXPECT_FALSE(r.ApplyDelta(deltas[0].substr(0, deltas[0].size() - 1)).ok());
  EXPECT_FALSE(r.ApplyDelta(deltas[0] + "x").ok());
  // So is a chain cut short, with bytes after it, or deltas without a base.
  std::string out;
  EXPECT_FALSE(Bucket::Compact(base.substr(0, base.size() - 1), {}, {}, &out).ok());
  EXPECT_FALSE(Bucket::Compact(base, {deltas[0] + "x"}, {}, &out).ok());
  EXPECT_FALSE(Bucket::Compact({}, {deltas[0]}, {}, &out).ok());
}

// At max_keys a new key is refused (counted, nothing written) or evicts the
// oldest write; writes of keys it holds go on. An eviction is a drop, so a
// delta over it restores the same bucket.
TEST(BucketKeyLimitTest, RefusesOrEvictsAndDeltasCarryTheEvictions) {
  auto set = [](Bucket& b, int k, int64_t now) {
    return b.Update("k" + std::to_string(k), now, [&](Json& x, bool) {
      x = k;
      return Status::Ok();
    });
  };
  Bucket refuse("r", 0);
  refuse.SetKeyLimit(3, /*evict_oldest=*/false);
  for (int k = 0; k < 5; ++k) ASSERT_TRUE(set(refuse, k, 10 + k).ok());
  EXPECT_EQ(refuse.Size(), 3u);
  EXPECT_EQ(refuse.refused_keys(), 2u);
  EXPECT_FALSE(refuse.Get("k4", 100).has_value());
  ASSERT_TRUE(set(refuse, 1, 100).ok());  // a key it holds: written
  EXPECT_EQ(refuse.refused_keys(), 2u);

  Bucket evict("e", 0);
  evict.SetKeyLimit(3, /*evict_oldest=*/true);
  evict.TrackChanges();
  for (int k = 0; k < 3; ++k) ASSERT_TRUE(set(evict, k, 10 + k).ok());
  std::vector<std::vector<Bucket::Change>> all(1);
  evict.TakeChanges(true, &all[0]);
  std::string base;
  ASSERT_TRUE(Bucket::Compact({}, {}, all, &base).ok());
  ASSERT_TRUE(set(evict, 0, 20).ok());  // k0 is now the newest write
  ASSERT_TRUE(set(evict, 7, 21).ok());  // evicts k1, the oldest
  EXPECT_EQ(evict.Size(), 3u);
  EXPECT_EQ(evict.evicted_keys(), 1u);
  EXPECT_FALSE(evict.Get("k1", 100).has_value());
  EXPECT_TRUE(evict.Get("k0", 100).has_value());
  std::vector<std::vector<Bucket::Change>> changes(1);
  evict.TakeChanges(false, &changes[0]);
  std::string delta;
  Bucket::EncodeDelta(changes, &delta);
  Bucket r("e", 0);
  ASSERT_TRUE(r.RestoreState(base).ok());
  ASSERT_TRUE(r.ApplyDelta(delta).ok());
  std::string want, got;
  evict.SaveState(&want);
  r.SaveState(&got);
  EXPECT_EQ(got, want);
}

// The barrier seals a bucket's changes in constant time and writers go on;
// what is collected later is the bucket as it was at the seal, whatever was
// written, rewritten, dropped and written again in between (copy on write),
// also when a seal is not collected before the next one (an abandoned
// checkpoint).
TEST(BucketSealTest, CollectedChangesAreTheBucketAsItWasAtTheSeal) {
  std::mt19937 rng(11);
  Bucket b("b", 3'000);
  b.TrackChanges();
  int64_t now = 1000;
  auto churn = [&](int n) {
    for (int i = 0; i < n; ++i) {
      now += static_cast<int64_t>(rng() % 10);
      const int k = static_cast<int>(rng() % 300);
      const Json v = static_cast<int64_t>(rng() % 1000);
      ASSERT_TRUE(b.Update("k" + std::to_string(k), now, [&](Json& x, bool) {
                     x = v;
                     return Status::Ok();
                   }).ok());
      if (i % 50 == 49) b.Expire(now);
    }
  };
  churn(400);
  TestChain snap;
  std::vector<Bucket::Change> all;
  b.TakeChanges(/*all=*/true, &all);
  snap.Apply(std::move(all));
  for (int round = 0; round < 60; ++round) {
    churn(static_cast<int>(rng() % 200));
    b.Seal();
    std::string at_seal;
    b.SaveState(&at_seal);
    EXPECT_FALSE(b.StateChanged());
    churn(static_cast<int>(rng() % 200));  // after the barrier, before the commit
    if (round % 4 == 1) continue;          // not collected: the next seal takes it first
    std::vector<Bucket::Change> changes;
    b.CollectSealed(&changes);
    EXPECT_FALSE(b.HasSeal());
    snap.Apply(std::move(changes));
    std::string got;
    snap.Encode(&got);
    ASSERT_EQ(got, at_seal) << "round " << round;
  }
}

// Writers go on while barriers seal and the coordinator collects: no change
// is lost between seals (the copy kept after its last seal is the bucket),
// and TSan sees the locking (make test-tsan).
TEST(BucketSealTest, WritersRacingSealsAndCollectionsLoseNothing) {
  Bucket b("b", 2'000);
  b.TrackChanges();
  TestChain snap;
  std::atomic<bool> done{false};
  std::atomic<int> sealed{0};
  std::thread writer([&] {
    std::mt19937 rng(5);
    int64_t now = 1000;
    for (int i = 0; i < 60'000; ++i) {
      // Halfway, the writer waits for seals: some happen while it writes,
      // however the threads are scheduled.
      while (i == 30'000 && sealed.load() < 3) std::this_thread::yield();
      now += static_cast<int64_t>(rng() % 3);
      const int64_t v = static_cast<int64_t>(rng() % 1000);
      (void)b.Update("k" + std::to_string(rng() % 2000), now, [&](Json& x, bool) {
        x = v;
        return Status::Ok();
      });
      if (i % 500 == 0) b.Expire(now);
    }
    done = true;
  });
  int seals = 0;
  for (int round = 0; !done || round < 2; ++round) {
    b.Seal();
    ++seals;
    sealed.store(seals);
    if (round % 3 == 2) continue;  // sealed again before it is collected
    std::vector<Bucket::Change> changes;
    b.CollectSealed(&changes);
    snap.Apply(std::move(changes));
  }
  writer.join();
  std::vector<Bucket::Change> last;
  b.TakeChanges(false, &last);
  snap.Apply(std::move(last));
  std::string want, got;
  b.SaveState(&want);
  snap.Encode(&got);
  EXPECT_EQ(got, want);
  EXPECT_GT(seals, 2);
}

// The coordinator collects a seal without the bucket's lock while a writer
// rewrites and drops the very entries it is copying: each sealed entry is
// the collector's or the writer's, whichever claims it first, and what is
// collected is still exactly the bucket at the seal.
TEST(BucketSealTest, CollectingWhileWritersChangeTheSealedEntriesGivesTheSeal) {
  constexpr int kKeys = 20'000;
  Bucket b("b", 500);
  b.TrackChanges();
  TestChain snap;
  std::mutex gate;  // held around each write; the test holds it to seal
  std::atomic<bool> done{false};
  std::atomic<int64_t> writes{0};
  std::atomic<int64_t> clock{1000};
  std::thread writer([&] {
    std::mt19937 rng(17);
    while (!done.load()) {
      std::lock_guard g(gate);
      const int64_t now = clock.fetch_add(static_cast<int64_t>(rng() % 2));
      const int64_t v = static_cast<int64_t>(rng() % 100'000);
      (void)b.Update("k" + std::to_string(rng() % kKeys), now, [&](Json& x, bool existed) {
        x = existed && x.is_number_integer() ? Json(x.get<int64_t>() + v) : Json(v);
        return Status::Ok();
      });
      if (rng() % 1000 == 0) b.Expire(now);  // drops sealed entries too
      writes.fetch_add(1);
    }
  });
  int64_t during = 0;
  // Twelve rounds, and more until the writer has run during a collection at
  // least once (a loaded machine may not schedule it in the first ones).
  for (int round = 0; round < 12 || (during == 0 && round < 400); ++round) {
    // Some writes before each seal, so every seal holds entries.
    for (const int64_t want = writes.load() + 5'000; writes.load() < want;) std::this_thread::yield();
    std::string at_seal;
    {
      std::lock_guard g(gate);
      b.Seal();
      b.SaveState(&at_seal);
    }
    const int64_t before = writes.load();
    std::vector<Bucket::Change> changes;
    b.CollectSealed(&changes);  // the writer goes on meanwhile
    during += writes.load() - before;
    snap.Apply(std::move(changes));
    std::string got;
    snap.Encode(&got);
    ASSERT_EQ(got, at_seal) << "round " << round;
  }
  done = true;
  writer.join();
  // The writer did run while seals were being collected.
  EXPECT_GT(during, 0);
}

TEST(BucketState, RestoreReadsNumbersAsTheParserWould) {
  Bucket b("b", 0);
  const std::vector<std::string> values = {"5",    "-3",   "0",      "-0",   "2.5",
                                           "1e300", "-1.25E-7", "18446744073709551615",
                                           "123456789012345678901234", "\"s\"", "{\"a\":[1,2]}",
                                           "true", "null"};
  for (size_t i = 0; i < values.size(); ++i) {
    const Json v = Json::parse(values[i]);
    ASSERT_TRUE(b.Update("k" + std::to_string(i), 1, [&](Json& x, bool) {
                   x = v;
                   return Status::Ok();
                 }).ok());
  }
  std::string saved;
  b.SaveState(&saved);
  Bucket c("c", 0);
  ASSERT_TRUE(c.RestoreState(saved).ok());
  for (size_t i = 0; i < values.size(); ++i) {
    // What the parser makes of the saved text ("-0" is saved as 0).
    const Json want = Json::parse(Json::parse(values[i]).dump());
    const Json got = c.Get("k" + std::to_string(i), 1)->value;
    EXPECT_EQ(got.type(), want.type()) << values[i];
    EXPECT_EQ(got.dump(), want.dump()) << values[i];
  }
}

}  // namespace
}  // namespace kayak::checkpoint
