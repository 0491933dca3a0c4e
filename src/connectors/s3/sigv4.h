// AWS Signature Version 4 for the s3 output: the canonical request, the
// string to sign and the Authorization header, from a request's method,
// path, query, headers and payload hash. docs/durability.md, "s3" (to come);
// tested against AWS's published test suite (src/connectors/s3/sigv4_test.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kayak::s3 {

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // "" = none
};

struct Scope {
  std::string region;   // us-east-1
  std::string service;  // s3
};

using Pairs = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method;  // GET, PUT, POST, ...
  std::string path;    // not encoded: "/bucket/a key"
  Pairs query;         // names and values, not encoded
  Pairs headers;       // as they will be sent (host among them)
  std::string payload_sha256;  // hex SHA-256 of the body, or UNSIGNED-PAYLOAD
};

struct Options {
  // RFC 3986 path normalization (dot segments, repeated slashes): every
  // service but S3, whose keys are taken as they are.
  bool normalize_path = false;
  // Sign (and send) x-amz-content-sha256, as S3 requires.
  bool content_sha256_header = true;
};

struct Signed {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;  // hex
  // The headers to add to the request: x-amz-date, x-amz-content-sha256 (with
  // content_sha256_header), x-amz-security-token (with a session token) and
  // Authorization.
  Pairs add_headers;
};

// Signs `r` at `amz_date` (YYYYMMDDTHHMMSSZ, UTC).
Signed SignV4(const Request& r, const Credentials& c, const Scope& scope,
              std::string_view amz_date, const Options& o = {});

// YYYYMMDDTHHMMSSZ for a Unix time in seconds.
std::string AmzDate(int64_t unix_secs);
std::string Sha256Hex(std::string_view data);
// Percent-encodes every byte but A-Z a-z 0-9 - . _ ~ (and / when keep_slash).
std::string UriEncode(std::string_view s, bool keep_slash);

}  // namespace kayak::s3
