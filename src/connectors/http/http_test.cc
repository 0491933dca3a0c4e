// The http input's body rules, its write-ahead log, and URL parsing.
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <future>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/ndjson.h"
#include "connectors/http/log.h"
#include "connectors/shared/http_client.h"

namespace kayak {
namespace {

TEST(IngestBody, OneValueOrNdjson) {
  std::string payload, error;
  size_t n = 0;
  ASSERT_TRUE(NormalizeIngestBody(" {\"a\":1} \n", &payload, &n, &error));
  EXPECT_EQ(payload, "{\"a\":1}");
  EXPECT_EQ(n, 1u);
  ASSERT_TRUE(NormalizeIngestBody("{\n \"a\": [1,\n 2]\n}", &payload, &n, &error));
  EXPECT_EQ(payload, "{\"a\":[1,2]}");
  ASSERT_TRUE(NormalizeIngestBody("{\"a\":1}\r\n\r\n[2]\n\"s\"", &payload, &n, &error));
  EXPECT_EQ(payload, "{\"a\":1}\n[2]\n\"s\"");
  EXPECT_EQ(n, 3u);
  EXPECT_FALSE(NormalizeIngestBody("{\"a\":1}\n{oops", &payload, &n, &error));
  EXPECT_NE(error.find("line 2"), std::string::npos) << error;
  EXPECT_FALSE(NormalizeIngestBody(" \n ", &payload, &n, &error));
  EXPECT_FALSE(NormalizeIngestBody("\xff\xfe", &payload, &n, &error));
}

// The fast check (simdjson) and nlohmann, which parses messages later, must
// agree: what either refuses that the other takes is decided by nlohmann,
// within the depth limit.
TEST(IngestBody, AcceptsExactlyWhatNlohmannParses) {
  std::string payload, error;
  size_t n = 0;
  const std::string deep = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  for (const std::string& body : {std::string("123456789012345678901234567890"), deep,
                                 std::string("{\"a\":1,\"a\":2}"), std::string("\"\\u0000\"")}) {
    ASSERT_TRUE(nlohmann::json::accept(body)) << body.substr(0, 40);
    EXPECT_TRUE(NormalizeIngestBody(body, &payload, &n, &error)) << body.substr(0, 40);
    EXPECT_EQ(n, 1u);
  }
  for (const std::string& body : {std::string("\"\\ud800\""), std::string("1e400"),
                                 std::string("[1,]"), std::string("\"\x01\""), std::string("01"),
                                 std::string("\"\xed\xa0\x80\""), std::string("nan")}) {
    ASSERT_FALSE(nlohmann::json::accept(body)) << body;
    EXPECT_FALSE(NormalizeIngestBody(body, &payload, &n, &error)) << body;
  }
}

// Nesting is bounded on both paths (simdjson below 64 KiB, nlohmann above),
// at the same depth; brackets inside strings do not count.
TEST(IngestBody, RefusesNestingPastTheLimitOnBothPaths) {
  std::string payload, error;
  size_t n = 0;
  const std::string pad = "\"" + std::string(70000, 'x') + "\"";
  for (const std::string& tail : {std::string(), "," + pad}) {
    auto nest = [&](int d) {
      return std::string(d, '[') + "1" + tail + std::string(d, ']');
    };
    EXPECT_TRUE(NormalizeIngestBody(nest(kMaxJsonDepth), &payload, &n, &error)) << error;
    EXPECT_FALSE(NormalizeIngestBody(nest(kMaxJsonDepth + 1), &payload, &n, &error));
    EXPECT_NE(error.find("more than 128 deep"), std::string::npos) << error;
    EXPECT_FALSE(NormalizeIngestBody(nest(200000), &payload, &n, &error));
  }
  EXPECT_TRUE(JsonDepthWithin("[\"[[[[\\\"[[[\"]", 1));
  EXPECT_FALSE(JsonDepthWithin("[{}]", 1));
  EXPECT_TRUE(JsonDepthWithin("[{}]", 2));
}

TEST(HttpUrl, Parses) {
  auto u = ParseHttpUrl("http://127.0.0.1:8080/a/b?x=1");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, "8080");
  EXPECT_EQ(u->target, "/a/b?x=1");
  u = ParseHttpUrl("http://[::1]/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, "80");
  EXPECT_EQ(ParseHttpUrl("http://h?q")->target, "/?q");
  EXPECT_FALSE(u->https);
  u = ParseHttpUrl("https://h/x");
  ASSERT_TRUE(u.ok());
  EXPECT_TRUE(u->https);
  EXPECT_EQ(u->port, "443");
  EXPECT_EQ(u->target, "/x");
  EXPECT_FALSE(ParseHttpUrl("http://u:p@h/").ok());
  EXPECT_FALSE(ParseHttpUrl("http://h:99999/").ok());
  EXPECT_FALSE(ParseHttpUrl("ftp://h/").ok());
}

class HttpLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            ("kayak-httplog-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<HttpLog> Open(uint64_t restored, uint64_t segment_bytes = 1 << 20) {
    HttpLog::Options o;
    o.dir = dir_;
    o.segment_bytes = segment_bytes;
    auto log = HttpLog::Open(o, restored);
    EXPECT_TRUE(log.ok()) << log.status().message();
    return log.ok() ? std::move(log.value()) : nullptr;
  }

  // Appends and waits for the answer; returns the sequence or 0.
  static uint64_t Append(HttpLog* log, const std::string& payload) {
    std::promise<uint64_t> p;
    EXPECT_TRUE(log->Append(payload, [&](Status st, uint64_t seq) { p.set_value(st.ok() ? seq : 0); }));
    return p.get_future().get();
  }

  static std::vector<LogRecord> ReadAll(HttpLog* log, uint64_t after) {
    std::vector<LogRecord> out;
    for (;;) {
      std::vector<LogRecord> part;
      EXPECT_TRUE(log->Read(after, 1000, 1 << 20, 0, &part).ok());
      if (part.empty()) return out;
      after = part.back().seq;
      for (auto& r : part) out.push_back(std::move(r));
    }
  }

  std::vector<std::string> Segments() {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
  }

  std::string dir_;
};

TEST_F(HttpLogTest, ReplaysAfterTheRestoredSequenceAcrossSegments) {
  {
    auto log = Open(0, 4096);
    for (int i = 1; i <= 100; ++i) EXPECT_EQ(Append(log.get(), std::string(100, 'a' + i % 26)), i);
  }
  EXPECT_GT(Segments().size(), 2u);
  auto log = Open(40, 4096);
  auto recs = ReadAll(log.get(), 40);
  ASSERT_EQ(recs.size(), 60u);
  EXPECT_EQ(recs.front().seq, 41u);
  EXPECT_EQ(recs.back().seq, 100u);
  EXPECT_EQ(recs[0].payload, std::string(100, 'a' + 41 % 26));
  EXPECT_EQ(Append(log.get(), "x"), 101u);
  // Releasing drops the segments wholly at or below the sequence.
  const size_t before = Segments().size();
  log->Release(70);
  EXPECT_LT(Segments().size(), before);
  recs = ReadAll(log.get(), 70);
  ASSERT_FALSE(recs.empty());
  EXPECT_EQ(recs.front().seq, 71u);
}

TEST_F(HttpLogTest, ATornTailIsCutAndNumberingContinues) {
  {
    auto log = Open(0);
    for (int i = 1; i <= 3; ++i) Append(log.get(), "{\"i\":" + std::to_string(i) + "}");
  }
  const std::string seg = Segments().back();
  // The header, then three records of 7 bytes; zeros written ahead follow.
  const uint64_t size = 24 + 3 * (16 + 7);
  EXPECT_GT(std::filesystem::file_size(seg), size);
  {
    const int fd = ::open(seg.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "\x10\0\0\0garbage", 11, size), 11);
    ::close(fd);
  }
  auto log = Open(0);
  EXPECT_EQ(std::filesystem::file_size(seg), size);
  EXPECT_EQ(ReadAll(log.get(), 0).size(), 3u);
  EXPECT_EQ(Append(log.get(), "{}"), 4u);
}

// A damaged record with acknowledged ones after it is corruption: the start
// is refused and the file kept whole, whichever byte of the record flipped;
// in an older segment too.
TEST_F(HttpLogTest, ADamagedRecordBeforeOthersRefusesTheStart) {
  {
    auto log = Open(0);
    for (int i = 1; i <= 3; ++i) Append(log.get(), "{\"i\":" + std::to_string(i) + "}");
  }
  const std::string seg = Segments().back();
  const auto size = std::filesystem::file_size(seg);
  // Record 2 starts at 24 + 23; its length, its checksum, its sequence and its payload.
  for (const uint64_t at : {24u + 23u, 24u + 23u + 5u, 24u + 23u + 9u, 24u + 23u + 18u}) {
    {
      const int fd = ::open(seg.c_str(), O_RDWR);
      ASSERT_GE(fd, 0);
      char c = 0;
      ASSERT_EQ(::pread(fd, &c, 1, static_cast<off_t>(at)), 1);
      c = static_cast<char>(c ^ 0x04);
      ASSERT_EQ(::pwrite(fd, &c, 1, static_cast<off_t>(at)), 1);
      HttpLog::Options o;
      o.dir = dir_;
      auto log = HttpLog::Open(o, 0);
      ASSERT_FALSE(log.ok()) << "a flipped bit at " << at;
      EXPECT_EQ(log.status().code(), Code::kCorruption);
      EXPECT_NE(log.status().message().find("damaged"), std::string::npos);
      EXPECT_EQ(std::filesystem::file_size(seg), size);
      c = static_cast<char>(c ^ 0x04);  // mended for the next byte
      ASSERT_EQ(::pwrite(fd, &c, 1, static_cast<off_t>(at)), 1);
      ::close(fd);
    }
  }
  EXPECT_EQ(ReadAll(Open(0).get(), 0).size(), 3u);
}

// Zeros written ahead of the records are not a torn record: the records
// before them are all kept, and the space is cut off at start.
TEST_F(HttpLogTest, SpaceWrittenAheadIsCutQuietly) {
  {
    auto log = Open(0);
    for (int i = 1; i <= 3; ++i) Append(log.get(), "{\"i\":" + std::to_string(i) + "}");
  }
  const std::string seg = Segments().back();
  EXPECT_GE(std::filesystem::file_size(seg), 1u << 20);
  auto log = Open(0);
  EXPECT_EQ(std::filesystem::file_size(seg), 24u + 3 * (16 + 7));
  auto recs = ReadAll(log.get(), 0);
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[2].payload, "{\"i\":3}");
}

// After a failed write the batch's numbers are reused in a new segment; the
// old segment's tail (if it reached the disk) must never be read.
TEST_F(HttpLogTest, ALaterSegmentEndsAnEarlierOne) {
  {
    auto log = Open(0);
    for (int i = 1; i <= 5; ++i) Append(log.get(), "old" + std::to_string(i));
  }
  const std::string other = dir_ + "-other";
  {
    HttpLog::Options o;
    o.dir = other;
    auto log = HttpLog::Open(o, 3);  // numbering starts at 4: segment wal-...04
    ASSERT_TRUE(log.ok());
    Append(log->get(), "new4");
    Append(log->get(), "new5");
  }
  for (const auto& e : std::filesystem::directory_iterator(other)) {
    std::filesystem::copy(e.path(), dir_ + "/" + e.path().filename().string());
  }
  std::filesystem::remove_all(other);
  auto log = Open(0);
  std::vector<std::string> got;
  for (auto& r : ReadAll(log.get(), 0)) got.push_back(r.payload);
  EXPECT_EQ(got, (std::vector<std::string>{"old1", "old2", "old3", "new4", "new5"}));
}

TEST_F(HttpLogTest, NumberingNeverGoesBackBelowTheRestoredSequence) {
  auto log = Open(500);  // every segment was released, the checkpoint says 500
  EXPECT_EQ(Append(log.get(), "{}"), 501u);
}

TEST_F(HttpLogTest, MemoryLogIsBounded) {
  HttpLog::Options o;
  o.max_backlog_bytes = 10;
  auto log = HttpLog::Open(o, 0);
  ASSERT_TRUE(log.ok());
  EXPECT_EQ(Append(log->get(), "12345"), 1u);
  EXPECT_EQ(Append(log->get(), "12345"), 2u);
  EXPECT_FALSE((*log)->Append("1", [](Status, uint64_t) {}));
  std::vector<LogRecord> out;
  ASSERT_TRUE((*log)->Read(0, 1, 100, 0, &out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(Append(log->get(), "1"), 3u);  // reading made room
}

}  // namespace
}  // namespace kayak
