#include "connectors/s3/sigv4.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace kayak::s3 {
namespace {

const std::filesystem::path kSuite = std::filesystem::path(KAYAK_SOURCE_DIR) / "tests/data/sigv4";

std::string Slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out.push_back(static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// request.txt: "METHOD TARGET HTTP/1.1", header lines ("Name:value"; a line
// that starts with a space continues the one before), a blank line, the body.
Request ParseRequest(const std::string& text) {
  Request r;
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  const size_t sp = line.find(' '), last = line.rfind(' ');
  r.method = line.substr(0, sp);
  const std::string target = line.substr(sp + 1, last - sp - 1);
  const size_t q = target.find('?');
  r.path = target.substr(0, q);
  if (q != std::string::npos) {
    std::string_view rest = std::string_view(target).substr(q + 1);
    while (!rest.empty()) {
      const size_t amp = rest.find('&');
      const std::string_view kv = rest.substr(0, amp);
      const size_t eq = kv.find('=');
      r.query.emplace_back(Unescape(kv.substr(0, eq)),
                           eq == std::string_view::npos ? "" : Unescape(kv.substr(eq + 1)));
      rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    }
  }
  while (std::getline(in, line) && !line.empty()) {
    if (line[0] == ' ' || line[0] == '\t') {
      r.headers.back().second += " " + line;
      continue;
    }
    const size_t colon = line.find(':');
    r.headers.emplace_back(line.substr(0, colon), line.substr(colon + 1));
  }
  std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  r.payload_sha256 = Sha256Hex(body);
  return r;
}

TEST(SigV4, PublishedTestSuite) {
  size_t cases = 0;
  for (const auto& dir : std::filesystem::directory_iterator(kSuite)) {
    if (!dir.is_directory()) continue;
    const auto ctx = nlohmann::json::parse(Slurp(dir.path() / "context.json"));
    const Request r = ParseRequest(Slurp(dir.path() / "request.txt"));
    Credentials c{ctx["credentials"]["access_key_id"], ctx["credentials"]["secret_access_key"],
                  ctx["credentials"].value("token", "")};
    if (ctx.value("omit_session_token", false)) c.session_token.clear();  // added after signing
    Options o;
    o.normalize_path = ctx["normalize"];
    o.content_sha256_header = ctx["sign_body"];
    std::string ts = ctx["timestamp"];  // 2015-08-30T12:36:00Z
    std::string amz;
    for (char ch : ts) {
      if (ch != '-' && ch != ':') amz.push_back(ch);
    }
    const Signed s = SignV4(r, c, {ctx["region"], ctx["service"]}, amz, o);
    const std::string name = dir.path().filename();
    EXPECT_EQ(s.canonical_request, Slurp(dir.path() / "header-canonical-request.txt")) << name;
    EXPECT_EQ(s.string_to_sign, Slurp(dir.path() / "header-string-to-sign.txt")) << name;
    EXPECT_EQ(s.signature, Slurp(dir.path() / "header-signature.txt")) << name;
    ++cases;
  }
  EXPECT_EQ(cases, 38u);  // every v4 case of the suite
}

TEST(SigV4, AuthorizationHeaderAndS3Paths) {
  Request r;
  r.method = "GET";
  r.path = "/";
  r.headers = {{"Host", "example.amazonaws.com"}};
  r.payload_sha256 = Sha256Hex("");
  Options o;
  o.content_sha256_header = false;
  const Signed s = SignV4(r, {"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""},
                          {"us-east-1", "service"}, "20150830T123600Z", o);
  ASSERT_EQ(s.add_headers.back().first, "Authorization");
  EXPECT_EQ(s.add_headers.back().second,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            "SignedHeaders=host;x-amz-date, "
            "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
  // S3 keys are not normalized: dots and double slashes stay, each byte encoded once.
  r.path = "/bucket/a//b/../c d.ndjson";
  const Signed k = SignV4(r, {"A", "S", ""}, {"us-east-1", "s3"}, "20150830T123600Z");
  EXPECT_EQ(k.canonical_request.substr(0, k.canonical_request.find('\n', 4)),
            "GET\n/bucket/a//b/../c%20d.ndjson");
  EXPECT_NE(k.canonical_request.find("x-amz-content-sha256:" + Sha256Hex("")),
            std::string::npos);
  EXPECT_EQ(AmzDate(1440938160), "20150830T123600Z");
  EXPECT_EQ(UriEncode("a b/ሴ~", false), "a%20b%2F%E1%88%B4~");
}

}  // namespace
}  // namespace kayak::s3
