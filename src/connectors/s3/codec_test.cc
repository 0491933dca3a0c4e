#include "connectors/s3/codec.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <string>

namespace kayak::s3 {
namespace {

std::string Rows(int from, int n) {
  std::string s;
  for (int i = from; i < from + n; ++i) s += "{\"seq\":" + std::to_string(i) + ",\"v\":\"abc\"}\n";
  return s;
}

// The raw size of `stream` fed in chunks of `chunk` bytes.
Status Count(Compression c, const std::string& stream, size_t chunk, uint64_t* raw) {
  auto counter = MakeRawCounter(c);
  for (size_t i = 0; i < stream.size(); i += chunk) {
    KAYAK_RETURN_IF_ERROR(counter->Feed(std::string_view(stream).substr(i, chunk)));
  }
  return counter->Finish(raw);
}

class CodecTest : public testing::TestWithParam<Compression> {};

TEST_P(CodecTest, PartsConcatenateIntoOneStreamWhoseRawSizeIsCounted) {
  auto comp = MakeCompressor(GetParam());
  ASSERT_NE(comp, nullptr);
  const std::string a = Rows(0, 5000), b = Rows(5000, 3), c = Rows(5003, 20000);
  std::string pa, pb, pc;
  ASSERT_TRUE(comp->Compress(a, &pa).ok());
  ASSERT_TRUE(comp->Compress(b, &pb).ok());
  ASSERT_TRUE(comp->Compress(c, &pc).ok());
  EXPECT_LT(pa.size(), a.size() / 3);
  const std::string object = pa + pb + pc;
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{4096}, object.size()}) {
    uint64_t raw = 0;
    Status st = Count(GetParam(), object, chunk, &raw);
    ASSERT_TRUE(st.ok()) << chunk << ": " << st.message();
    EXPECT_EQ(raw, a.size() + b.size() + c.size()) << chunk;
  }
}

TEST_P(CodecTest, EqualRowsGiveEqualBytes) {
  auto one = MakeCompressor(GetParam()), two = MakeCompressor(GetParam());
  const std::string rows = Rows(0, 3000);
  std::string x, y, z;
  ASSERT_TRUE(one->Compress(Rows(9, 100), &x).ok());  // a context used before
  ASSERT_TRUE(one->Compress(rows, &x).ok());
  ASSERT_TRUE(two->Compress(rows, &y).ok());
  ASSERT_TRUE(one->Compress(rows, &z).ok());
  EXPECT_EQ(x, y);
  EXPECT_EQ(x, z);
}

TEST_P(CodecTest, AnEmptyPartIsAValidMember) {
  std::string p;
  ASSERT_TRUE(MakeCompressor(GetParam())->Compress("", &p).ok());
  uint64_t raw = 1;
  Status st = Count(GetParam(), p, 3, &raw);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(raw, 0u);
}

TEST_P(CodecTest, AStreamCutShortOrDamagedIsCorruption) {
  std::string p;
  ASSERT_TRUE(MakeCompressor(GetParam())->Compress(Rows(0, 2000), &p).ok());
  uint64_t raw = 0;
  EXPECT_EQ(Count(GetParam(), p.substr(0, p.size() - 5), 100, &raw).code(), Code::kCorruption);
  EXPECT_EQ(Count(GetParam(), "this is not compressed at all", 100, &raw).code(),
            Code::kCorruption);
}

INSTANTIATE_TEST_SUITE_P(Both, CodecTest, testing::Values(Compression::kGzip, Compression::kZstd),
                         [](const auto& info) {
                           return info.param == Compression::kGzip ? "gzip" : "zstd";
                         });

TEST(CodecTest, GzipPartsAreReadableByZlibAsOneFile) {
  auto comp = MakeCompressor(Compression::kGzip);
  std::string pa, pb;
  ASSERT_TRUE(comp->Compress("first\n", &pa).ok());
  ASSERT_TRUE(comp->Compress("second\n", &pb).ok());
  EXPECT_EQ(static_cast<unsigned char>(pa[0]), 0x1f);  // the gzip magic
  EXPECT_EQ(static_cast<unsigned char>(pa[1]), 0x8b);
  // zlib's uncompress reads one member; a second call the next.
  z_stream z{};
  ASSERT_EQ(inflateInit2(&z, 15 + 16), Z_OK);
  std::string both = pa + pb;
  char out[64];
  z.next_in = reinterpret_cast<Bytef*>(both.data());
  z.avail_in = static_cast<uInt>(both.size());
  z.next_out = reinterpret_cast<Bytef*>(out);
  z.avail_out = sizeof(out);
  ASSERT_EQ(inflate(&z, Z_FINISH), Z_STREAM_END);
  EXPECT_EQ(std::string(out, sizeof(out) - z.avail_out), "first\n");
  inflateEnd(&z);
}

TEST(CodecTest, NamesParse) {
  Compression c;
  EXPECT_TRUE(ParseCompression("zstd", &c));
  EXPECT_EQ(c, Compression::kZstd);
  EXPECT_TRUE(ParseCompression("none", &c));
  EXPECT_EQ(c, Compression::kNone);
  EXPECT_FALSE(ParseCompression("lz4", &c));
  EXPECT_EQ(MakeCompressor(Compression::kNone), nullptr);
}

}  // namespace
}  // namespace kayak::s3
