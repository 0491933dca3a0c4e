#include "common/base64.h"

#include <gtest/gtest.h>

namespace kayak {
namespace {

// RFC 4648, section 10.
TEST(Base64, RfcVectors) {
  const char* want[][2] = {{"", ""},          {"f", "Zg=="},         {"fo", "Zm8="},
                           {"foo", "Zm9v"},   {"foob", "Zm9vYg=="},  {"fooba", "Zm9vYmE="},
                           {"foobar", "Zm9vYmFy"}};
  for (const auto& [in, out] : want) {
    std::string got;
    AppendBase64(in, &got);
    EXPECT_EQ(got, out) << in;
  }
  std::string bytes("\x00\xff\x10", 3), got;
  AppendBase64(bytes, &got);
  EXPECT_EQ(got, "AP8Q");
}

}  // namespace
}  // namespace kayak
