// The s3 client against a real S3 endpoint (moto's S3 server, started by the CTest
// fixture `s3`): a multipart upload round trip, parts uploaded again under the
// same numbers (the last one counts, as the output's restore relies on), HEAD,
// and the errors a bad bucket and a server that is gone give.
#include <gtest/gtest.h>

#include <cstdlib>
#include <unistd.h>
#include <string>

#include "connectors/s3/client.h"
#include "connectors/s3/env_file.h"

namespace kayak::s3 {
namespace {

Endpoint FromEnv() {
  const char* base = std::getenv("KAYAK_SERVERS");
  return base == nullptr ? Endpoint{} : EndpointFromEnvFile(std::string(base) + "/s3/env");
}

class S3ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    e_ = FromEnv();
    ASSERT_FALSE(e_.endpoint.empty()) << "KAYAK_SERVERS/s3/env: run through ctest (fixture s3)";
  }
  Endpoint e_;
};

TEST_F(S3ClientTest, MultipartRoundTripWithAPartUploadedAgain) {
  Client c(e_);
  const std::string key = "t/round trip/" + std::to_string(::getpid()) + ".ndjson";
  std::string id;
  ASSERT_TRUE(c.CreateUpload(key, &id).ok());
  ASSERT_FALSE(id.empty());
  const std::string a(1000, 'a'), b(10, 'b'), b2 = "{\"x\":2}\n";
  std::string e1, e2;
  ASSERT_TRUE(c.UploadPart(key, id, 1, a, &e1).ok());
  ASSERT_TRUE(c.UploadPart(key, id, 2, b, &e2).ok());
  // after a restore: part 2 again, with what the checkpoint held
  ASSERT_TRUE(c.UploadPart(key, id, 2, b2, &e2).ok());
  bool exists = true;
  ASSERT_TRUE(c.Exists(key, &exists).ok());
  EXPECT_FALSE(exists);
  Status st = c.Complete(key, id, {{1, e1}, {2, e2}});
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_TRUE(c.Exists(key, &exists).ok());
  EXPECT_TRUE(exists);
  std::string got;
  ASSERT_TRUE(c.Get(key, &got).ok());
  EXPECT_EQ(got, a + b2);
}

TEST_F(S3ClientTest, ErrorsNameTheirKind) {
  Endpoint bad = e_;
  bad.bucket = "no-such-bucket";
  Client c(bad);
  std::string id;
  Status st = c.CreateUpload("k", &id);
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(st.retryable()) << st.message();
  EXPECT_NE(st.message().find("NoSuchBucket"), std::string::npos) << st.message();
  Endpoint gone = e_;
  gone.endpoint = "http://127.0.0.1:1";
  Client g(gone);
  st = g.Put("k", "x");
  EXPECT_TRUE(st.retryable()) << st.message();
}

}  // namespace
}  // namespace kayak::s3
